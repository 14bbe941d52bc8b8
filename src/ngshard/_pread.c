/* pread_spans: many byte ranges of one open file, read with the GIL released once.
 *
 * A batch read of 10,000 small values from a local shard is 10,000 preads. From Python each
 * takes and gives back the GIL, so the threads reading several files at once spend their
 * time handing it over (tools/bench_kv.py: 18 ms of 50 in the reads, summed over threads).
 * Here the result's bytes objects are made first, then every pread runs without the GIL, and
 * a range that ends past the end of the file comes back short, as os.pread's would.
 *
 * POSIX only (pread); elsewhere the function is absent, as os.pread is.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_kernels.h"

#if !defined(_WIN32)
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

PyObject *pread_spans(PyObject *self, PyObject *args) {
    int fd;
    PyObject *spans_obj;
    if (!PyArg_ParseTuple(args, "iO", &fd, &spans_obj))
        return NULL;
    Py_buffer spans;
    if (PyObject_GetBuffer(spans_obj, &spans, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    const Py_ssize_t n = spans.len / 16;
    const int64_t *se = spans.buf;
    if (int_kind(spans.format, spans.itemsize) != -8 || spans.len % 16) {
        PyBuffer_Release(&spans);
        PyErr_SetString(PyExc_ValueError, "pread_spans: spans must be int64 (start, end) pairs");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (se[2 * i] < 0 || se[2 * i + 1] < se[2 * i]) {
            PyBuffer_Release(&spans);
            PyErr_Format(PyExc_ValueError, "pread_spans: span %zd is [%lld, %lld)", i,
                         (long long)se[2 * i], (long long)se[2 * i + 1]);
            return NULL;
        }
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        PyBuffer_Release(&spans);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(se[2 * i + 1] - se[2 * i]));
        if (b == NULL) {
            Py_DECREF(out);
            PyBuffer_Release(&spans);
            return NULL;
        }
        PyList_SET_ITEM(out, i, b);
    }
    /* the bytes read of each span, known once the GIL is back */
    Py_ssize_t *got = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    if (got == NULL) {
        Py_DECREF(out);
        PyBuffer_Release(&spans);
        return PyErr_NoMemory();
    }
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !error; i++) {
        char *buf = PyBytes_AS_STRING(PyList_GET_ITEM(out, i));
        const Py_ssize_t want = (Py_ssize_t)(se[2 * i + 1] - se[2 * i]);
        Py_ssize_t done = 0;
        while (done < want) {
            ssize_t r = pread(fd, buf + done, (size_t)(want - done), (off_t)(se[2 * i] + done));
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                error = errno;
                break;
            }
            if (r == 0) /* the end of the file */
                break;
            done += r;
        }
        got[i] = done;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&spans);
    if (error) {
        PyMem_Free(got);
        Py_DECREF(out);
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyList_GET_ITEM(out, i);
        if (got[i] < PyBytes_GET_SIZE(b)) { /* a short read: the file ended */
            if (_PyBytes_Resize(&b, got[i]) < 0) {
                PyList_SET_ITEM(out, i, NULL); /* _PyBytes_Resize freed it */
                PyMem_Free(got);
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, i, b);
        }
    }
    PyMem_Free(got);
    return out;
}
#endif
