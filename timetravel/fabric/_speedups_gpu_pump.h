/* The GPU stream engine's pump (fabric/gpu_streams.py ``pump_python`` and what it calls) in C.
 * Included once, by fabric/_speedups.c, after _speedups_gpu.h and _speedups_gpu_race.h.
 *
 * gpu_pump(gpu, ctx) does what ``pump_python(gpu, ctx)`` does, step for step, on the same state
 * dicts: pass over the streams in their order, advance each idle one (take a wait whose record has
 * completed, complete a record, start a kernel), and pass again only after a pass completed a
 * record. A kernel start ticks the stream's vector clock, checks and records its buffer accesses
 * (_speedups_gpu_race.h), takes a ticket, delivers its ``gpu.done`` and builds the ``running``
 * dict with the same keys in the same order. */
#ifndef _SPEEDUPS_GPU_PUMP_H
#define _SPEEDUPS_GPU_PUMP_H

/* The keys start_kernel reads from a kernel op, in the order gpu_launch (and gpu._launch_python)
 * insert them. */
enum { OP_NAME, OP_DURATION, OP_READS, OP_WRITES, OP_DONE_KIND, OP_PAYLOAD, OP_STARTED_KIND, OP_HOST_CLOCK,
       OP_KEYS };
/* gpu_streams._start_kernel, step for step. ``*race`` is whether the race detector is on (-1: not read yet;
 * it is read, once a pump, when a kernel with buffer accesses starts). */
static int
start_kernel_with(PyObject *gpu, PyObject *name, PyObject *stream, PyObject *const *fields, PyObject *ctx,
                  int *race);

/* gpu_streams._start_kernel for a kernel op popped from its queue (the op is ours: its values stay as read). */
static int
start_kernel(PyObject *gpu, PyObject *name, PyObject *stream, PyObject *op, PyObject *ctx, int *race)
{
    PyObject *fields[OP_KEYS];
    PyObject *const op_keys[OP_KEYS] = {s_name,    s_duration_ns,  s_reads,      s_writes,
                                        s_done_kind, s_payload, s_started_kind, s_host_clock};
    if (need_many(op, op_keys, OP_KEYS, fields) < 0)
        return -1;
    return start_kernel_with(gpu, name, stream, fields, ctx, race);
}

/* The stream's vector clock joined with the kernel's host clock and ticked at the stream's own
 * index (gpu_streams._start_kernel's first steps); *index_object and *clock are the stream's (borrowed). */
static int
tick_stream(PyObject *stream, PyObject *host_clock, PyObject **index_object, PyObject **clock)
{
    PyObject *stream_fields[2], *bumped;
    PyObject *const stream_keys[2] = {s_index, s_clock};
    Py_ssize_t index;
    if (need_many(stream, stream_keys, 2, stream_fields) < 0)
        return -1;
    *index_object = stream_fields[0];
    *clock = stream_fields[1];
    if (need_list(*clock) < 0 || gpu_join(*clock, host_clock) < 0)
        return -1;
    index = PyLong_AsSsize_t(*index_object);
    if (index == -1 && PyErr_Occurred())
        return -1;
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "gpu_pump: negative stream index");
        return -1;
    }
    while (PyList_GET_SIZE(*clock) <= index) {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL || PyList_Append(*clock, zero) < 0) {
            Py_XDECREF(zero);
            return -1;
        }
        Py_DECREF(zero);
    }
    bumped = PyNumber_Add(PyList_GET_ITEM(*clock, index), gpu_one);
    if (bumped == NULL)
        return -1;
    PyList_SetItem(*clock, index, bumped);
    return 0;
}

/* The kernel's buffer accesses checked and recorded by the race detector when it has any and the
 * detector is on (``*race``: -1 until read, once a pump, at the first kernel with accesses). */
