/* The GPU stream engine's pump (fabric/gpu.py ``_pump_python`` and what it calls) in C.
 * Included once, by _speedups.c (one translation unit); see that file for the rules it follows.
 *
 * gpu_pump(gpu, ctx) does what ``_pump_python(gpu, ctx)`` does, step for step, on the same state
 * dicts: pass over the streams in their order, advance each idle one (take a wait whose record has
 * completed, complete a record, start a kernel), and pass again only after a pass completed a
 * record. A kernel start ticks the stream's vector clock, checks and records its buffer accesses
 * (fabric/race.py ``check_kernel``), takes a ticket, delivers its ``gpu.done`` and builds the
 * ``running`` dict with the same keys in the same order. Everything off the common path calls the
 * Python reference functions handed over by ``configure_gpu``: a race found (``race._report``, after
 * the same partial bookkeeping), a timed kernel starting while another stream runs one (``gpu.
 * _draw_completion_order``: the ``gpu.order`` choice), a compute factor other than 1.0 (``math.ceil``
 * of the product, as Python computes it). Any value of an unexpected type raises TypeError; the
 * state is the engine's own, so that is a bug, not an input. tests/test_fabric_gpu_compiled.py runs
 * worlds with this pump and with the Python one and compares every bit.
 */
#ifndef _SPEEDUPS_GPU_H
#define _SPEEDUPS_GPU_H

static PyObject *gpu_draw_order = NULL; /* gpu._draw_completion_order */
static PyObject *gpu_python_pump = NULL; /* gpu._pump_python */
static PyObject *gpu_unhandled = NULL;   /* gpu._report_unhandled */
static PyObject *gpu_new_stream = NULL;  /* gpu._stream: a stream's first use creates it */
static PyObject *gpu_event_entry = NULL; /* gpu._event_entry: an event's first record creates it */
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
    *s_kernel, *s_recorded;

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

/* race.check_kernel, step for step (``index_object`` and ``clock`` are the stream's). */
static int
check_kernel(PyObject *gpu, PyObject *stream_name, PyObject *index_object, PyObject *clock, PyObject *kernel,
             PyObject *reads, PyObject *writes, PyObject *ctx)
{
    PyObject *access, *mine, *zero;
    Py_ssize_t index, position;
    int result = -1, conflict;

    access = need(gpu, s_access);
    if (access == NULL || index_object == NULL || need_list(clock) < 0 || !PyDict_CheckExact(access) ||
        need_sequence(reads) < 0 || need_sequence(writes) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "gpu_pump: access table is not a dict");
        return -1;
    }
    index = PyLong_AsSsize_t(index_object);
    if (index == -1 && PyErr_Occurred())
        return -1;
    if (index < 0 || index >= PyList_GET_SIZE(clock)) {
        PyErr_SetString(PyExc_IndexError, "gpu_pump: stream clock shorter than its index");
        return -1;
    }
    zero = PyLong_FromLong(0);
    mine = zero == NULL ? NULL : PyList_New(3);
    if (mine == NULL) {
        Py_XDECREF(zero);
        return -1;
    }
    Py_INCREF(index_object);
    PyList_SET_ITEM(mine, 0, index_object);
    Py_INCREF(PyList_GET_ITEM(clock, index));
    PyList_SET_ITEM(mine, 1, PyList_GET_ITEM(clock, index));
    Py_INCREF(kernel);
    PyList_SET_ITEM(mine, 2, kernel);

    for (position = 0; position < PySequence_Fast_GET_SIZE(reads); position++) {
        PyObject *buffer = PySequence_Fast_GET_ITEM(reads, position), *entry, *write, *entry_reads, *found[2];
        PyObject *const keys[2] = {s_write, s_reads};
        entry = access_entry(access, buffer);
        if (entry == NULL || !PyDict_CheckExact(entry) || need_many(entry, keys, 2, found) < 0)
            goto done;
        write = found[0];
        if (write != Py_None) {
            conflict = unordered(write, index, clock, zero);
            if (conflict < 0)
                goto done;
            if (conflict) {
                result = report(ctx, gpu, buffer, write, s_wrote, kernel, stream_name, s_reads_verb);
                goto done;
            }
        }
        entry_reads = found[1];
        if (PyObject_SetItem(entry_reads, stream_name, mine) < 0)
            goto done;
    }
    for (position = 0; position < PySequence_Fast_GET_SIZE(writes); position++) {
        PyObject *buffer = PySequence_Fast_GET_ITEM(writes, position), *entry, *write, *entry_reads, *key, *reader;
        PyObject *empty, *found[2];
        PyObject *const keys[2] = {s_write, s_reads};
        Py_ssize_t cursor = 0;
        entry = access_entry(access, buffer);
        if (entry == NULL || !PyDict_CheckExact(entry) || need_many(entry, keys, 2, found) < 0)
            goto done;
        write = found[0];
        if (write != Py_None) {
            conflict = unordered(write, index, clock, zero);
            if (conflict < 0)
                goto done;
            if (conflict) {
                result = report(ctx, gpu, buffer, write, s_wrote, kernel, stream_name, s_writes_verb);
                goto done;
            }
        }
        entry_reads = found[1];
        if (!PyDict_CheckExact(entry_reads)) {
            PyErr_SetString(PyExc_TypeError, "gpu_pump: a buffer's reads are not a dict");
            goto done;
        }
        while (PyDict_Next(entry_reads, &cursor, &key, &reader)) {
            conflict = unordered(reader, index, clock, zero);
            if (conflict < 0)
                goto done;
            if (conflict) {
                Py_INCREF(reader);
                result = report(ctx, gpu, buffer, reader, s_read, kernel, stream_name, s_writes_verb);
                Py_DECREF(reader);
                goto done;
            }
        }
        if (PyDict_SetItem(entry, s_write, mine) < 0)
            goto done;
        empty = PyDict_New();
        if (empty == NULL || PyDict_SetItem(entry, s_reads, empty) < 0) {
            Py_XDECREF(empty);
            goto done;
        }
        Py_DECREF(empty);
    }
    result = 0;
