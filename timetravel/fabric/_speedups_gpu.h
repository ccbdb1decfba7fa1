/* The GPU stream engine's shared parts: the Python functions and bounds fabric/gpu.py hands over
 * (configure_gpu), the state's interned keys and the helpers that read the engine's state dicts.
 * Included once, by fabric/_speedups.c (one translation unit), first of the engine's headers:
 * _speedups_gpu_race.h (race.check_kernel), _speedups_gpu_pump.h (the pump: gpu_streams.pump_python and
 * what it calls), _speedups_gpu_host.h (launch, record, wait), _speedups_done.h (the gpu.done
 * handler and schedule_finishes) and _speedups_entry.h (the compiled entries).
 *
 * The engine does what fabric/gpu.py's Python code does, step for step, on the same state dicts
 * (same keys in the same order, same values, same deliveries in the same order); everything off
 * the common path calls the Python reference functions handed over by ``configure_gpu``: a race
 * found (``race._report``, after the same partial bookkeeping), a timed kernel starting while
 * another stream runs one (``gpu_streams.draw_completion_order``: the ``gpu.order`` choice), a compute
 * factor other than 1.0 (``math.ceil`` of the product, as Python computes it). Any value of an
 * unexpected type raises TypeError; the state is the engine's own, so that is a bug, not an input.
 * tests/test_fabric_gpu_compiled.py runs worlds with this engine and with the Python one and
 * compares every bit.
 */
#ifndef _SPEEDUPS_GPU_H
#define _SPEEDUPS_GPU_H

static PyObject *gpu_draw_order = NULL; /* gpu_streams.draw_completion_order */
static PyObject *gpu_python_pump = NULL; /* gpu_streams.pump_python */
static PyObject *gpu_unhandled = NULL;   /* gpu_streams.report_unhandled */
static PyObject *gpu_new_stream = NULL;  /* gpu_streams.stream_of: a stream's first use creates it */
static PyObject *gpu_event_entry = NULL; /* gpu_streams.event_entry: an event's first record creates it */
static Py_ssize_t gpu_ops_max = 0;       /* gpu.STREAM_OPS_MAX */
static Py_ssize_t gpu_streams_max = 0;   /* gpu.STREAMS_MAX (0 until configure_entries: Python creates) */
static Py_ssize_t gpu_events_max = 0;    /* gpu.GPU_EVENTS_MAX (likewise) */
static PyObject *gpu_report = NULL;     /* race._report */
static PyObject *gpu_ceil = NULL;       /* math.ceil */
static PyObject *gpu_done_kind = NULL;  /* gpu.DONE_KIND */
static long gpu_tracked_max = 0;        /* race.TRACKED_BUFFERS_MAX */
static PyObject *s_streams, *s_events, *s_running, *s_queue, *s_op, *s_wait, *s_record, *s_event,
    *s_generation, *s_pending, *s_clock, *s_completed, *s_t_ns, *s_index, *s_host_clock, *s_reads,
    *s_writes, *s_name, *s_tickets, *s_duration_ns, *s_compute_factor, *s_epoch, *s_end_ns,
    *s_done_kind, *s_payload, *s_started_kind, *s_ticket, *s_start_ns, *s_access, *s_write, *s_fabric,
    *s_race_detector, *s_deliver, *s_wrote, *s_read, *s_reads_verb, *s_writes_verb, *float_one, *s_gpu,
    *s_kernel, *s_recorded, *gpu_one;

/* The keys of a ``running`` dict and of a kernel op: the dicts are made with room for them, as
 * Python's dict displays are (a dict made empty has room for 5 keys and grows its table at the
 * sixth: a new table and a copy, for every kernel). Sizes change no key order and no value. */
#define RUNNING_KEYS 6
#define KERNEL_OP_KEYS 10

/* A borrowed item of an exact dict; NULL with TypeError set when the key is missing. */
static PyObject *
need(PyObject *dict, PyObject *key)
{
    PyObject *value;
    if (!PyDict_CheckExact(dict)) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump: the GPU state holds a value of the wrong type");
        return NULL;
    }
    value = PyDict_GetItemWithError(dict, key);
    if (value == NULL && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, key);
    return value;
}