static int
check_accesses(PyObject *gpu, PyObject *name, PyObject *index_object, PyObject *clock, PyObject *const *fields,
               PyObject *ctx, int *race)
{
    int any_access = PyObject_IsTrue(fields[OP_READS]);
    if (any_access == 0)
        any_access = PyObject_IsTrue(fields[OP_WRITES]);
    if (any_access <= 0)
        return any_access;
    if (*race < 0 && (*race = race_enabled(ctx)) < 0)
        return -1;
    if (!*race)
        return 0;
    return check_kernel(gpu, name, index_object, clock, fields[OP_NAME], fields[OP_READS], fields[OP_WRITES], ctx);
}

/* A timed kernel's length: its duration, or math.ceil(duration * compute_factor) when the factor
 * is not 1.0 (a slowed node), as Python computes it (a new reference). */
static PyObject *
kernel_length(PyObject *duration, PyObject *factor)
{
    PyObject *product, *length;
    int plain = PyObject_RichCompareBool(factor, float_one, Py_EQ);
    if (plain < 0)
        return NULL;
    if (plain)
        return Py_NewRef(duration);
    product = PyNumber_Multiply(duration, factor);
    length = product == NULL ? NULL : PyObject_CallOneArg(gpu_ceil, product);
    Py_XDECREF(product);
    return length;
}

/* 1 when a stream other than ``stream`` runs a timed kernel (draw_completion_order draws only
 * then), 0 when none does, -1 on error. */
static int
other_timed_kernel(PyObject *streams, PyObject *stream)
{
    PyObject *other_name, *other, *other_running, *other_end;
    Py_ssize_t cursor = 0;
    if (!PyDict_CheckExact(streams)) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump: streams is not a dict");
        return -1;
    }
    while (PyDict_Next(streams, &cursor, &other_name, &other)) {
        if (other == stream)
            continue;
        other_running = need(other, s_running);
        if (other_running == NULL)
            return -1;
        if (other_running == Py_None)
            continue;
        other_end = need(other_running, s_end_ns);
        if (other_end == NULL)
            return -1;
        if (other_end != Py_None)
            return 1;
    }
    return 0;
}

/* The keys start_kernel reads from the GPU state, in the order new_gpu_state inserts them. */
enum { GPU_EPOCH, GPU_TICKETS, GPU_FACTOR, GPU_STREAMS, GPU_KEYS };

/* A timed kernel's end (a new reference): now plus its length, moved by the gpu.order draw when
 * another stream runs a timed kernel; its gpu.done is delivered then. */
static PyObject *
timed_kernel_end(PyObject *gpu, PyObject *const *gpu_fields, PyObject *name, PyObject *stream,
                 PyObject *duration, PyObject *ticket, PyObject *ctx, PyObject *now, PyObject *node)
{
    PyObject *length, *end, *epoch, *payload;
    int draw, delivered;
    length = kernel_length(duration, gpu_fields[GPU_FACTOR]);
    if (length == NULL)
        return NULL;
    end = PyNumber_Add(now, length);
    Py_DECREF(length);
    if (end == NULL)
        return NULL;
    draw = other_timed_kernel(gpu_fields[GPU_STREAMS], stream);
    if (draw > 0) {
        PyObject *args[4] = {gpu, name, end, ctx};
        PyObject *drawn = PyObject_Vectorcall(gpu_draw_order, args, 4, NULL);
        if (drawn == NULL)
            draw = -1;
        else
            Py_SETREF(end, drawn);
    }
    /* the draw (Python) may have run since the walk: read the epoch again after one */
    epoch = draw < 0 ? NULL : draw ? need(gpu, s_epoch) : gpu_fields[GPU_EPOCH];
    payload = epoch == NULL ? NULL : done_payload(epoch, name, ticket);
    delivered = payload == NULL ? -1 : deliver(ctx, end, node, gpu_done_kind, payload);
    Py_XDECREF(payload);
    if (delivered < 0)
        Py_CLEAR(end);
    return end;
}

/* The stream's ``running`` dict for the started kernel (its keys in gpu_streams._start_kernel's order),
 * and the kernel's started_kind delivered now when it has one. */
