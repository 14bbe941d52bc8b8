/* Compiled kernels where numpy has no fast form: the byte transpose of a chunk into the
 * Fortran order that precomputed raw chunks are stored in (here), compressed_segmentation
 * (_cseg.c), the server's plain answers (_serve.c).
 *
 * numpy copies a C-ordered block into Fortran order element by element along the output,
 * reading one byte every few KiB (4 KiB strides also alias in the L1 cache): about 50 MB/s
 * for uint8. Here the copy goes tile by tile (TILE x TILE elements of the output's fastest
 * axis and the input's), so both sides stay in cache; items of 1, 2 or 4 bytes move 8 bytes
 * at a time, blocks of them transposed in registers. The GIL is released during the copy.
 * Copies into large results past the cache: _stream.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_kernels.h"

#define TILE 64
#define MAX_DIMS 8

/* Transpose an R x R block of items of k bytes (R = 8 / k) held in R words, one input row a
 * word, by swapping ever larger sub-blocks between rows (Hacker's Delight's transpose8 over
 * separate words): word r then holds column r. Little endian: item c of a row is at byte c*k. */
static inline void transpose_words(uint64_t *r, Py_ssize_t k) {
    for (Py_ssize_t s = k; s < 8; s *= 2) { /* sub-blocks of s bytes a row */
        const int bits = (int)(8 * s);
        const uint64_t m = s == 1   ? 0x00FF00FF00FF00FFull
                           : s == 2 ? 0x0000FFFF0000FFFFull
                                    : 0x00000000FFFFFFFFull;
        const Py_ssize_t d = s / k, rows = 8 / k;
        for (Py_ssize_t i = 0; i < rows; i++) {
            if (i & d)
                continue;
            uint64_t t = ((r[i] >> bits) ^ r[i + d]) & m;
            r[i + d] ^= t;
            r[i] ^= t << bits;
        }
    }
}

/* Move one tile through a small buffer: each input row (along axis a) is read once, each
 * output row (along axis 0) written once. Going straight from input to output instead reads
 * TILE rows that are a power of two apart, which share one cache set and evict each other.
 * Where the input's rows are contiguous (sa == k < 8), whole R x R blocks go through words. */
static void tile(char *dst, const char *src, Py_ssize_t x0, Py_ssize_t x1, Py_ssize_t a0,
                 Py_ssize_t a1, Py_ssize_t s0, Py_ssize_t sa, Py_ssize_t pa, Py_ssize_t k,
                 char *b) {
    Py_ssize_t xw = x0, aw = a0; /* the part done by words: [x0, xw) x [a0, aw) */
    if (sa == k && k < 8) {
        const Py_ssize_t R = 8 / k;
        xw = x0 + (x1 - x0) / R * R;
        aw = a0 + (a1 - a0) / R * R;
        uint64_t r[8];
        for (Py_ssize_t x = x0; x < xw; x += R)
            for (Py_ssize_t j = a0; j < aw; j += R) {
                for (Py_ssize_t q = 0; q < R; q++)
                    memcpy(&r[q], src + (x + q) * s0 + j * k, 8);
                transpose_words(r, k);
                for (Py_ssize_t q = 0; q < R; q++)
                    memcpy(b + ((j + q - a0) * TILE + (x - x0)) * k, &r[q], 8);
            }
    }
    /* the rest item by item: the rows past xw, then the columns past aw of the rows before
     * (a constant size per case, so that each copy is one move) */
#define ITEMS(K)                                                                          \
    for (Py_ssize_t x = x0; x < x1; x++)                                                  \
        for (Py_ssize_t j = x < xw ? aw : a0; j < a1; j++)                                \
            memcpy(b + ((j - a0) * TILE + (x - x0)) * (K), src + x * s0 + j * sa, (K))
    switch (k) {
    case 1: ITEMS(1); break;
    case 2: ITEMS(2); break;
    case 4: ITEMS(4); break;
    case 8: ITEMS(8); break;
    default: ITEMS(k);
    }
#undef ITEMS
    for (Py_ssize_t j = a0; j < a1; j++)
        memcpy(dst + j * pa + x0 * k, b + (j - a0) * TILE * k, (x1 - x0) * k);
}

static void plane(char *dst, const char *src, Py_ssize_t d0, Py_ssize_t s0, Py_ssize_t da,
                  Py_ssize_t sa, Py_ssize_t pa, Py_ssize_t k, char *buffer) {
    /* dst[x * k + j * pa] = src[x * s0 + j * sa] for x < d0, j < da */
    for (Py_ssize_t a0 = 0; a0 < da; a0 += TILE) {
        Py_ssize_t a1 = a0 + TILE < da ? a0 + TILE : da;
        for (Py_ssize_t x0 = 0; x0 < d0; x0 += TILE) {
            Py_ssize_t x1 = x0 + TILE < d0 ? x0 + TILE : d0;
            tile(dst, src, x0, x1, a0, a1, s0, sa, pa, k, buffer);
        }
    }
}

/* fortran_bytes(array[, out]): the items in Fortran order, as new bytes, or written into the
 * writable buffer out (exactly as long), returning None. */
