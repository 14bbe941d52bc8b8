/* Compiled kernels where numpy has no fast form: the byte transpose of a chunk into the
 * Fortran order that precomputed raw chunks are stored in (here), compressed_segmentation
 * (_cseg.c).
 *
 * numpy copies a C-ordered block into Fortran order element by element along the output,
 * reading one byte every few KiB (4 KiB strides also alias in the L1 cache): about 50 MB/s
 * for uint8. Here the copy goes tile by tile (TILE x TILE elements of the output's fastest
 * axis and the input's), so both sides stay in cache. The GIL is released during the copy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_kernels.h"

#define TILE 64
#define MAX_DIMS 8

/* Move one tile through a small buffer: each input row (along axis a) is read once, each
 * output row (along axis 0) written once. Going straight from input to output instead reads
 * TILE rows that are a power of two apart, which share one cache set and evict each other. */
#define TRANSPOSE_TILE(T)                                                                 \
    do {                                                                                  \
        T *b = (T *)buffer;                                                               \
        for (Py_ssize_t x = x0; x < x1; x++) {                                            \
            const char *in = src + x * s0 + a0 * sa;                                      \
            for (Py_ssize_t j = a0; j < a1; j++, in += sa)                                \
                memcpy(&b[(j - a0) * TILE + (x - x0)], in, sizeof(T));                    \
        }                                                                                 \
        for (Py_ssize_t j = a0; j < a1; j++)                                              \
            memcpy(dst + j * pa + x0 * (Py_ssize_t)sizeof(T), &b[(j - a0) * TILE],        \
                   (x1 - x0) * sizeof(T));                                                \
    } while (0)

static void plane(char *dst, const char *src, Py_ssize_t d0, Py_ssize_t s0, Py_ssize_t da,
                  Py_ssize_t sa, Py_ssize_t pa, Py_ssize_t k) {
    /* dst[x * k + j * pa] = src[x * s0 + j * sa] for x < d0, j < da */
    uint64_t buffer[TILE * TILE];
    for (Py_ssize_t a0 = 0; a0 < da; a0 += TILE) {
        Py_ssize_t a1 = a0 + TILE < da ? a0 + TILE : da;
        for (Py_ssize_t x0 = 0; x0 < d0; x0 += TILE) {
            Py_ssize_t x1 = x0 + TILE < d0 ? x0 + TILE : d0;
            switch (k) {
            case 1: TRANSPOSE_TILE(uint8_t); break;
            case 2: TRANSPOSE_TILE(uint16_t); break;
            case 4: TRANSPOSE_TILE(uint32_t); break;
            case 8: TRANSPOSE_TILE(uint64_t); break;
            default:
                for (Py_ssize_t j = a0; j < a1; j++)
                    for (Py_ssize_t x = x0; x < x1; x++)
                        memcpy(dst + x * k + j * pa, src + x * s0 + j * sa, k);
            }
        }
    }
}

static PyObject *fortran_bytes(PyObject *self, PyObject *arg) {
    Py_buffer view;
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
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL || total == 0) {
        PyBuffer_Release(&view);
        return out;
    }
    char *dst = PyBytes_AS_STRING(out);
    const char *src = view.buf;
    /* the input's fastest axis past axis 0: transposed against axis 0 tile by tile */
    int a = -1;
    for (int i = 1; i < n; i++)
        if (d[i] > 1 && (a < 0 || llabs((long long)s[i]) < llabs((long long)s[a])))
            a = i;
    Py_BEGIN_ALLOW_THREADS
    if (a < 0) { /* one axis of length > 1 at most: axis 0 */
        plane(dst, src, d[0], s[0], 1, 0, 0, k);
    } else {
        Py_ssize_t index[MAX_DIMS] = {0};
        for (;;) { /* every position of the axes other than 0 and a */
            const char *in = src;
            char *o = dst;
            for (int i = 1; i < n; i++)
                if (i != a) {
                    in += index[i] * s[i];
                    o += index[i] * p[i];
                }
            plane(o, in, d[0], s[0], d[a], s[a], p[a], k);
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
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"fortran_bytes", fortran_bytes, METH_O,
     "fortran_bytes(array) -> bytes: the array's items in Fortran order (any strides)."},
    {"cseg_decode", cseg_decode, METH_VARARGS,
     "cseg_decode(words, start, xyz, block, entry, out) -> -1, or a block indexing past its "
     "table"},
    {"cseg_encode", cseg_encode, METH_VARARGS,
     "cseg_encode(array, block, lead) -> the channel's words after lead free ones (bytes), "
     "or None if its offsets overflow 24 bits"},
    {"block_mean", block_mean, METH_VARARGS,
     "block_mean(array, block, out): out = array's block means, rounded half to even"},
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