done:
    Py_DECREF(mine);
    Py_DECREF(zero);
    return result;
}

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

/* The keys start_kernel reads from a kernel op, in the order gpu_launch (and gpu._launch_python)
 * insert them, and from a stream and the GPU state, in the order gpu._stream and new_gpu_state do. */
enum { OP_NAME, OP_DURATION, OP_READS, OP_WRITES, OP_DONE_KIND, OP_PAYLOAD, OP_STARTED_KIND, OP_HOST_CLOCK,
       OP_KEYS };
enum { GPU_EPOCH, GPU_TICKETS, GPU_FACTOR, GPU_STREAMS, GPU_KEYS };

/* gpu._start_kernel, step for step. ``*race`` is whether the race detector is on (-1: not read yet;
 * it is read, once a pump, when a kernel with buffer accesses starts). */
static int
start_kernel_with(PyObject *gpu, PyObject *name, PyObject *stream, PyObject *const *fields, PyObject *ctx,
                  int *race);

/* gpu._start_kernel for a kernel op popped from its queue (the op is ours: its values stay as read). */
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

/* Start the kernel whose op values are ``fields`` (OP_KEYS of them, borrowed and held by the
 * caller until this returns) on the idle stream ``name``. */
static int
start_kernel_with(PyObject *gpu, PyObject *name, PyObject *stream, PyObject *const *fields, PyObject *ctx,
                  int *race)
{
    PyObject *clock, *index_object, *value, *bumped, *reads, *writes, *tickets, *ticket = NULL, *now;
    PyObject *duration, *end = NULL, *running = NULL, *started_kind, *node;
    PyObject *stream_fields[2], *gpu_fields[GPU_KEYS];
    PyObject *const stream_keys[2] = {s_index, s_clock};
    PyObject *const gpu_keys[GPU_KEYS] = {s_epoch, s_tickets, s_compute_factor, s_streams};
    Py_ssize_t index;
    int result = -1;

    if (need_many(stream, stream_keys, 2, stream_fields) < 0)
        return -1;
    index_object = stream_fields[0];
    clock = stream_fields[1];
    value = fields[OP_HOST_CLOCK];
    if (need_list(clock) < 0 || gpu_join(clock, value) < 0)
        return -1;
    index = PyLong_AsSsize_t(index_object);
    if (index == -1 && PyErr_Occurred())
        return -1;
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "gpu_pump: negative stream index");
        return -1;
    }
    while (PyList_GET_SIZE(clock) <= index) {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL || PyList_Append(clock, zero) < 0) {
            Py_XDECREF(zero);
            return -1;
        }
        Py_DECREF(zero);
    }
    bumped = PyNumber_Add(PyList_GET_ITEM(clock, index), one);
    if (bumped == NULL)
        return -1;
    PyList_SetItem(clock, index, bumped);
    reads = fields[OP_READS];
    writes = fields[OP_WRITES];
    {
        int any_access = PyObject_IsTrue(reads);
        if (any_access == 0)
            any_access = PyObject_IsTrue(writes);
        if (any_access < 0)
            return -1;
        if (any_access && *race < 0 && (*race = race_enabled(ctx)) < 0)
            return -1;
        if (any_access && *race &&
            check_kernel(gpu, name, index_object, clock, fields[OP_NAME], reads, writes, ctx) < 0)
            return -1;
    }
    /* read after check_kernel, whose race report runs Python */
    if (need_many(gpu, gpu_keys, GPU_KEYS, gpu_fields) < 0)
        return -1;
    tickets = gpu_fields[GPU_TICKETS];
    ticket = PyNumber_Add(tickets, one);
    if (ticket == NULL || PyDict_SetItem(gpu, s_tickets, ticket) < 0)
        goto done;
    now = ((ContextCore *)ctx)->now;
    node = ((ContextCore *)ctx)->node;
    if (now == NULL || node == NULL) {
        PyErr_SetString(PyExc_AttributeError, "gpu_pump: the context has no now or node");
        goto done;
    }
    Py_INCREF(now);
    Py_INCREF(node);
    duration = fields[OP_DURATION];
    if (duration == Py_None) {
        end = Py_NewRef(Py_None);
    } else {
        PyObject *factor = gpu_fields[GPU_FACTOR], *length, *payload, *epoch;
        int plain, draw = 0;
        plain = PyObject_RichCompareBool(factor, float_one, Py_EQ);
        if (plain < 0)
            goto release;
        if (plain) {
            length = Py_NewRef(duration);
        } else {
            PyObject *product = PyNumber_Multiply(duration, factor);
            length = product == NULL ? NULL : PyObject_CallOneArg(gpu_ceil, product);
            Py_XDECREF(product);
        }
        if (length == NULL)
            goto release;
        end = PyNumber_Add(now, length);
        Py_DECREF(length);
        if (end == NULL)
            goto release;
        {
            /* _draw_completion_order draws only for a timed kernel running on another stream */
            PyObject *streams = gpu_fields[GPU_STREAMS], *other_name, *other;
            Py_ssize_t cursor = 0;
            if (!PyDict_CheckExact(streams)) {
                PyErr_SetString(PyExc_TypeError, "gpu_pump: streams is not a dict");
                goto release;
            }
            while (PyDict_Next(streams, &cursor, &other_name, &other)) {
                PyObject *other_running;
                if (other == stream)
                    continue;
                other_running = need(other, s_running);
                if (other_running == NULL)
                    goto release;
                if (other_running != Py_None) {
                    PyObject *other_end = need(other_running, s_end_ns);
                    if (other_end == NULL)
                        goto release;
                    if (other_end != Py_None) {
                        draw = 1;
                        break;
                    }
                }
            }
            if (draw) {
                PyObject *args[4] = {gpu, name, end, ctx};
                PyObject *drawn = PyObject_Vectorcall(gpu_draw_order, args, 4, NULL);
                if (drawn == NULL)
                    goto release;
                Py_SETREF(end, drawn);
            }
        }
        /* the draw (Python) may have run since the walk: read the epoch again after one */
        epoch = draw ? need(gpu, s_epoch) : gpu_fields[GPU_EPOCH];
        if (epoch == NULL)
            goto release;
        payload = PyList_New(3);
        if (payload == NULL)
            goto release;
        Py_INCREF(epoch);
        PyList_SET_ITEM(payload, 0, epoch);
        Py_INCREF(name);
        PyList_SET_ITEM(payload, 1, name);
        Py_INCREF(ticket);
        PyList_SET_ITEM(payload, 2, ticket);
        if (deliver(ctx, end, node, gpu_done_kind, payload) < 0) {
            Py_DECREF(payload);
            goto release;
        }
        Py_DECREF(payload);
    }
    running = _PyDict_NewPresized(RUNNING_KEYS);
    if (running == NULL)
        goto release;
    {
        PyObject *kernel = fields[OP_NAME], *done_kind = fields[OP_DONE_KIND], *payload = fields[OP_PAYLOAD];
        if (PyDict_SetItem(running, s_name, kernel) < 0 || PyDict_SetItem(running, s_ticket, ticket) < 0 ||
            PyDict_SetItem(running, s_start_ns, now) < 0 || PyDict_SetItem(running, s_end_ns, end) < 0)
            goto release;
        if (PyDict_SetItem(running, s_done_kind, done_kind) < 0)
            goto release;
        if (PyDict_SetItem(running, s_payload, payload) < 0)
            goto release;
        if (PyDict_SetItem(stream, s_running, running) < 0)
            goto release;
        started_kind = fields[OP_STARTED_KIND];
        if (started_kind != Py_None && deliver(ctx, now, node, started_kind, payload) < 0)
            goto release;
    }
    result = 0;
