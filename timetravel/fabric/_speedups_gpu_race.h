/* The race detector's check of a kernel start (fabric/race.py ``check_kernel``) in C, for the GPU
 * stream engine's pump. Included once, by fabric/_speedups.c, after _speedups_gpu.h.
 *
 * A happens-before check over the streams of one rank: a kernel's access to a buffer races with an
 * earlier access by another stream that is not ordered before it by the stream's vector clock.
 * Every read and write is recorded as [stream index, tick, kernel], as race.py records it. */
#ifndef _SPEEDUPS_GPU_RACE_H
#define _SPEEDUPS_GPU_RACE_H

/* The clock entry of stream ``other`` as race.check_kernel reads it (0 past the clock's end), or
 * NULL on error; a borrowed reference (or the cached small int 0). */
static PyObject *
clock_at(PyObject *clock, PyObject *other, PyObject *zero)
{
    Py_ssize_t at = PyLong_AsSsize_t(other);
    if (at == -1 && PyErr_Occurred())
        return NULL;
    if (at < PyList_GET_SIZE(clock) && at >= 0)
        return PyList_GET_ITEM(clock, at);
    if (at < 0) { /* Python indexes from the end; the engine never writes such an index */
        PyErr_SetString(PyExc_ValueError, "gpu_pump: negative stream index in an access record");
        return NULL;
    }
    return zero;
}

/* 1 when ``access`` (stream, tick, kernel) by another stream is not ordered before the kernel. */
static int
unordered(PyObject *access, Py_ssize_t index, PyObject *clock, PyObject *zero)
{
    PyObject *other, *seen;
    Py_ssize_t other_index;
    if (!(PyList_CheckExact(access) || PyTuple_CheckExact(access)) || PySequence_Fast_GET_SIZE(access) < 2) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump: an access record is not a list");
        return -1;
    }
    other = PySequence_Fast_GET_ITEM(access, 0);
    other_index = PyLong_AsSsize_t(other);
    if (other_index == -1 && PyErr_Occurred())
        return -1;
    if (other_index == index)
        return 0;
    seen = clock_at(clock, other, zero);
    if (seen == NULL)
        return -1;
    return PyObject_RichCompareBool(PySequence_Fast_GET_ITEM(access, 1), seen, Py_GT);
}

/* race._entry: the access entry of ``buffer``, created empty (a borrowed reference). */
static PyObject *
access_entry(PyObject *access, PyObject *buffer)
{
    PyObject *entry = PyDict_GetItemWithError(access, buffer), *reads;
    int failed;
    if (entry != NULL || PyErr_Occurred())
        return entry;
    if (PyDict_GET_SIZE(access) >= gpu_tracked_max) {
        PyErr_Format(PyExc_ValueError, "a rank tracks at most %ld buffers for the race detector",
                     gpu_tracked_max);
        return NULL;
    }
    reads = PyDict_New();
    entry = reads == NULL ? NULL : PyDict_New();
    failed = entry == NULL || PyDict_SetItem(entry, s_write, Py_None) < 0 ||
             PyDict_SetItem(entry, s_reads, reads) < 0 || PyDict_SetItem(access, buffer, entry) < 0;
    Py_XDECREF(reads);
    Py_XDECREF(entry);
    return failed ? NULL : PyDict_GetItemWithError(access, buffer);
}

static int
report(PyObject *ctx, PyObject *gpu, PyObject *buffer, PyObject *earlier, PyObject *earlier_verb,
       PyObject *kernel, PyObject *stream_name, PyObject *verb)
{
    PyObject *args[8] = {ctx, gpu, buffer, earlier, earlier_verb, kernel, stream_name, verb};
    PyObject *result = PyObject_Vectorcall(gpu_report, args, 8, NULL);
    if (result == NULL)
        return -1;
    Py_DECREF(result);
    return 0;
}

/* What one kernel start checks against: the rank's access table, the kernel's stream (its name,
 * index and vector clock) and the access record [index, tick, kernel] it leaves on its buffers. */
typedef struct {
    PyObject *gpu, *ctx, *access, *stream_name, *kernel, *clock, *zero, *mine;
    Py_ssize_t index;
} RaceCheck;

/* The access entry of ``buffer`` (borrowed, in *entry; its reads in *entry_reads), its last write
 * checked against the kernel: 0 (ordered, or none), 1 (a race: reported, the check ends), -1. */
static int
race_check_write(RaceCheck *check, PyObject *buffer, PyObject *verb, PyObject **entry, PyObject **entry_reads)
{
    PyObject *found[2];
    PyObject *const keys[2] = {s_write, s_reads};
    int conflict;
    *entry = access_entry(check->access, buffer);
    if (*entry == NULL || !PyDict_CheckExact(*entry) || need_many(*entry, keys, 2, found) < 0)
        return -1;
    *entry_reads = found[1];
    if (found[0] == Py_None)
        return 0;
    conflict = unordered(found[0], check->index, check->clock, check->zero);
    if (conflict <= 0)
        return conflict;
    return report(check->ctx, check->gpu, buffer, found[0], s_wrote, check->kernel, check->stream_name, verb) < 0
               ? -1
               : 1;
}

