/* minishard_tables: the entries of many raw minishard indices, decoded and checked in one pass.
 *
 * A minishard index is a [3, n] table of little-endian uint64: key deltas, offset deltas
 * (each from the end of the previous chunk) and sizes. numpy decodes many at once with a
 * dozen passes over every entry (gather the rows, two cumulative sums restarted at each
 * table, the bounds); on the 1,024 small indices of a 10,000-key read that was 5 ms of
 * 40. One pass here, without the GIL, all arithmetic modulo 2**64 as the format has it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kernels.h"

static uint64_t load(const char *p) {
    uint64_t v; /* the buffer need not be aligned */
    memcpy(&v, p, 8);
    return v;
}

PyObject *minishard_tables(PyObject *self, PyObject *args) {
    PyObject *objs[5];
    unsigned long long index_end, file_size;
    if (!PyArg_ParseTuple(args, "OOKKOOO", &objs[0], &objs[1], &index_end, &file_size, &objs[2],
                          &objs[3], &objs[4]))
        return NULL;
    Py_buffer b[5]; /* tables, counts, keys, starts, sizes */
    int held = 0;
    for (; held < 5; held++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (held >= 2 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[held], &b[held], held == 0 ? PyBUF_SIMPLE : flags) < 0)
            goto done;
    }
    Py_ssize_t n = b[1].len / 8, total = 0;
    const int64_t *counts = b[1].buf;
    int ok = int_kind(b[1].format, b[1].itemsize) == -8;
    for (int i = 2; i < 5; i++)
        ok = ok && int_kind(b[i].format, b[i].itemsize) == 8;
    for (Py_ssize_t k = 0; ok && k < n; k++) {
        ok = counts[k] >= 0 && counts[k] <= PY_SSIZE_T_MAX / 24 - total;
        total += counts[k];
    }
    if (!ok || b[0].len != 24 * total || b[2].len != 8 * total || b[3].len != 8 * total ||
        b[4].len != 8 * total) {
        PyErr_SetString(PyExc_ValueError,
                        "minishard_tables: tables of 24 bytes per entry, int64 counts summing "
                        "to the entries, uint64 outputs of one entry each");
        goto done;
    }
    Py_ssize_t bad = -1;
    int rising = 1;
    Py_BEGIN_ALLOW_THREADS
    const char *t = b[0].buf;
    uint64_t *keys = b[2].buf, *starts = b[3].buf, *sizes = b[4].buf;
    const uint64_t begin = index_end, end = file_size;
    Py_ssize_t j = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const Py_ssize_t c = counts[k];
        uint64_t key = 0, at = 0;
        for (Py_ssize_t i = 0; i < c; i++, j++) {
            const uint64_t before = key;
            key += load(t + 8 * i);
            at += load(t + 8 * (c + i));
            const uint64_t start = begin + at, size = load(t + 8 * (2 * c + i));
            at += size;
            keys[j] = key;
            starts[j] = start;
            sizes[j] = size;
            if (bad < 0 && (start > end || size > end - start || start < begin))
                bad = j;
            if (i > 0 && key <= before)
                rising = 0;
        }
        t += 24 * c;
    }
    Py_END_ALLOW_THREADS
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&b[i]);
    return Py_BuildValue("(nO)", bad, rising ? Py_True : Py_False);
done:
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&b[i]);
    return NULL;
}
