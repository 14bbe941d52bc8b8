/* serve_quick: the answers a viewer asks for most - GET of a byte range of a local file the
 * server has looked up and checked before - made and sent without the interpreter.
 *
 * ngshard.server.quick says when it is used and why. Here: request heads are read from the
 * start of `data` while each is a plain one (see `plain_head`) for a target in `table`, whose
 * file still has the inode, size and modification time it was checked with; each is answered
 * with the head the Python path would send (byte for byte, Date aside) and the file's bytes
 * by sendfile. Anything else stops the scan, and the interpreter answers from there, so a
 * request this code cannot answer exactly as the Python path would is never answered here.
 *
 * Linux only (sendfile's signature, MSG_MORE); elsewhere the function is absent.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_kernels.h"

#if defined(__linux__)
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_QUICK_HEAD 8192 /* longer heads go the slow way (which bounds them at MAX_HEAD) */
#define MAX_QUICK_FIELDS 100 /* limits.MAX_FIELDS: more is answered 431 by the slow way */
#define MAX_TURN 32 /* requests answered per call: exchange._TURN */
#define HEAD_ROOM 1024 /* status line, Date, Content-Range, Content-Length */

/* A field this code does not look at, but the Python path reads for a plain file: its
 * presence sends the request the slow way. The test of this module holds the list beside
 * what the server's modules read (tests/server/test_quick.py). */
static int changes_answer(const char *name, Py_ssize_t n) {
    if (n >= 3 && strncasecmp(name, "if-", 3) == 0)
        return 1;
    return (n == 14 && strncasecmp(name, "content-length", 14) == 0) ||
           (n == 17 && strncasecmp(name, "transfer-encoding", 17) == 0);
}