static PyObject *fortran_bytes(PyObject *self, PyObject *args) {
    PyObject *arg, *target = NULL;
    if (!PyArg_ParseTuple(args, "O|O", &arg, &target))
        return NULL;
    Py_buffer view, into = {0};
    if (PyObject_GetBuffer(arg, &view, PyBUF_RECORDS_RO) < 0)
        return NULL;
    int n = view.ndim;
    Py_ssize_t k = view.itemsize;
    if (n < 1 || n > MAX_DIMS || k < 1) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "fortran_bytes: 1 to 8 dimensions");
        return NULL;
    }
    Py_ssize_t d[MAX_DIMS], s[MAX_DIMS], p[MAX_DIMS], total = k;
    for (int i = 0; i < n; i++) {
        d[i] = view.shape[i];
        s[i] = view.strides[i];
        p[i] = total; /* output strides: Fortran order */
        total *= d[i];
    }
    PyObject *out;
    char *dst;
    if (target != NULL && target != Py_None) {
        if (PyObject_GetBuffer(target, &into, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (into.len != total) {
            PyBuffer_Release(&view);
            PyBuffer_Release(&into);
            PyErr_SetString(PyExc_ValueError, "fortran_bytes: out is not the array's size");
            return NULL;
        }
        out = Py_NewRef(Py_None);
        dst = into.buf;
    } else {
        out = PyBytes_FromStringAndSize(NULL, total);
        dst = out == NULL ? NULL : PyBytes_AS_STRING(out);
    }
    char *buffer = out == NULL || total == 0 ? NULL : malloc(TILE * TILE * k);
    if (buffer == NULL) {
        PyBuffer_Release(&view);
        if (into.obj != NULL)
            PyBuffer_Release(&into);
        if (out == NULL || total == 0)
            return out;
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    const char *src = view.buf;
    /* rows along axis 0 lie contiguous (Fortran-ordered input): copied whole; otherwise the
     * input's fastest axis past axis 0 is transposed against axis 0 tile by tile */
    const int rows = s[0] == k;
    int a = -1;
    for (int i = 1; i < n && !rows; i++)
        if (d[i] > 1 && (a < 0 || llabs((long long)s[i]) < llabs((long long)s[a])))
            a = i;
    Py_BEGIN_ALLOW_THREADS
    if (a < 0 && !rows) { /* one axis of length > 1 at most: axis 0 */
        plane(dst, src, d[0], s[0], 1, 0, 0, k, buffer);
    } else {
        Py_ssize_t index[MAX_DIMS] = {0};
        for (;;) { /* every position of the axes other than 0 and a (if any) */
            const char *in = src;
            char *o = dst;
            for (int i = 1; i < n; i++)
                if (i != a) {
                    in += index[i] * s[i];
                    o += index[i] * p[i];
                }
            if (rows)
                memcpy(o, in, d[0] * k);
            else
                plane(o, in, d[0], s[0], d[a], s[a], p[a], k, buffer);
            int i = 1;
            for (; i < n; i++) {
                if (i == a)
                    continue;
                if (++index[i] < d[i])
                    break;
                index[i] = 0;
            }
            if (i == n)
                break;
        }
    }
    Py_END_ALLOW_THREADS
    free(buffer);
    PyBuffer_Release(&view);
    if (into.obj != NULL)
        PyBuffer_Release(&into);
    return out;
}

static PyMethodDef methods[] = {
    {"fortran_bytes", fortran_bytes, METH_VARARGS,
     "fortran_bytes(array[, out]) -> bytes: the array's items in Fortran order (any strides); "
     "written into the buffer out (None returned) where given."},
    {"cseg_decode", cseg_decode, METH_VARARGS,
     "cseg_decode(words, start, block, entry, out, stream=False) -> -1, or a block indexing "
     "past its table; out: the (x, y, z) array decoded into, any strides; stream: rows of "
     "whole aligned cache lines written past the cache"},
    {"cseg_encode", cseg_encode, METH_VARARGS,
     "cseg_encode(array, block, head) -> head, then the channel's words (bytes), "
     "or None if its offsets overflow 24 bits"},
    {"block_mean", block_mean, METH_VARARGS,
     "block_mean(array, block, out): out = array's block means, rounded half to even"},
    {"block_mode", block_mode, METH_VARARGS,
     "block_mode(array, block, out, sparse): out = array's block modes, the smallest on ties"},
    {"stream_copy", stream_copy, METH_VARARGS,
     "stream_copy(dst, src): dst[...] = src (one shape, the last axis contiguous in both), "
     "rows of whole aligned cache lines written past the cache"},
    {"minishard_tables", minishard_tables, METH_VARARGS,
     "minishard_tables(tables, counts, index_end, file_size, keys, starts, sizes) -> (first "
     "entry outside the data region or -1, keys rising in every table): raw minishard "
     "indices decoded into the uint64 outputs (see _minishard.c)"},
#if !defined(_WIN32)
    {"pread_spans", pread_spans, METH_VARARGS,
     "pread_spans(fd, spans) -> [bytes]: the int64 (start, end) spans of the file fd, read "
     "without the GIL; short where the file ends"},
#endif
#if defined(__linux__)
    {"serve_quick", serve_quick, METH_VARARGS,
     "serve_quick(fd, data, table) -> (bytes of data answered, None | False | pending): "
     "plain GETs of checked local files answered on the socket fd (see _serve.c)"},
#endif
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "Compiled kernels of ngshard.", -1, methods};

PyMODINIT_FUNC PyInit__kernels(void) {
    const uint16_t one = 1; /* the stored formats are little endian; so are the kernels */
    if (*(const uint8_t *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "ngshard._kernels needs a little-endian machine");
        return NULL;
    }
    return PyModule_Create(&module);
}
