/* The functions of ngshard._kernels defined outside _kernels.c. */
#ifndef NGSHARD_KERNELS_H
#define NGSHARD_KERNELS_H
#include <Python.h>

PyObject *cseg_decode(PyObject *self, PyObject *args);
PyObject *cseg_encode(PyObject *self, PyObject *args);
PyObject *block_mean(PyObject *self, PyObject *args);

#endif
