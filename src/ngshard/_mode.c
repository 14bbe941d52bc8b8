/* Block modes of integer arrays (segmentations), for pyramids: the most frequent value of
 * each block, the smallest on ties (tensorstore's `downsample` driver); in sparse mode
 * (igneous' --sparse) zero counts for nothing unless the block holds nothing else.
 *
 * numpy needs a comparison pass per voxel of a block over strided views, boolean masks and
 * gathers of the mixed blocks: about half of a segmentation pyramid task. Here each block's
 * values are gathered once: a block of one value (most of a segmentation's) is its value,
 * the others are sorted in place (at most MAX_BLOCK values) and their longest run taken.
 * The GIL is released during the pass.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_kernels.h"

#define MAX_BLOCK 64

/* out = the mode of the block at `base` (strides s0, s1, s2, sizes b0, b1, b2) */
#define MODE_OF(T)                                                                        \
    do {                                                                                  \
        T v[MAX_BLOCK];                                                                   \
        int m = 0, same = 1;                                                              \
        for (Py_ssize_t k = 0; k < b2; k++)                                               \
            for (Py_ssize_t j = 0; j < b1; j++) {                                         \
                const char *p = base + k * s2 + j * s1;                                   \
                for (Py_ssize_t i = 0; i < b0; i++, p += s0) {                            \
                    v[m] = *(const T *)p;                                                 \
                    same &= v[m] == v[0];                                                 \
                    m++;                                                                  \
                }                                                                         \
            }                                                                             \
        T best = v[0];                                                                    \
        if (!same) {                                                                      \
            for (int a = 1; a < m; a++) { /* insertion sort: blocks are small */         \
                T x = v[a];                                                               \
                int b = a - 1;                                                            \
                for (; b >= 0 && v[b] > x; b--)                                           \
                    v[b + 1] = v[b];                                                      \
                v[b + 1] = x;                                                             \
            }                                                                             \
            int most = -1; /* the first longest run: the smallest value on ties */        \
            for (int a = 0; a < m;) {                                                     \
                int e = a + 1;                                                            \
                while (e < m && v[e] == v[a])                                             \
                    e++;                                                                  \
                int count = sparse && v[a] == 0 ? 0 : e - a;                              \
                if (count > most) {                                                       \
                    most = count;                                                         \
                    best = v[a];                                                          \
                }                                                                         \
                a = e;                                                                    \
            }                                                                             \
        }                                                                                 \
        *(T *)dst = best;                                                                 \
    } while (0)

/* every block of the output, in its memory order (axis 0 fastest) */
#define MODES(T)                                                                          \
    do {                                                                                  \
        for (Py_ssize_t c = 0; c < out.shape[3]; c++)                                     \
            for (Py_ssize_t z = 0; z < out.shape[2]; z++)                                 \
                for (Py_ssize_t y = 0; y < out.shape[1]; y++) {                           \
                    const char *base = (const char *)in.buf + c * in.strides[3] +         \
                                       z * b2 * s2 + y * b1 * s1;                         \
                    char *dst = (char *)out.buf + c * out.strides[3] +                    \
                                z * out.strides[2] + y * out.strides[1];                  \
                    for (Py_ssize_t x = 0; x < out.shape[0];                              \
                         x++, base += b0 * s0, dst += out.strides[0])                     \
                        MODE_OF(T);                                                       \
                }                                                                         \
    } while (0)

PyObject *block_mode(PyObject *self, PyObject *args) {
    PyObject *in_obj, *out_obj;
    Py_ssize_t block[3];
    int sparse;
    if (!PyArg_ParseTuple(args, "O(nnn)Op", &in_obj, &block[0], &block[1], &block[2],
                          &out_obj, &sparse))
        return NULL;
    Py_buffer in, out;
    int kind = block_buffers(in_obj, out_obj, block, &in, &out, "block_mode", 8, MAX_BLOCK);
    if (kind == 0)
        return NULL;
    const Py_ssize_t b0 = block[0], b1 = block[1], b2 = block[2], s0 = in.strides[0],
                     s1 = in.strides[1], s2 = in.strides[2];
    Py_BEGIN_ALLOW_THREADS
    BY_INT_KIND(kind, MODES);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}
