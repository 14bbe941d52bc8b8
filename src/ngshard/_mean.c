/* Block means of integer arrays of up to 32 bits, rounded half to even (tensorstore's
 * `downsample` driver), for pyramids.
 *
 * numpy needs a pass per voxel of a block over strided views, a widening copy and three
 * passes to round: for a 2x2x1 uint8 mean about a sixth of a whole pyramid task. Here each
 * output row (along axis 0) sums its block's input rows into an int64 row, then rounds:
 * the input is read once, in memory order when axis 0 is the fastest (Fortran order, as
 * chunks are decoded). The GIL is released during the pass.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#include "_kernels.h"

/* acc[o] += sum of row[(o * b + i) * s] over i < b, for o < n */
#define SUM_ROW(T)                                                                        \
    do {                                                                                  \
        const char *p = row;                                                              \
        if (b0 == 1) {                                                                    \
            for (Py_ssize_t o = 0; o < n0; o++, p += s0)                                  \
                acc[o] += *(const T *)p;                                                  \
        } else if (b0 == 2) {                                                             \
            for (Py_ssize_t o = 0; o < n0; o++, p += 2 * s0)                              \
                acc[o] += (int64_t) * (const T *)p + *(const T *)(p + s0);                \
        } else {                                                                          \
            for (Py_ssize_t o = 0; o < n0; o++)                                           \
                for (Py_ssize_t i = 0; i < b0; i++, p += s0)                              \
                    acc[o] += *(const T *)p;                                              \
        }                                                                                 \
    } while (0)

/* out[o] = acc[o] / n rounded half to even (floor quotient and remainder: signed sums too) */
#define STORE_ROW(T)                                                                      \
    do {                                                                                  \
        char *p = dst;                                                                    \
        for (Py_ssize_t o = 0; o < n0; o++, p += d0) {                                    \
            int64_t s = acc[o], q = s / n, r = s % n;                                     \
            if (r < 0) {                                                                  \
                q -= 1;                                                                   \
                r += n;                                                                   \
            }                                                                             \
            q += (2 * r > n) | ((2 * r == n) & (q & 1));                                  \
            *(T *)p = (T)q;                                                               \
        }                                                                                 \
    } while (0)

PyObject *block_mean(PyObject *self, PyObject *args) {
    PyObject *in_obj, *out_obj;
    Py_ssize_t block[3];
    if (!PyArg_ParseTuple(args, "O(nnn)O", &in_obj, &block[0], &block[1], &block[2],
                          &out_obj))
        return NULL;
    Py_buffer in, out;
    int kind = block_buffers(in_obj, out_obj, block, &in, &out, "block_mean", 4, PY_SSIZE_T_MAX);
    if (kind == 0)
        return NULL;
    Py_ssize_t n0 = out.shape[0];
    int64_t *acc = malloc(sizeof(int64_t) * (n0 ? n0 : 1));
    if (acc == NULL) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        return PyErr_NoMemory();
    }
    const Py_ssize_t b0 = block[0], b1 = block[1], b2 = block[2], s0 = in.strides[0],
                     d0 = out.strides[0];
    const int64_t n = (int64_t)b0 * b1 * b2;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t c = 0; c < out.shape[3]; c++)
        for (Py_ssize_t z = 0; z < out.shape[2]; z++)
            for (Py_ssize_t y = 0; y < out.shape[1]; y++) {
                for (Py_ssize_t o = 0; o < n0; o++)
                    acc[o] = 0;
                for (Py_ssize_t k = 0; k < b2; k++)
                    for (Py_ssize_t j = 0; j < b1; j++) {
                        const char *row = (const char *)in.buf + c * in.strides[3] +
                                          (z * b2 + k) * in.strides[2] +
                                          (y * b1 + j) * in.strides[1];
                        BY_INT_KIND(kind, SUM_ROW);
                    }
                char *dst = (char *)out.buf + c * out.strides[3] + z * out.strides[2] +
                            y * out.strides[1];
                BY_INT_KIND(kind, STORE_ROW);
            }
    Py_END_ALLOW_THREADS
    free(acc);
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}
