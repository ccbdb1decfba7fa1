/* The host side of the GPU stream engine: fabric/gpu.py's ``launch``, ``record`` and ``wait``
 * (their Python bodies ``_launch_python``, ...) in C, each handing back NotImplemented, before it
 * changed anything, for what it leaves to Python (a stream or event Python must create or refuse,
 * a bad argument, a full queue, another context). Included once, by fabric/_speedups.c, after
 * _speedups_gpu_pump.h (a queued op that can move is pumped at once, as _enqueue_and_pump does). */
#ifndef _SPEEDUPS_GPU_HOST_H
#define _SPEEDUPS_GPU_HOST_H

/* gpu_streams.stream_of's creation of stream ``name`` in ``streams`` (an exact dict that does not hold it):
 * ``{"index": n, "queue": [], "running": None, "clock": [0] * (n + 1)}``, n the streams so far,
 * inserted and returned (a new reference). None, creating nothing, when Python must decide: a
 * name that is not a non-empty exact str, a full GPU (it raises), configure_entries not run. The
 * same dict as Python's, without a Python call (~3,700 instructions, a stream's first use). */
static PyObject *
new_stream(PyObject *streams, PyObject *name)
{
    PyObject *stream, *queue = NULL, *clock = NULL, *index = NULL;
    Py_ssize_t count = PyDict_GET_SIZE(streams), at;
    if (!PyUnicode_CheckExact(name) || PyUnicode_GET_LENGTH(name) == 0 || count >= gpu_streams_max)
        Py_RETURN_NONE;
    stream = _PyDict_NewPresized(4);
    if (stream == NULL)
        return NULL;
    if ((index = PyLong_FromSsize_t(count)) == NULL || (queue = PyList_New(0)) == NULL ||
        (clock = PyList_New(count + 1)) == NULL)
        goto fail;
    for (at = 0; at <= count; at++) {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL)
            goto fail;
        PyList_SET_ITEM(clock, at, zero);
    }
    if (PyDict_SetItem(stream, s_index, index) < 0 || PyDict_SetItem(stream, s_queue, queue) < 0 ||
        PyDict_SetItem(stream, s_running, Py_None) < 0 || PyDict_SetItem(stream, s_clock, clock) < 0 ||
        PyDict_SetItem(streams, name, stream) < 0)
        goto fail;
    Py_DECREF(index);
    Py_DECREF(queue);
    Py_DECREF(clock);
    return stream;
fail:
    Py_XDECREF(index);
    Py_XDECREF(queue);
    Py_XDECREF(clock);
    Py_DECREF(stream);
    return NULL;
}

/* gpu_streams.event_entry's creation of ``event``'s entry in ``events`` (an exact dict that does not hold
 * it): ``{"recorded": 0, "completed": 0, "pending": [], "clock": [], "t_ns": -1}``, inserted and
 * returned (a new reference); None, creating nothing, for a full table (Python raises) or before
 * configure_entries. */
static PyObject *
new_event_entry(PyObject *events, PyObject *event)
{
    PyObject *entry, *zero = NULL, *minus_one = NULL, *pending = NULL, *clock = NULL;
    if (PyDict_GET_SIZE(events) >= gpu_events_max)
        Py_RETURN_NONE;
    entry = _PyDict_NewPresized(5);
    if (entry == NULL)
        return NULL;
    if ((zero = PyLong_FromLong(0)) == NULL || (minus_one = PyLong_FromLong(-1)) == NULL ||
        (pending = PyList_New(0)) == NULL || (clock = PyList_New(0)) == NULL)
        goto fail;
    if (PyDict_SetItem(entry, s_recorded, zero) < 0 || PyDict_SetItem(entry, s_completed, zero) < 0 ||
        PyDict_SetItem(entry, s_pending, pending) < 0 || PyDict_SetItem(entry, s_clock, clock) < 0 ||
        PyDict_SetItem(entry, s_t_ns, minus_one) < 0 || PyDict_SetItem(events, event, entry) < 0)
        goto fail;
    Py_DECREF(zero);
    Py_DECREF(minus_one);
    Py_DECREF(pending);
    Py_DECREF(clock);
    return entry;
fail:
    Py_XDECREF(zero);
    Py_XDECREF(minus_one);
    Py_XDECREF(pending);
    Py_XDECREF(clock);
    Py_DECREF(entry);
    return NULL;
}

/* The GPU state and the existing stream ``name`` of the context's node (borrowed), or 0 when the
 * Python function must run (no GPU, a stream not created yet, a full queue, another context):
 * it then raises or creates exactly as it always did, and nothing was changed here. */