static int
need_list(PyObject *value)
{
    if (value == NULL)
        return -1;
    if (!PyList_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump: a clock or queue is not a list");
        return -1;
    }
    return 0;
}

/* Borrowed values of ``count`` keys of an exact dict (NULL-free on success: 0; -1 with the error
 * need() sets). The engine's dicts are built with their keys in one order (a stream: index, queue,
 * running, clock; an op: op, name, duration_ns, ...), so the keys, asked in that relative order,
 * are met by walking the entries (PyDict_Next: no hashing, no probing, one contiguous table):
 * a third of the instructions of one lookup each. A key the walk does not meet by identity (a dict
 * rebuilt in another order, a key string that is equal but not the interned one) is looked up, so
 * the values are those of the lookups whatever the order. */
static int
need_many(PyObject *dict, PyObject *const *keys, int count, PyObject **values)
{
    Py_ssize_t cursor = 0;
    PyObject *key, *value;
    int found = 0;
    if (!PyDict_CheckExact(dict)) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump: the GPU state holds a value of the wrong type");
        return -1;
    }
    while (found < count && PyDict_Next(dict, &cursor, &key, &value)) {
        if (key == keys[found])
            values[found++] = value;
    }
    for (; found < count; found++) {
        values[found] = need(dict, keys[found]);
        if (values[found] == NULL)
            return -1;
    }
    return 0;
}

/* A kernel's reads or writes: a list (a queued op's copy) or a tuple (a kernel started at once
 * from the tuple the scenario passed: immutable, so not copied into a list first). */
static int
need_sequence(PyObject *value)
{
    if (PyList_CheckExact(value) || PyTuple_CheckExact(value))
        return 0;
    PyErr_SetString(PyExc_TypeError, "gpu_pump: a kernel's reads or writes are not a list");
    return -1;
}

/* race.join: into = max(into, other) entry by entry. */
static int
gpu_join(PyObject *into, PyObject *other)
{
    Py_ssize_t index, length;
    if (need_list(into) < 0 || need_list(other) < 0)
        return -1;
    length = PyList_GET_SIZE(other);
    while (PyList_GET_SIZE(into) < length) {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL || PyList_Append(into, zero) < 0) {
            Py_XDECREF(zero);
            return -1;
        }
        Py_DECREF(zero);
    }
    for (index = 0; index < length; index++) {
        PyObject *value = PyList_GET_ITEM(other, index);
        int greater = PyObject_RichCompareBool(value, PyList_GET_ITEM(into, index), Py_GT);
        if (greater < 0)
            return -1;
        if (greater) {
            Py_INCREF(value);
            PyList_SetItem(into, index, value);
        }
    }
    return 0;
}

/* queue.pop(0), returning a new reference to the op. */
static PyObject *
pop_front(PyObject *queue)
{
    PyObject *op = PyList_GET_ITEM(queue, 0);
    Py_INCREF(op);
    if (PyList_SetSlice(queue, 0, 1, NULL) < 0) {
        Py_DECREF(op);
        return NULL;
    }
    return op;
}

/* A gpu.done payload [epoch, stream, ticket] (a new reference). */
static PyObject *
done_payload(PyObject *epoch, PyObject *stream_name, PyObject *ticket)
{
    PyObject *payload = PyList_New(3);
    if (payload == NULL)
        return NULL;
    PyList_SET_ITEM(payload, 0, Py_NewRef(epoch));
    PyList_SET_ITEM(payload, 1, Py_NewRef(stream_name));
    PyList_SET_ITEM(payload, 2, Py_NewRef(ticket));
    return payload;
}

/* ctx.deliver(t, dst, kind, payload), the method call Python makes: 0, or -1 on error. */
static int
deliver(PyObject *ctx, PyObject *t, PyObject *dst, PyObject *kind, PyObject *payload)
{
    PyObject *args[5] = {ctx, t, dst, kind, payload};
    PyObject *result = PyObject_VectorcallMethod(s_deliver, args, 5, NULL);
    if (result == NULL)
        return -1;
    Py_DECREF(result);
    return 0;
}