release:
    Py_DECREF(now);
    Py_DECREF(node);
done:
    Py_XDECREF(ticket);
    Py_XDECREF(end);
    Py_XDECREF(running);
    return result;
}

/* gpu._complete_record. */
static int
complete_record(PyObject *entry, PyObject *generation, PyObject *stream, PyObject *now)
{
    PyObject *pending, *completed, *clock, *copy, *fields[2];
    PyObject *const keys[2] = {s_completed, s_pending}; /* the order of gpu._event_entry */
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

/* gpu._advance: 1 when a record completed on the way, 0 when not, -1 on error. The caller found
 * the stream idle (``running`` None) with ``queue`` (its queue) not empty. Taking a wait or
 * completing a record leaves ``running`` as it was; starting a kernel sets it, which ends the loop:
 * so ``running`` is not read again here. */
static int
advance(PyObject *gpu, PyObject *name, PyObject *stream, PyObject *queue, PyObject *ctx, int *race)
{
    PyObject *events = NULL;
    PyObject *const keys[2] = {s_event, s_generation};
    int recorded = 0;
    for (;;) {
        PyObject *op, *kind, *fields[2];
        int is_wait = 0, is_record = 0;
        if (PyList_GET_SIZE(queue) == 0)
            return recorded;
        op = PyList_GET_ITEM(queue, 0);
        kind = op_kind(op);
        if (kind == NULL)
            return -1;
        if (kind == s_wait) {
            is_wait = 1;
        } else if (kind == s_record) {
            is_record = 1;
        } else if (kind != s_kernel && PyUnicode_Check(kind)) {
            is_wait = PyUnicode_Compare(kind, s_wait) == 0;
            is_record = !is_wait && PyUnicode_Compare(kind, s_record) == 0;
        }
        if ((is_wait || is_record) && events == NULL) {
            events = need(gpu, s_events);
            if (events == NULL)
                return -1;
            if (!PyDict_CheckExact(events)) {
                PyErr_SetString(PyExc_TypeError, "gpu_pump: the events table is not a dict");
                return -1;
            }
        }
        if (is_wait) {
            PyObject *entry;
            if (need_many(op, keys, 2, fields) < 0)
                return -1;
            entry = PyDict_GetItemWithError(events, fields[0]);
            if (entry == NULL && PyErr_Occurred())
                return -1;
            if (entry != NULL) {
                PyObject *pending = need(entry, s_pending);
                int blocked = pending == NULL ? -1 : PySequence_Contains(pending, fields[1]);
                if (blocked < 0)
                    return -1;
                if (blocked)
                    return recorded;
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
                int joined = clock == NULL || entry_clock == NULL ? -1 : gpu_join(clock, entry_clock);
                Py_DECREF(entry);
                if (joined < 0)
                    return -1;
            }
        } else if (is_record) {
            PyObject *entry;
            int completed;
            op = pop_front(queue);
            if (op == NULL)
                return -1;
            entry = need_many(op, keys, 2, fields) < 0 ? NULL : need(events, fields[0]);
            completed = entry == NULL ? -1 : complete_record(entry, fields[1], stream, ((ContextCore *)ctx)->now);
            Py_DECREF(op);
            if (completed < 0)
                return -1;
            recorded = 1;
        } else {
            int started;
            op = pop_front(queue);
            if (op == NULL)
                return -1;
            started = start_kernel(gpu, name, stream, op, ctx, race);
            Py_DECREF(op);
            if (started < 0)
                return -1;
            return recorded; /* the stream runs the kernel now */
        }
    }
}

/* gpu_pump(gpu, ctx): gpu._pump_python(gpu, ctx) in C. */
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
    if (!PyObject_TypeCheck(ctx, &ContextCoreType) || ((ContextCore *)ctx)->now == NULL ||
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


/* -- the host-side API: launch, record, wait and the gpu.done handler ------------------------- */

/* gpu._stream's creation of stream ``name`` in ``streams`` (an exact dict that does not hold it):
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

/* gpu._event_entry's creation of ``event``'s entry in ``events`` (an exact dict that does not hold
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
    if (!PyObject_TypeCheck(ctx, &ContextCoreType))
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
        /* the stream's first use: gpu._stream checks the name and the bound and creates it */
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

/* gpu._enqueue_and_pump. Steals ``op``. */
static int
enqueue(PyObject *gpu, PyObject *stream, PyObject *op, PyObject *ctx, int may_move);

static int
enqueue_and_pump(PyObject *gpu, PyObject *stream, PyObject *op, PyObject *ctx)
{
    return enqueue(gpu, stream, op, ctx, 1);
}

/* gpu._enqueue_and_pump; ``may_move`` 0: the op cannot move when queued (a wait on a pending
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
 * gpu._enqueue_and_pump says why), popped at once and started from its op dict's values: so the
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
        /* the event's first record: gpu._event_entry checks the bound and creates its entry */
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
    next = PyNumber_Add(recorded, one);
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

/* gpu_done(table, state, event, ctx): the gpu.done handler of make_done_handler, or NotImplemented
 * when the Python one must run (a payload that is not [epoch, stream, ticket], another context). */
static PyObject *
gpu_done(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *table, *state, *event, *ctx, *payload, *epoch, *stream_name, *ticket, *gpu, *value, *streams;
    PyObject *stream, *running, *done_kind, *queue, *handler, *done_event, *result;
    PyObject *gpu_fields[2], *stream_fields[3], *running_fields[3];
    PyObject *const gpu_keys[2] = {s_epoch, s_streams};
    PyObject *const stream_keys[3] = {s_queue, s_running, s_clock};
    PyObject *const running_keys[3] = {s_ticket, s_done_kind, s_payload};
    int differs;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "gpu_done takes 4 arguments");
        return NULL;
    }
    table = args[0];
    state = args[1];
    event = args[2];
    ctx = args[3];
    if (!PyObject_TypeCheck(ctx, &ContextCoreType) || !PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 5 ||
        !PyDict_CheckExact(state) || !PyDict_CheckExact(table) || ((ContextCore *)ctx)->now == NULL ||
        ((ContextCore *)ctx)->node == NULL || ((ContextCore *)ctx)->world == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    payload = PyTuple_GET_ITEM(event, 4);
    if (!(PyList_CheckExact(payload) || PyTuple_CheckExact(payload)) || PySequence_Fast_GET_SIZE(payload) != 3)
        Py_RETURN_NOTIMPLEMENTED;
    epoch = PySequence_Fast_GET_ITEM(payload, 0);
    stream_name = PySequence_Fast_GET_ITEM(payload, 1);
    ticket = PySequence_Fast_GET_ITEM(payload, 2);
    gpu = PyDict_GetItemWithError(state, s_gpu);
    if (gpu == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (gpu == Py_None)
        Py_RETURN_NONE;
    if (!PyDict_CheckExact(gpu))
        Py_RETURN_NOTIMPLEMENTED;
    if (need_many(gpu, gpu_keys, 2, gpu_fields) < 0)
        return NULL;
    differs = PyObject_RichCompareBool(gpu_fields[0], epoch, Py_NE);
    if (differs != 0)
        return differs < 0 ? NULL : Py_NewRef(Py_None);
    streams = gpu_fields[1];
    if (!PyDict_CheckExact(streams))
        Py_RETURN_NOTIMPLEMENTED;
    stream = PyDict_GetItemWithError(streams, stream_name);
    if (stream == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (need_many(stream, stream_keys, 3, stream_fields) < 0)
        return NULL;
    running = stream_fields[1];
    if (running == Py_None)
        Py_RETURN_NONE;
    if (need_many(running, running_keys, 3, running_fields) < 0)
        return NULL;
    differs = PyObject_RichCompareBool(running_fields[0], ticket, Py_NE);
    if (differs != 0)
        return differs < 0 ? NULL : Py_NewRef(Py_None);
    Py_INCREF(running); /* ours now: the stream lets go of it */
    Py_INCREF(gpu);
    Py_INCREF(stream);
    result = NULL;
    done_event = NULL;
    if (PyDict_SetItem(stream, s_running, Py_None) < 0)
        goto release;
    /* the stream's queue and clock and the running dict's values, as read above: setting the
     * stream's ``running`` changes none of them, and the running dict is ours alone now */
    done_kind = running_fields[1];
    if (done_kind != Py_None) {
        PyObject *host = need(gpu, s_host_clock), *clock = stream_fields[2];
        if (host == NULL || gpu_join(host, clock) < 0)
            goto release;
    }
    queue = stream_fields[0];
    if (PyObject_IsTrue(queue)) {
        PyObject *pump_args[2] = {gpu, ctx};
        PyObject *pumped = gpu_pump(NULL, pump_args, 2);
        if (pumped == NULL)
            goto release;
        Py_DECREF(pumped);
    }
    if (done_kind == Py_None) {
        result = Py_NewRef(Py_None);
        goto release;
    }
    handler = PyDict_GetItemWithError(table, done_kind);
    if (handler == NULL) {
        PyObject *report_args[3] = {ctx, running, done_kind};
        if (PyErr_Occurred())
            goto release;
        result = PyObject_Vectorcall(gpu_unhandled, report_args, 3, NULL);
        if (result != NULL)
            Py_SETREF(result, Py_NewRef(Py_None));
        goto release;
    }
    Py_INCREF(handler);
    value = running_fields[2];
    done_event = make_event(PyTuple_GET_ITEM(event, 0), PyTuple_GET_ITEM(event, 1), PyTuple_GET_ITEM(event, 2),
                            done_kind, value);
    if (done_event == NULL) {
        Py_DECREF(handler);
        goto release;
    }
    set_field(&((ContextCore *)ctx)->event, done_event);
    {
        PyObject *handler_args[3] = {state, done_event, ctx};
        result = PyObject_Vectorcall(handler, handler_args, 3, NULL);
        if (result != NULL) /* a handler's return value means nothing; None is "handled" */
            Py_SETREF(result, Py_NewRef(Py_None));
    }
    Py_DECREF(handler);
release:
    Py_XDECREF(done_event);
    Py_DECREF(stream);
    Py_DECREF(gpu);
    Py_DECREF(running);
    return result;
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
    if ((float_one = PyFloat_FromDouble(1.0)) == NULL)
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

#endif