static int is_token(unsigned char c) {
    if (c >= '0' && c <= '9')
        return 1;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
        return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Digits [p, q) as a number (1 to 18 of them), or -1. */
static long long number(const char *p, const char *q) {
    if (q <= p || q - p > 18)
        return -1;
    long long v = 0;
    for (; p < q; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* The [start, end) a Range value selects from `size` bytes, as ranges.byte_range gives it
 * for its forms bytes=a-b, bytes=a- and bytes=-n with at most 18 digits each; 0 for any
 * other value, or a range it answers 416 or 200. */
static int range_of(const char *v, Py_ssize_t n, long long size, long long *start,
                    long long *end) {
    if (n < 8 || memcmp(v, "bytes=", 6) != 0)
        return 0;
    const char *p = v + 6, *q = v + n, *dash = memchr(p, '-', (size_t)(q - p));
    if (dash == NULL)
        return 0;
    if (dash == p) { /* the last n bytes */
        long long k = number(dash + 1, q);
        if (k <= 0 || size == 0)
            return 0;
        *start = k < size ? size - k : 0;
        *end = size;
        return 1;
    }
    long long a = number(p, dash);
    long long b = dash + 1 == q ? size - 1 : number(dash + 1, q);
    if (a < 0 || b < 0 || b < a || a >= size)
        return 0;
    *start = a;
    *end = b + 1 < size ? b + 1 : size;
    return 1;
}

/* Whether [p, q) holds one plain request head of HTTP/1.1 GET, CRLF line ends, fields well
 * formed, none that changes a file's answer, Connection (if any) keep-alive; its target and
 * Range value (NULL if none) are set. 0 otherwise, also for a head not complete in [p, q):
 * *len is its length with the blank line when complete. */
static int plain_head(const char *p, const char *q, const char **target, Py_ssize_t *tlen,
                      const char **range, Py_ssize_t *rlen, Py_ssize_t *len) {
    const char *start = p;
    if (q - p > MAX_QUICK_HEAD)
        q = p + MAX_QUICK_HEAD;
    if (q - p < 4 || memcmp(p, "GET ", 4) != 0)
        return 0;
    p += 4;
    const char *t = p;
    while (p < q && (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f)
        p++;
    if (p == t || q - p < 11 || memcmp(p, " HTTP/1.1\r\n", 11) != 0)
        return 0;
    *target = t;
    *tlen = p - t;
    p += 11;
    *range = NULL;
    int connection = 0, fields = 0;
    for (;;) {
        if (q - p < 2)
            return 0;
        if (p[0] == '\r' && p[1] == '\n') {
            *len = p + 2 - start;
            return 1;
        }
        if (++fields > MAX_QUICK_FIELDS)
            return 0;
        const char *name = p;
        while (p < q && is_token((unsigned char)*p))
            p++;
        if (p == name || p == q || *p != ':')
            return 0;
        Py_ssize_t nlen = p - name;
        p++;
        const char *v = p;
        while (p < q && *p != '\r' && *p != '\n') {
            unsigned char c = (unsigned char)*p;
            if (c < 0x20 ? c != '\t' : c == 0x7f)
                return 0;
            p++;
        }
        if (q - p < 2 || p[0] != '\r' || p[1] != '\n')
            return 0;
        const char *e = p;
        p += 2;
        while (v < e && (*v == ' ' || *v == '\t'))
            v++;
        while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (changes_answer(name, nlen))
            return 0;
        if (nlen == 5 && strncasecmp(name, "range", 5) == 0) {
            if (*range != NULL)
                return 0;
            *range = v;
            *rlen = e - v;
        } else if (nlen == 10 && strncasecmp(name, "connection", 10) == 0) {
            if (connection++ || e - v != 10 || strncasecmp(v, "keep-alive", 10) != 0)
                return 0;
        }
    }
}

/* "Date: <IMF-fixdate>\r\n" of this second, as protocol.format_head writes it. */
static Py_ssize_t date_field(char *out) {
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    return sprintf(out, "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n", days[tm.tm_wday],
                   tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                   tm.tm_sec);
}

/* A table entry: (fd, path, st_dev, st_ino, st_size, st_mtime_ns, fields, file). */
typedef struct {
    int fd;
    const char *path;
    unsigned long long dev, ino;
    long long size, mtime_ns;
    const char *fields;
    Py_ssize_t flen;
    PyObject *file;
} Entry;

static int entry_of(PyObject *tuple, Entry *e) {
    PyObject *file;
    if (!PyArg_ParseTuple(tuple, "iyKKLLy#O", &e->fd, &e->path, &e->dev, &e->ino, &e->size,
                          &e->mtime_ns, &e->fields, &e->flen, &file))
        return 0;
    e->file = file;
    return 1;
}

/* Whether the entry's path still names the file it was checked as. */
static int unchanged(const Entry *e) {
    struct stat st;
    if (stat(e->path, &st) != 0)
        return 0;
    return (unsigned long long)st.st_dev == e->dev && (unsigned long long)st.st_ino == e->ino &&
           (long long)st.st_size == e->size &&
           (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec == e->mtime_ns;
}

PyObject *serve_quick(PyObject *self, PyObject *args) {
    int sock;
    Py_buffer data;
    PyObject *table;
    if (!PyArg_ParseTuple(args, "iy*O!", &sock, &data, &PyDict_Type, &table))
        return NULL;
    const char *p = data.buf, *q = p + data.len;
    char *head = NULL;
    Py_ssize_t room = 0;
    PyObject *outcome = Py_None;
    Py_INCREF(outcome);
    for (int turn = 0; turn < MAX_TURN && p < q; turn++) {
        const char *target, *range;
        Py_ssize_t tlen, rlen = 0, len;
        if (!plain_head(p, q, &target, &tlen, &range, &rlen, &len))
            break;
        PyObject *key = PyBytes_FromStringAndSize(target, tlen);
        if (key == NULL)
            goto fail;
        PyObject *found = PyDict_GetItemWithError(table, key); /* borrowed */
        Py_DECREF(key);
        if (found == NULL) {
            if (PyErr_Occurred())
                goto fail;
            break;
        }
        Py_INCREF(found); /* held while the socket is written to (no other thread runs) */
        Entry e;
        if (!entry_of(found, &e)) {
            Py_DECREF(found);
            goto fail;
        }
        long long start = 0, end = e.size;
        int partial = range != NULL;
        if ((partial && !range_of(range, rlen, e.size, &start, &end)) || !unchanged(&e)) {
            Py_DECREF(found);
            break;
        }
        if (room < e.flen + HEAD_ROOM) {
            PyMem_Free(head);
            room = e.flen + HEAD_ROOM;
            head = PyMem_Malloc((size_t)room);
            if (head == NULL) {
                Py_DECREF(found);
                PyErr_NoMemory();
                goto fail;
            }
        }
        Py_ssize_t h = partial ? sprintf(head, "HTTP/1.1 206 Partial Content\r\n")
                               : sprintf(head, "HTTP/1.1 200 OK\r\n");
        h += date_field(head + h);
        if (partial)
            h += sprintf(head + h, "Content-Range: bytes %lld-%lld/%lld\r\n", start, end - 1,
                         e.size);
        h += sprintf(head + h, "Content-Length: %lld\r\n", end - start);
        memcpy(head + h, e.fields, (size_t)e.flen);
        h += e.flen;
        memcpy(head + h, "\r\n", 2);
        h += 2;
        p += len;
        /* The head waits for the body (MSG_MORE), and both leave in one packet. */
        Py_ssize_t sent = 0;
        while (sent < h) {
            ssize_t n = send(sock, head + sent, (size_t)(h - sent),
                             MSG_NOSIGNAL | (end > start ? MSG_MORE : 0));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (n < 0) {
                Py_DECREF(found);
                Py_SETREF(outcome, Py_NewRef(Py_False));
                goto done;
            }
            sent += n;
        }
        off_t offset = (off_t)start;
        while (sent == h && offset < end) {
            ssize_t n = sendfile(sock, e.fd, &offset, (size_t)(end - offset));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (n <= 0) { /* the connection failed, or the file shrank under us */
                Py_DECREF(found);
                Py_SETREF(outcome, Py_NewRef(Py_False));
                goto done;
            }
        }
        if (sent < h || offset < end) { /* the socket is full: the loop sends the rest */
            PyObject *pending = Py_BuildValue("(Oy#LL)", e.file, head + sent, h - sent,
                                              (long long)offset, end);
            Py_DECREF(found);
            if (pending == NULL)
                goto fail;
            Py_SETREF(outcome, pending);
            break;
        }
        Py_DECREF(found);
    }
done:;
    Py_ssize_t consumed = p - (const char *)data.buf;
    PyMem_Free(head);
    PyBuffer_Release(&data);
    return Py_BuildValue("(nN)", consumed, outcome);
fail:
    PyMem_Free(head);
    PyBuffer_Release(&data);
    Py_DECREF(outcome);
    return NULL;
}

#endif