#define GPU_INTERN(variable, text)                                                                   \
    do {                                                                                             \
        if ((variable = PyUnicode_InternFromString(text)) == NULL)                                   \
            return -1;                                                                               \
    } while (0)

static int
gpu_intern(void)
{
    GPU_INTERN(s_streams, "streams");
    GPU_INTERN(s_events, "events");
    GPU_INTERN(s_running, "running");
    GPU_INTERN(s_queue, "queue");
    GPU_INTERN(s_op, "op");
    GPU_INTERN(s_wait, "wait");
    GPU_INTERN(s_record, "record");
    GPU_INTERN(s_event, "event");
    GPU_INTERN(s_generation, "generation");
    GPU_INTERN(s_pending, "pending");
    GPU_INTERN(s_clock, "clock");
    GPU_INTERN(s_completed, "completed");
    GPU_INTERN(s_t_ns, "t_ns");
    GPU_INTERN(s_index, "index");
    GPU_INTERN(s_host_clock, "host_clock");
    GPU_INTERN(s_reads, "reads");
    GPU_INTERN(s_writes, "writes");
    GPU_INTERN(s_name, "name");
    GPU_INTERN(s_tickets, "tickets");
    GPU_INTERN(s_duration_ns, "duration_ns");
    GPU_INTERN(s_compute_factor, "compute_factor");
    GPU_INTERN(s_epoch, "epoch");
    GPU_INTERN(s_end_ns, "end_ns");
    GPU_INTERN(s_done_kind, "done_kind");
    GPU_INTERN(s_payload, "payload");
    GPU_INTERN(s_started_kind, "started_kind");
    GPU_INTERN(s_ticket, "ticket");
    GPU_INTERN(s_start_ns, "start_ns");
    GPU_INTERN(s_access, "access");
    GPU_INTERN(s_write, "write");
    GPU_INTERN(s_fabric, "fabric");
    GPU_INTERN(s_race_detector, "race_detector");
    GPU_INTERN(s_deliver, "deliver");
    GPU_INTERN(s_wrote, "wrote");
    GPU_INTERN(s_read, "read");
    GPU_INTERN(s_reads_verb, "reads");
    GPU_INTERN(s_writes_verb, "writes");
    GPU_INTERN(s_gpu, "gpu");
    GPU_INTERN(s_kernel, "kernel");
    GPU_INTERN(s_recorded, "recorded");
    if ((float_one = PyFloat_FromDouble(1.0)) == NULL || (gpu_one = PyLong_FromLong(1)) == NULL)
        return -1;
    return 0;
}

/* configure_gpu(pump_python, draw_completion_order, report, ceil, done_kind, tracked_buffers_max,
 *               report_unhandled, stream_ops_max, new_stream, event_entry) */
static PyObject *
configure_gpu(PyObject *module, PyObject *args)
{
    PyObject *python_pump, *draw, *report_function, *ceil_function, *done_kind, *unhandled, *new_stream;
    PyObject *event_entry;
    long tracked;
    Py_ssize_t ops_max;
    if (!PyArg_ParseTuple(args, "OOOOUlOnOO", &python_pump, &draw, &report_function, &ceil_function,
                          &done_kind, &tracked, &unhandled, &ops_max, &new_stream, &event_entry))
        return NULL;
    Py_INCREF(new_stream);
    Py_XSETREF(gpu_new_stream, new_stream);
    Py_INCREF(event_entry);
    Py_XSETREF(gpu_event_entry, event_entry);
    Py_INCREF(unhandled);
    Py_XSETREF(gpu_unhandled, unhandled);
    gpu_ops_max = ops_max;
    Py_INCREF(python_pump);
    Py_XSETREF(gpu_python_pump, python_pump);
    Py_INCREF(draw);
    Py_XSETREF(gpu_draw_order, draw);
    Py_INCREF(report_function);
    Py_XSETREF(gpu_report, report_function);
    Py_INCREF(ceil_function);
    Py_XSETREF(gpu_ceil, ceil_function);
    Py_INCREF(done_kind);
    Py_XSETREF(gpu_done_kind, done_kind);
    gpu_tracked_max = tracked;
    Py_RETURN_NONE;
}

#endif /* _SPEEDUPS_GPU_H */