static int
set_running(PyObject *stream, PyObject *const *fields, PyObject *ticket, PyObject *now, PyObject *end,
            PyObject *ctx, PyObject *node)
{
    PyObject *running = _PyDict_NewPresized(RUNNING_KEYS), *payload = fields[OP_PAYLOAD];
    int failed;
    if (running == NULL)
        return -1;
    failed = PyDict_SetItem(running, s_name, fields[OP_NAME]) < 0 || PyDict_SetItem(running, s_ticket, ticket) < 0 ||
             PyDict_SetItem(running, s_start_ns, now) < 0 || PyDict_SetItem(running, s_end_ns, end) < 0 ||
             PyDict_SetItem(running, s_done_kind, fields[OP_DONE_KIND]) < 0 ||
             PyDict_SetItem(running, s_payload, payload) < 0 || PyDict_SetItem(stream, s_running, running) < 0;
    Py_DECREF(running);
    if (failed)
        return -1;
    if (fields[OP_STARTED_KIND] != Py_None && deliver(ctx, now, node, fields[OP_STARTED_KIND], payload) < 0)
        return -1;
    return 0;
}

/* Start the kernel whose op values are ``fields`` (OP_KEYS of them, borrowed and held by the
 * caller until this returns) on the idle stream ``name``: gpu_streams._start_kernel, step for step. */
static int
start_kernel_with(PyObject *gpu, PyObject *name, PyObject *stream, PyObject *const *fields, PyObject *ctx,
                  int *race)
{
    PyObject *clock, *index_object, *ticket, *now, *node, *end, *gpu_fields[GPU_KEYS];
    PyObject *const gpu_keys[GPU_KEYS] = {s_epoch, s_tickets, s_compute_factor, s_streams};
    int result = -1;
    if (tick_stream(stream, fields[OP_HOST_CLOCK], &index_object, &clock) < 0 ||
        check_accesses(gpu, name, index_object, clock, fields, ctx, race) < 0)
        return -1;
    /* read after check_kernel, whose race report runs Python */
    if (need_many(gpu, gpu_keys, GPU_KEYS, gpu_fields) < 0)
        return -1;
    ticket = PyNumber_Add(gpu_fields[GPU_TICKETS], gpu_one);
    if (ticket == NULL || PyDict_SetItem(gpu, s_tickets, ticket) < 0) {
        Py_XDECREF(ticket);
        return -1;
    }
    now = ((ContextCore *)ctx)->now;
    node = ((ContextCore *)ctx)->node;
    if (now == NULL || node == NULL) {
        PyErr_SetString(PyExc_AttributeError, "gpu_pump: the context has no now or node");
        Py_DECREF(ticket);
        return -1;
    }
    Py_INCREF(now);
    Py_INCREF(node);
    if (fields[OP_DURATION] == Py_None)
        end = Py_NewRef(Py_None);
    else
        end = timed_kernel_end(gpu, gpu_fields, name, stream, fields[OP_DURATION], ticket, ctx, now, node);
    if (end != NULL) {
        result = set_running(stream, fields, ticket, now, end, ctx, node);
        Py_DECREF(end);
    }
    Py_DECREF(now);
    Py_DECREF(node);
    Py_DECREF(ticket);
    return result;
}

/* gpu_streams._complete_record. */
static int
complete_record(PyObject *entry, PyObject *generation, PyObject *stream, PyObject *now)
{
    PyObject *pending, *completed, *clock, *copy, *fields[2];
    PyObject *const keys[2] = {s_completed, s_pending}; /* the order of gpu_streams.event_entry */
    Py_ssize_t at;
    int later, found = 0;
    if (need_many(entry, keys, 2, fields) < 0)
        return -1;
    completed = fields[0];
    pending = fields[1];
    if (need_list(pending) < 0)
        return -1;
    for (at = 0; at < PyList_GET_SIZE(pending); at++) { /* list.remove: the first equal item */
        found = PyObject_RichCompareBool(PyList_GET_ITEM(pending, at), generation, Py_EQ);
        if (found < 0)
            return -1;
        if (found)
            break;
    }
    if (!found) {
        PyErr_SetString(PyExc_ValueError, "list.remove(x): x not in list");
        return -1;
    }
    if (PyList_SetSlice(pending, at, at + 1, NULL) < 0)
        return -1;
    later = PyObject_RichCompareBool(generation, completed, Py_GT);
    if (later <= 0)
        return later;
    clock = need(stream, s_clock);
    if (need_list(clock) < 0)
        return -1;
    copy = PyList_GetSlice(clock, 0, PyList_GET_SIZE(clock));
    if (copy == NULL)
        return -1;
    if (PyDict_SetItem(entry, s_completed, generation) < 0 || PyDict_SetItem(entry, s_clock, copy) < 0 ||
        PyDict_SetItem(entry, s_t_ns, now) < 0) {
        Py_DECREF(copy);
        return -1;
    }
    Py_DECREF(copy);
    return 0;
}