static int
host_stream(PyObject *ctx, PyObject *name, PyObject **gpu_out, PyObject **stream_out)
{
    PyObject *state, *gpu, *streams, *stream, *queue;
    if (!PyObject_TypeCheck(ctx, context_core_type))
        return 0;
    state = ((ContextCore *)ctx)->state;
    if (state == NULL || !PyDict_CheckExact(state) || ((ContextCore *)ctx)->now == NULL ||
        ((ContextCore *)ctx)->node == NULL || ((ContextCore *)ctx)->world == NULL)
        return 0;
    gpu = PyDict_GetItemWithError(state, s_gpu);
    if (gpu == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyDict_CheckExact(gpu) || PyDict_GET_SIZE(gpu) == 0)
        return 0;
    streams = PyDict_GetItemWithError(gpu, s_streams);
    if (streams == NULL || !PyDict_CheckExact(streams))
        return PyErr_Occurred() ? -1 : 0;
    stream = PyDict_GetItemWithError(streams, name);
    if (stream == NULL) {
        /* the stream's first use: gpu_streams.stream_of checks the name and the bound and creates it */
        PyObject *args[2] = {gpu, name}, *created;
        if (PyErr_Occurred())
            return -1;
        created = new_stream(streams, name);
        if (created == NULL)
            return -1;
        if (created != Py_None) {
            stream = created; /* borrowed: the streams dict holds it */
            Py_DECREF(created);
            goto found;
        }
        Py_DECREF(created);
        created = PyObject_Vectorcall(gpu_new_stream, args, 2, NULL);
        if (created == NULL)
            return -1;
        Py_DECREF(created);
        stream = PyDict_GetItemWithError(streams, name);
        if (stream == NULL)
            return PyErr_Occurred() ? -1 : 0;
    }
found:
    if (!PyDict_CheckExact(stream) || PyDict_GET_SIZE(stream) == 0)
        return 0;
    queue = PyDict_GetItemWithError(stream, s_queue);
    if (queue == NULL || !PyList_CheckExact(queue) || PyList_GET_SIZE(queue) >= gpu_ops_max)
        return PyErr_Occurred() ? -1 : 0;
    *gpu_out = gpu;
    *stream_out = stream;
    return 1;
}

/* gpu_streams.enqueue_and_pump. Steals ``op``. */
static int
enqueue(PyObject *gpu, PyObject *stream, PyObject *op, PyObject *ctx, int may_move);

static int
enqueue_and_pump(PyObject *gpu, PyObject *stream, PyObject *op, PyObject *ctx)
{
    return enqueue(gpu, stream, op, ctx, 1);
}

/* gpu_streams.enqueue_and_pump; ``may_move`` 0: the op cannot move when queued (a wait on a pending
 * record), so nothing can (every other stream is at rest) and the pump is skipped. Steals ``op``. */
static int
enqueue(PyObject *gpu, PyObject *stream, PyObject *op, PyObject *ctx, int may_move)
{
    PyObject *fields[2], *queue, *running;
    PyObject *const keys[2] = {s_queue, s_running};
    int appended;
    if (need_many(stream, keys, 2, fields) < 0 || need_list(fields[0]) < 0) {
        Py_DECREF(op);
        return -1;
    }
    queue = fields[0];
    running = fields[1]; /* appending to the queue changes no value of the stream */
    appended = PyList_Append(queue, op);
    Py_DECREF(op);
    if (appended < 0)
        return -1;
    if (may_move && running == Py_None && PyList_GET_SIZE(queue) == 1) {
        PyObject *args[2] = {gpu, ctx};
        PyObject *result = gpu_pump(NULL, args, 2);
        if (result == NULL)
            return -1;
        Py_DECREF(result);
    }
    return 0;
}

/* A kernel launched on an idle stream with nothing queued starts at once: 1 when it started here,
 * 0 when the stream is busy (the op is queued as usual), -1 on error. Queued and pumped, it would
 * be the only op that moves (every other stream is at rest between two calls into the engine:
 * gpu_streams.enqueue_and_pump says why), popped at once and started from its op dict's values: so the
 * kernel starts from those values directly, with no op dict built and freed and no walk over the
 * streams. The same operations in the same order: a dp_training step's forward/backward and its
 * unpack start this way (~4,000 instructions each saved). The host clock is joined into the
 * stream's clock straight from the GPU (the op would hold a copy of it, read once, at once). */
