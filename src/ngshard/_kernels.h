/* The functions of ngshard._kernels defined outside _kernels.c. */
#ifndef NGSHARD_KERNELS_H
#define NGSHARD_KERNELS_H
#include <Python.h>

PyObject *cseg_decode(PyObject *self, PyObject *args);
PyObject *cseg_encode(PyObject *self, PyObject *args);
PyObject *block_mean(PyObject *self, PyObject *args);
PyObject *block_mode(PyObject *self, PyObject *args);
/* 1, 2, 4, 8: an unsigned integer buffer format of so many bytes; negative: signed; 0: other */
int int_kind(const char *format, Py_ssize_t itemsize);

#endif