/* An op's kind (its first key, "op", as every op is built), borrowed. */
static PyObject *
op_kind(PyObject *op)
{
    Py_ssize_t cursor = 0;
    PyObject *key, *value;
    if (PyDict_CheckExact(op) && PyDict_Next(op, &cursor, &key, &value) && key == s_op)
        return value;
    return need(op, s_op);
}

enum { OP_IS_KERNEL, OP_IS_WAIT, OP_IS_RECORD };

/* What an op's kind names: a wait, a record, or (anything else, as in Python) a kernel. */
static int
op_class(PyObject *kind)
{
    if (kind == s_wait)
        return OP_IS_WAIT;
    if (kind == s_record)
        return OP_IS_RECORD;
    if (kind == s_kernel || !PyUnicode_Check(kind))
        return OP_IS_KERNEL;
    if (PyUnicode_Compare(kind, s_wait) == 0)
        return OP_IS_WAIT;
    return PyUnicode_Compare(kind, s_record) == 0 ? OP_IS_RECORD : OP_IS_KERNEL;
}

/* The GPU's events table (borrowed), or NULL with an error set. */
static PyObject *
event_table(PyObject *gpu)
{
    PyObject *events = need(gpu, s_events);
    if (events != NULL && !PyDict_CheckExact(events)) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump: the events table is not a dict");
        return NULL;
    }
    return events;
}

/* The wait ``op`` at the front of ``queue``: taken (popped; the stream's clock joined with the
 * record's) unless the record it waits for is pending. 1: taken; 0: blocked; -1: error. */
static int
take_wait(PyObject *events, PyObject *stream, PyObject *queue, PyObject *op)
{
    PyObject *entry, *fields[2];
    PyObject *const keys[2] = {s_event, s_generation};
    int joined = 0;
    if (need_many(op, keys, 2, fields) < 0)
        return -1;
    entry = PyDict_GetItemWithError(events, fields[0]);
    if (entry == NULL && PyErr_Occurred())
        return -1;
    if (entry != NULL) {
        PyObject *pending = need(entry, s_pending);
        int blocked = pending == NULL ? -1 : PySequence_Contains(pending, fields[1]);
        if (blocked != 0)
            return blocked < 0 ? -1 : 0;
    }
    Py_XINCREF(entry);
    op = pop_front(queue);
    if (op == NULL) {
        Py_XDECREF(entry);
        return -1;
    }
    Py_DECREF(op);
    if (entry != NULL) {
        PyObject *clock = need(stream, s_clock), *entry_clock = need(entry, s_clock);
        joined = clock == NULL || entry_clock == NULL ? -1 : gpu_join(clock, entry_clock);
        Py_DECREF(entry);
    }
    return joined < 0 ? -1 : 1;
}

/* The record at the front of ``queue``, popped and completed at ``now``: 0, or -1 on error. */
static int
take_record(PyObject *events, PyObject *stream, PyObject *queue, PyObject *now)
{
    PyObject *op, *entry, *fields[2];
    PyObject *const keys[2] = {s_event, s_generation};
    int completed;
    op = pop_front(queue);
    if (op == NULL)
        return -1;
    entry = need_many(op, keys, 2, fields) < 0 ? NULL : need(events, fields[0]);
    completed = entry == NULL ? -1 : complete_record(entry, fields[1], stream, now);
    Py_DECREF(op);
    return completed < 0 ? -1 : 0;
}

