/* What the block reductions (_mean.c, _mode.c) share: the integer type of a buffer, and the
 * buffers of a reduction, got and checked. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_kernels.h"

int int_kind(const char *format, Py_ssize_t itemsize) {
    char c = format ? format[0] : 'B';
    if (c == '<' || c == '=' || c == '@')
        c = format[1];
    int u = c == 'B' || c == 'H' || c == 'I' || c == 'L' || c == 'Q';
    int s = c == 'b' || c == 'h' || c == 'i' || c == 'l' || c == 'q';
    if ((!u && !s) || (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8))
        return 0;
    return u ? (int)itemsize : -(int)itemsize;
}

int block_buffers(PyObject *in_obj, PyObject *out_obj, const Py_ssize_t block[3],
                  Py_buffer *in, Py_buffer *out, const char *name, int max_bytes,
                  Py_ssize_t max_block) {
    if (PyObject_GetBuffer(in_obj, in, PyBUF_RECORDS_RO) < 0)
        return 0;
    if (PyObject_GetBuffer(out_obj, out, PyBUF_RECORDS) < 0) {
        PyBuffer_Release(in);
        return 0;
    }
    int kind = int_kind(in->format, in->itemsize);
    int ok = in->ndim == 4 && out->ndim == 4 && kind != 0 && in->itemsize <= max_bytes &&
             kind == int_kind(out->format, out->itemsize) &&
             block[0] * block[1] * block[2] <= max_block;
    for (int i = 0; ok && i < 4; i++) {
        Py_ssize_t b = i < 3 ? block[i] : 1;
        ok = b >= 1 && out->shape[i] * b == in->shape[i];
    }
    if (ok)
        return kind;
    PyBuffer_Release(in);
    PyBuffer_Release(out);
    if (max_block == PY_SSIZE_T_MAX)
        PyErr_Format(PyExc_ValueError, "%s: 4-d integer arrays of at most %d bytes, the "
                     "output's shape the input's over the block", name, max_bytes);
    else
        PyErr_Format(PyExc_ValueError, "%s: 4-d integer arrays of at most %d bytes, blocks of "
                     "at most %zd voxels, the output's shape the input's over the block", name,
                     max_bytes, max_block);
    return 0;
}