static int
start_at_once(PyObject *gpu, PyObject *stream, PyObject *const *args, PyObject *host)
{
    PyObject *fields[2], *reads, *writes, *values[OP_KEYS], *stream_name = args[1];
    PyObject *const keys[2] = {s_queue, s_running};
    int race = -1, started;
    if (need_many(stream, keys, 2, fields) < 0 || need_list(fields[0]) < 0)
        return -1;
    if (fields[1] != Py_None || PyList_GET_SIZE(fields[0]) != 0)
        return 0;
    if (!PyList_CheckExact(host)) {
        PyErr_SetString(PyExc_TypeError, "gpu_launch: the host clock is not a list");
        return -1;
    }
    /* Python's op holds list copies; a kernel started here only reads them, so a tuple (the
     * usual ``reads=("weights",)``) is used as it is, two lists fewer per start. */
    reads = PyTuple_CheckExact(args[4]) ? Py_NewRef(args[4]) : PySequence_List(args[4]);
    writes = reads == NULL ? NULL : PyTuple_CheckExact(args[5]) ? Py_NewRef(args[5]) : PySequence_List(args[5]);
    if (writes == NULL) {
        Py_XDECREF(reads);
        return -1;
    }
    values[OP_NAME] = args[2];
    values[OP_DURATION] = args[3];
    values[OP_READS] = reads;
    values[OP_WRITES] = writes;
    values[OP_DONE_KIND] = args[6];
    values[OP_PAYLOAD] = args[7];
    values[OP_STARTED_KIND] = args[8];
    values[OP_HOST_CLOCK] = host;
    Py_INCREF(gpu);
    Py_INCREF(stream);
    Py_INCREF(stream_name);
    Py_INCREF(host);
    started = start_kernel_with(gpu, stream_name, stream, values, args[0], &race);
    Py_DECREF(host);
    Py_DECREF(stream_name);
    Py_DECREF(stream);
    Py_DECREF(gpu);
    Py_DECREF(reads);
    Py_DECREF(writes);
    return started < 0 ? -1 : 1;
}

/* gpu_launch(ctx, stream, name, duration_ns, reads, writes, done_kind, payload, started_kind):
 * gpu.launch, or NotImplemented when gpu._launch_python must run. */
static PyObject *
gpu_launch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *ctx, *gpu = NULL, *stream = NULL, *duration, *op, *reads = NULL, *writes = NULL, *host, *clock;
    int found;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "gpu_launch takes 9 arguments");
        return NULL;
    }
    ctx = args[0];
    duration = args[3];
    if (duration != Py_None && (!PyLong_CheckExact(duration) || _PyLong_Sign(duration) < 0))
        Py_RETURN_NOTIMPLEMENTED;
    found = host_stream(ctx, args[1], &gpu, &stream);
    if (found <= 0) {
        if (found < 0)
            return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    host = need(gpu, s_host_clock);
    if (host == NULL)
        return NULL;
    {
        int started = start_at_once(gpu, stream, args, host);
        if (started != 0)
            return started < 0 ? NULL : Py_NewRef(Py_None);
    }
    op = _PyDict_NewPresized(KERNEL_OP_KEYS);
    if (op == NULL)
        return NULL;
    if (PyDict_SetItem(op, s_op, s_kernel) < 0 || PyDict_SetItem(op, s_name, args[2]) < 0 ||
        PyDict_SetItem(op, s_duration_ns, duration) < 0)
        goto fail;
    if ((reads = PySequence_List(args[4])) == NULL || PyDict_SetItem(op, s_reads, reads) < 0)
        goto fail;
    if ((writes = PySequence_List(args[5])) == NULL || PyDict_SetItem(op, s_writes, writes) < 0)
        goto fail;
    if (PyDict_SetItem(op, s_done_kind, args[6]) < 0 || PyDict_SetItem(op, s_payload, args[7]) < 0 ||
        PyDict_SetItem(op, s_started_kind, args[8]) < 0)
        goto fail;
    clock = PySequence_List(host);
    if (clock == NULL || PyDict_SetItem(op, s_host_clock, clock) < 0) {
        Py_XDECREF(clock);
        goto fail;
    }
    Py_DECREF(clock);
    Py_DECREF(reads);
    Py_DECREF(writes);
    if (enqueue_and_pump(gpu, stream, op, ctx) < 0)
        return NULL;
    Py_RETURN_NONE;
fail:
    Py_XDECREF(reads);
    Py_XDECREF(writes);
    Py_DECREF(op);
    return NULL;
}