/* gpu_streams._advance: 1 when a record completed on the way, 0 when not, -1 on error. The caller found
 * the stream idle (``running`` None) with ``queue`` (its queue) not empty. Taking a wait or
 * completing a record leaves ``running`` as it was; starting a kernel sets it, which ends the loop:
 * so ``running`` is not read again here. */
static int
advance(PyObject *gpu, PyObject *name, PyObject *stream, PyObject *queue, PyObject *ctx, int *race)
{
    PyObject *events = NULL;
    int recorded = 0;
    while (PyList_GET_SIZE(queue) > 0) {
        PyObject *op = PyList_GET_ITEM(queue, 0), *kind = op_kind(op);
        int which, taken;
        if (kind == NULL)
            return -1;
        which = op_class(kind);
        if (which == OP_IS_KERNEL) {
            op = pop_front(queue);
            if (op == NULL)
                return -1;
            taken = start_kernel(gpu, name, stream, op, ctx, race);
            Py_DECREF(op);
            return taken < 0 ? -1 : recorded; /* the stream runs the kernel now */
        }
        if (events == NULL && (events = event_table(gpu)) == NULL)
            return -1;
        if (which == OP_IS_WAIT) {
            taken = take_wait(events, stream, queue, op);
            if (taken <= 0)
                return taken < 0 ? -1 : recorded;
        } else {
            if (take_record(events, stream, queue, ((ContextCore *)ctx)->now) < 0)
                return -1;
            recorded = 1;
        }
    }
    return recorded;
}

/* gpu_pump(gpu, ctx): gpu_streams.pump_python(gpu, ctx) in C. */
static PyObject *
gpu_pump(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *gpu, *ctx, *streams;
    PyObject *const stream_keys[2] = {s_queue, s_running};
    int again = 1, race = -1;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump takes 2 arguments");
        return NULL;
    }
    gpu = args[0];
    ctx = args[1];
    if (gpu_report == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpu_pump: configure_gpu was not called");
        return NULL;
    }
    if (!PyObject_TypeCheck(ctx, context_core_type) || ((ContextCore *)ctx)->now == NULL ||
        ((ContextCore *)ctx)->world == NULL || ((ContextCore *)ctx)->node == NULL)
        return PyObject_Vectorcall(gpu_python_pump, args, 2, NULL); /* another context: the reference */
    streams = need(gpu, s_streams);
    if (streams == NULL)
        return NULL;
    if (!PyDict_CheckExact(streams)) {
        PyErr_SetString(PyExc_TypeError, "gpu_pump: streams is not a dict");
        return NULL;
    }
    Py_INCREF(gpu);
    Py_INCREF(streams);
    while (again) {
        PyObject *name, *stream;
        Py_ssize_t cursor = 0;
        again = 0;
        while (PyDict_Next(streams, &cursor, &name, &stream)) {
            PyObject *fields[2], *queue;
            int moved;
            if (need_many(stream, stream_keys, 2, fields) < 0)
                goto fail;
            if (fields[1] != Py_None)
                continue;
            queue = fields[0];
            if (need_list(queue) < 0)
                goto fail;
            if (PyList_GET_SIZE(queue) == 0)
                continue;
            Py_INCREF(name);
            Py_INCREF(stream);
            Py_INCREF(queue);
            moved = advance(gpu, name, stream, queue, ctx, &race);
            Py_DECREF(queue);
            Py_DECREF(name);
            Py_DECREF(stream);
            if (moved < 0)
                goto fail;
            if (moved)
                again = 1;
        }
    }
    Py_DECREF(streams);
    Py_DECREF(gpu);
    Py_RETURN_NONE;
fail:
    Py_DECREF(streams);
    Py_DECREF(gpu);
    return NULL;
}

#endif /* _SPEEDUPS_GPU_PUMP_H */
