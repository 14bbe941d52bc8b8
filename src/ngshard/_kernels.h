/* The functions of ngshard._kernels defined outside _kernels.c. */
#ifndef NGSHARD_KERNELS_H
#define NGSHARD_KERNELS_H
#include <Python.h>
#include <stdint.h>

PyObject *cseg_decode(PyObject *self, PyObject *args);
PyObject *cseg_encode(PyObject *self, PyObject *args);
PyObject *block_mean(PyObject *self, PyObject *args);
PyObject *block_mode(PyObject *self, PyObject *args);
PyObject *stream_copy(PyObject *self, PyObject *args);
PyObject *minishard_tables(PyObject *self, PyObject *args);
#if !defined(_WIN32)
PyObject *pread_spans(PyObject *self, PyObject *args);
#endif
#if defined(__linux__)
PyObject *serve_quick(PyObject *self, PyObject *args);
#endif
/* 1, 2, 4, 8: an unsigned integer buffer format of so many bytes; negative: signed; 0: other */
int int_kind(const char *format, Py_ssize_t itemsize);
/* The input and output buffers of a block reduction `name`, got and checked: 4-d integer
 * arrays of one type of at most `max_bytes`, blocks of at most `max_block` voxels, the
 * output's shape the input's over the block. Returns their int_kind, or 0 with a ValueError
 * set and no buffer held. */
int block_buffers(PyObject *in_obj, PyObject *out_obj, const Py_ssize_t block[3],
                  Py_buffer *in, Py_buffer *out, const char *name, int max_bytes,
                  Py_ssize_t max_block);

/* M(the element type of an int_kind `kind`) */
#define BY_INT_KIND(kind, M)                                                              \
    do {                                                                                  \
        switch (kind) {                                                                   \
        case 1: M(uint8_t); break;                                                        \
        case 2: M(uint16_t); break;                                                       \
        case 4: M(uint32_t); break;                                                       \
        case 8: M(uint64_t); break;                                                       \
        case -1: M(int8_t); break;                                                        \
        case -2: M(int16_t); break;                                                       \
        case -4: M(int32_t); break;                                                       \
        default: M(int64_t); break;                                                       \
        }                                                                                 \
    } while (0)

#endif