/* A new op dict {"op": kind, "event": event, "generation": generation}. */
static PyObject *
event_op(PyObject *kind, PyObject *event, PyObject *generation)
{
    PyObject *op = PyDict_New();
    if (op == NULL)
        return NULL;
    if (PyDict_SetItem(op, s_op, kind) < 0 || PyDict_SetItem(op, s_event, event) < 0 ||
        PyDict_SetItem(op, s_generation, generation) < 0) {
        Py_DECREF(op);
        return NULL;
    }
    return op;
}

/* What gpu_record and gpu_wait (ctx, stream, event) both start with: the argument count, the host
 * stream and the GPU's event table. 1: found; 0: NotImplemented (Python's body must run); -1: error. */
static int
event_call_prelude(const char *name, PyObject *const *args, Py_ssize_t nargs, PyObject **gpu,
                   PyObject **stream, PyObject **events)
{
    int found;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s takes 3 arguments", name);
        return -1;
    }
    found = host_stream(args[0], args[1], gpu, stream);
    if (found <= 0)
        return found;
    *events = need(*gpu, s_events);
    if (*events == NULL)
        return -1;
    return PyDict_CheckExact(*events) ? 1 : 0;
}

/* gpu_record(ctx, stream, event): gpu.record, or NotImplemented (an event recorded for the first
 * time, among the rest: gpu._record_python creates its entry). */
static PyObject *
gpu_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *gpu = NULL, *stream = NULL, *events, *entry, *recorded, *next, *pending, *op;
    int found;
    found = event_call_prelude("gpu_record", args, nargs, &gpu, &stream, &events);
    if (found <= 0) {
        if (found < 0)
            return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    entry = PyDict_GetItemWithError(events, args[2]);
    if (entry == NULL) {
        /* the event's first record: gpu_streams.event_entry checks the bound and creates its entry */
        PyObject *entry_args[2] = {events, args[2]}, *created;
        if (PyErr_Occurred())
            return NULL;
        created = new_event_entry(events, args[2]);
        if (created == NULL)
            return NULL;
        if (created == Py_None) {
            Py_DECREF(created);
            created = PyObject_Vectorcall(gpu_event_entry, entry_args, 2, NULL);
            if (created == NULL)
                return NULL;
        }
        Py_DECREF(created);
        entry = PyDict_GetItemWithError(events, args[2]);
        if (entry == NULL && PyErr_Occurred())
            return NULL;
    }
    if (entry == NULL || !PyDict_CheckExact(entry) || PyDict_GET_SIZE(entry) == 0)
        Py_RETURN_NOTIMPLEMENTED;
    recorded = need(entry, s_recorded);
    pending = need(entry, s_pending);
    if (recorded == NULL || pending == NULL)
        return NULL;
    if (!PyList_CheckExact(pending))
        Py_RETURN_NOTIMPLEMENTED;
    next = PyNumber_Add(recorded, gpu_one);
    if (next == NULL)
        return NULL;
    if (PyDict_SetItem(entry, s_recorded, next) < 0) {
        Py_DECREF(next);
        return NULL;
    }
    recorded = next; /* entry["pending"].append(entry["recorded"]): the same int object */
    if (PyList_Append(pending, recorded) < 0) {
        Py_DECREF(recorded);
        return NULL;
    }
    op = event_op(s_record, args[2], recorded);
    Py_DECREF(recorded);
    if (op == NULL || enqueue_and_pump(gpu, stream, op, args[0]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* gpu_wait(ctx, stream, event): gpu.wait, or NotImplemented. */
static PyObject *
gpu_wait(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *gpu = NULL, *stream = NULL, *events, *entry, *generation, *op;
    int found, blocked = 0;
    found = event_call_prelude("gpu_wait", args, nargs, &gpu, &stream, &events);
    if (found <= 0) {
        if (found < 0)
            return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    entry = PyDict_GetItemWithError(events, args[2]);
    if (entry == NULL && PyErr_Occurred())
        return NULL;
    if (entry != NULL) {
        PyObject *fields[2];
        PyObject *const keys[2] = {s_recorded, s_pending};
        if (need_many(entry, keys, 2, fields) < 0)
            return NULL;
        generation = fields[0];
        blocked = PySequence_Contains(fields[1], generation); /* the wait will block at once */
        if (blocked < 0)
            return NULL;
        Py_INCREF(generation);
    } else {
        generation = PyLong_FromLong(0);
        if (generation == NULL)
            return NULL;
    }
    op = event_op(s_wait, args[2], generation);
    Py_DECREF(generation);
    if (op == NULL || enqueue(gpu, stream, op, args[0], !blocked) < 0)
        return NULL;
    Py_RETURN_NONE;
}

#endif /* _SPEEDUPS_GPU_HOST_H */