/* The kernel's reads: each buffer's last write checked, the read recorded (0, 1 or -1 as above). */
static int
race_check_reads(RaceCheck *check, PyObject *reads)
{
    Py_ssize_t position;
    for (position = 0; position < PySequence_Fast_GET_SIZE(reads); position++) {
        PyObject *entry, *entry_reads;
        int status = race_check_write(check, PySequence_Fast_GET_ITEM(reads, position), s_reads_verb, &entry,
                                      &entry_reads);
        if (status != 0)
            return status;
        if (PyObject_SetItem(entry_reads, check->stream_name, check->mine) < 0)
            return -1;
    }
    return 0;
}

/* A written buffer's readers checked against the kernel (0, 1 or -1 as above). */
static int
race_check_readers(RaceCheck *check, PyObject *buffer, PyObject *entry_reads)
{
    PyObject *key, *reader;
    Py_ssize_t cursor = 0;
    if (!PyDict_CheckExact(entry_reads)) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump: a buffer's reads are not a dict");
        return -1;
    }
    while (PyDict_Next(entry_reads, &cursor, &key, &reader)) {
        int conflict = unordered(reader, check->index, check->clock, check->zero), reported;
        if (conflict <= 0) {
            if (conflict < 0)
                return -1;
            continue;
        }
        Py_INCREF(reader);
        reported = report(check->ctx, check->gpu, buffer, reader, s_read, check->kernel, check->stream_name,
                          s_writes_verb);
        Py_DECREF(reader);
        return reported < 0 ? -1 : 1;
    }
    return 0;
}

/* The kernel's writes: each buffer's last write and readers checked, the write recorded and the
 * readers forgotten (0, 1 or -1 as above). */
static int
race_check_writes(RaceCheck *check, PyObject *writes)
{
    Py_ssize_t position;
    for (position = 0; position < PySequence_Fast_GET_SIZE(writes); position++) {
        PyObject *buffer = PySequence_Fast_GET_ITEM(writes, position), *entry, *entry_reads, *empty;
        int status = race_check_write(check, buffer, s_writes_verb, &entry, &entry_reads);
        if (status == 0)
            status = race_check_readers(check, buffer, entry_reads);
        if (status != 0)
            return status;
        if (PyDict_SetItem(entry, s_write, check->mine) < 0)
            return -1;
        empty = PyDict_New();
        if (empty == NULL || PyDict_SetItem(entry, s_reads, empty) < 0) {
            Py_XDECREF(empty);
            return -1;
        }
        Py_DECREF(empty);
    }
    return 0;
}

/* race.check_kernel, step for step (``index_object`` and ``clock`` are the stream's): 0, or -1
 * on error. A race is reported (race._report fails the run) and ends the check, as in Python. */
static int
check_kernel(PyObject *gpu, PyObject *stream_name, PyObject *index_object, PyObject *clock, PyObject *kernel,
             PyObject *reads, PyObject *writes, PyObject *ctx)
{
    RaceCheck check = {gpu, ctx, NULL, stream_name, kernel, clock, NULL, NULL, 0};
    int status;
    check.access = need(gpu, s_access);
    if (check.access == NULL || index_object == NULL || need_list(clock) < 0 || !PyDict_CheckExact(check.access) ||
        need_sequence(reads) < 0 || need_sequence(writes) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "gpu_pump: access table is not a dict");
        return -1;
    }
    check.index = PyLong_AsSsize_t(index_object);
    if (check.index == -1 && PyErr_Occurred())
        return -1;
    if (check.index < 0 || check.index >= PyList_GET_SIZE(clock)) {
        PyErr_SetString(PyExc_IndexError, "gpu_pump: stream clock shorter than its index");
        return -1;
    }
    check.zero = PyLong_FromLong(0);
    check.mine = check.zero == NULL ? NULL : PyList_New(3);
    if (check.mine == NULL) {
        Py_XDECREF(check.zero);
        return -1;
    }
    PyList_SET_ITEM(check.mine, 0, Py_NewRef(index_object));
    PyList_SET_ITEM(check.mine, 1, Py_NewRef(PyList_GET_ITEM(clock, check.index)));
    PyList_SET_ITEM(check.mine, 2, Py_NewRef(kernel));
    status = race_check_reads(&check, reads);
    if (status == 0)
        status = race_check_writes(&check, writes);
    Py_DECREF(check.mine);
    Py_DECREF(check.zero);
    return status < 0 ? -1 : 0;
}

/* ``world.fabric.get("race_detector", True)``: 1 on, 0 off, -1 on error. */
static int
race_enabled(PyObject *ctx)
{
    PyObject *fabric = PyObject_GetAttr(((ContextCore *)ctx)->world, s_fabric), *detector;
    int race;
    if (fabric == NULL)
        return -1;
    if (PyDict_CheckExact(fabric)) {
        detector = PyDict_GetItemWithError(fabric, s_race_detector);
        if (detector == NULL && PyErr_Occurred()) {
            Py_DECREF(fabric);
            return -1;
        }
        race = detector == NULL ? 1 : PyObject_IsTrue(detector);
    } else {
        detector = PyObject_CallMethod(fabric, "get", "OO", s_race_detector, Py_True);
        race = detector == NULL ? -1 : PyObject_IsTrue(detector);
        Py_XDECREF(detector);
    }
    Py_DECREF(fabric);
    return race;
}

#endif /* _SPEEDUPS_GPU_RACE_H */
