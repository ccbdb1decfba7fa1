/* The GPU stream engine's kernel completions: the ``gpu.done`` handler (fabric/gpu.py
 * make_done_handler's ``on_gpu_done``) and ``schedule_finishes`` in C. Included once, by
 * fabric/_speedups.c, after _speedups_gpu_pump.h (a completion pumps the streams).
 *
 * gpu_schedule_finishes(ctx, nodes, stream, name, times, kind, payload, finish_one) runs, node by
 * node in the list's order, what the Python loop runs: ``finish_one(ctx, node, stream, name, t)``
 * (gpu.schedule_finish) and, when it finds no such kernel running, ``ctx.deliver(t, node, kind,
 * payload)``. A node whose state holds anything but the engine's exact dicts is handed to
 * ``finish_one`` itself, in its turn, so every delivery keeps its place (its sequence number)
 * and every error is the one Python raises. At 10,000 ranks the loop in Python cost ~3.5% of a
 * tree step (five dict reads, a call and a list per rank). It returns None, or NotImplemented
 * (touching nothing) when the arguments are not the plain lists and context it expects.
 */
#ifndef _SPEEDUPS_DONE_H
#define _SPEEDUPS_DONE_H

/* -- the gpu.done handler -------------------------------------------------------------------- */

/* The kernel a gpu.done payload [epoch, stream, ticket] names, still running on the node's GPU:
 * 1 (*gpu, *stream, the stream's queue, running and clock in ``stream_fields`` and the running
 * dict's ticket, done_kind and payload in ``running_fields``, all borrowed); 0 when the event is
 * stale (no GPU, another epoch, no such stream, another ticket: it does nothing); 2 when Python
 * must judge (a GPU state of other types); -1 on error. */
static int
done_lookup(PyObject *state, PyObject *payload, PyObject **gpu, PyObject **stream, PyObject **stream_fields,
            PyObject **running_fields)
{
    PyObject *gpu_fields[2];
    PyObject *const gpu_keys[2] = {s_epoch, s_streams};
    PyObject *const stream_keys[3] = {s_queue, s_running, s_clock};
    PyObject *const running_keys[3] = {s_ticket, s_done_kind, s_payload};
    int differs;
    *gpu = PyDict_GetItemWithError(state, s_gpu);
    if (*gpu == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (*gpu == Py_None)
        return 0;
    if (!PyDict_CheckExact(*gpu))
        return 2;
    if (need_many(*gpu, gpu_keys, 2, gpu_fields) < 0)
        return -1;
    differs = PyObject_RichCompareBool(gpu_fields[0], PySequence_Fast_GET_ITEM(payload, 0), Py_NE);
    if (differs != 0)
        return differs < 0 ? -1 : 0;
    if (!PyDict_CheckExact(gpu_fields[1]))
        return 2;
    *stream = PyDict_GetItemWithError(gpu_fields[1], PySequence_Fast_GET_ITEM(payload, 1));
    if (*stream == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (need_many(*stream, stream_keys, 3, stream_fields) < 0)
        return -1;
    if (stream_fields[1] == Py_None)
        return 0;
    if (need_many(stream_fields[1], running_keys, 3, running_fields) < 0)
        return -1;
    differs = PyObject_RichCompareBool(running_fields[0], PySequence_Fast_GET_ITEM(payload, 2), Py_NE);
    if (differs != 0)
        return differs < 0 ? -1 : 0;
    return 1;
}

/* The handler of ``done_kind`` in the role's table run on the gpu.done event's twin of that kind
 * (its payload ``value``; ctx.event set to it, as Python sets it), or the kind reported as
 * unhandled. None, or NULL on error. */
static PyObject *
done_handler(PyObject *table, PyObject *state, PyObject *event, PyObject *ctx, PyObject *running,
             PyObject *done_kind, PyObject *value)
{
    PyObject *handler, *done_event, *result;
    handler = PyDict_GetItemWithError(table, done_kind);
    if (handler == NULL) {
        PyObject *report_args[3] = {ctx, running, done_kind};
        if (PyErr_Occurred())
            return NULL;
        result = PyObject_Vectorcall(gpu_unhandled, report_args, 3, NULL);
    } else {
        Py_INCREF(handler);
        done_event = make_event(PyTuple_GET_ITEM(event, 0), PyTuple_GET_ITEM(event, 1), PyTuple_GET_ITEM(event, 2),
                                done_kind, value);
        if (done_event == NULL) {
            Py_DECREF(handler);
            return NULL;
        }
        set_field(&((ContextCore *)ctx)->event, done_event);
        {
            PyObject *handler_args[3] = {state, done_event, ctx};
            result = PyObject_Vectorcall(handler, handler_args, 3, NULL);
        }
        Py_DECREF(handler);
        Py_DECREF(done_event);
    }
    if (result != NULL) /* a handler's return value means nothing; None is "handled" */
        Py_SETREF(result, Py_NewRef(Py_None));
    return result;
}

/* The running kernel done: its stream idle, the host clock joined with the stream's (a kernel with
 * a done_kind: the host hears of it), the streams pumped when the stream has work queued, then
 * the done_kind's handler run. None, or NULL on error. */
static PyObject *
done_complete(PyObject *table, PyObject *state, PyObject *event, PyObject *ctx, PyObject *gpu, PyObject *stream,
              PyObject *const *stream_fields, PyObject *const *running_fields)
{
    PyObject *running = stream_fields[1], *done_kind = running_fields[1], *result = NULL;
    Py_INCREF(running); /* ours now: the stream lets go of it */
    Py_INCREF(gpu);
    Py_INCREF(stream);
    if (PyDict_SetItem(stream, s_running, Py_None) < 0)
        goto release;
    /* the stream's queue and clock and the running dict's values, as read before: setting the
     * stream's ``running`` changes none of them, and the running dict is ours alone now */
    if (done_kind != Py_None) {
        PyObject *host = need(gpu, s_host_clock);
        if (host == NULL || gpu_join(host, stream_fields[2]) < 0)
            goto release;
    }
    if (PyObject_IsTrue(stream_fields[0])) {
        PyObject *pump_args[2] = {gpu, ctx};
        PyObject *pumped = gpu_pump(NULL, pump_args, 2);
        if (pumped == NULL)
            goto release;
        Py_DECREF(pumped);
    }
    if (done_kind == Py_None)
        result = Py_NewRef(Py_None);
    else
        result = done_handler(table, state, event, ctx, running, done_kind, running_fields[2]);
release:
    Py_DECREF(stream);
    Py_DECREF(gpu);
    Py_DECREF(running);
    return result;
}

/* gpu_done(table, state, event, ctx): the gpu.done handler of make_done_handler, or NotImplemented
 * when the Python one must run (a payload that is not [epoch, stream, ticket], another context). */
static PyObject *
gpu_done(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *table, *state, *event, *ctx, *payload, *gpu = NULL, *stream = NULL;
    PyObject *stream_fields[3], *running_fields[3];
    int found;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "gpu_done takes 4 arguments");
        return NULL;
    }
    table = args[0];
    state = args[1];
    event = args[2];
    ctx = args[3];
    if (!PyObject_TypeCheck(ctx, context_core_type) || !PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 5 ||
        !PyDict_CheckExact(state) || !PyDict_CheckExact(table) || ((ContextCore *)ctx)->now == NULL ||
        ((ContextCore *)ctx)->node == NULL || ((ContextCore *)ctx)->world == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    payload = PyTuple_GET_ITEM(event, 4);
    if (!(PyList_CheckExact(payload) || PyTuple_CheckExact(payload)) || PySequence_Fast_GET_SIZE(payload) != 3)
        Py_RETURN_NOTIMPLEMENTED;
    found = done_lookup(state, payload, &gpu, &stream, stream_fields, running_fields);
    if (found == 2)
        Py_RETURN_NOTIMPLEMENTED;
    if (found <= 0)
        return found < 0 ? NULL : Py_NewRef(Py_None);
    return done_complete(table, state, event, ctx, gpu, stream, stream_fields, running_fields);
}

/* -- schedule_finishes ------------------------------------------------------------------------- */

/* 1: scheduled (the kernel's completion is delivered); 0: no such kernel runs on the node;
 * 2: the node's state is not the engine's plain dicts (finish_one must decide); -1: error. */
static int
finish_plain(PyObject *ctx, PyObject *nodes_table, PyObject *node, PyObject *stream_name, PyObject *name,
             PyObject *t)
{
    PyObject *state, *gpu, *streams, *stream, *running, *end, *kernel, *epoch, *ticket, *payload;
    int same, delivered;
    state = PyDict_GetItemWithError(nodes_table, node);
    if (state == NULL)
        return PyErr_Occurred() ? -1 : 2;
    if (!PyDict_CheckExact(state))
        return 2;
    gpu = PyDict_GetItemWithError(state, s_gpu);
    if (gpu == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (gpu == Py_None)
        return 0;
    if (!PyDict_CheckExact(gpu))
        return 2;
    streams = PyDict_GetItemWithError(gpu, s_streams);
    if (streams == NULL || !PyDict_CheckExact(streams))
        return PyErr_Occurred() ? -1 : 2;
    stream = PyDict_GetItemWithError(streams, stream_name);
    if (stream == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyDict_CheckExact(stream))
        return 2;
    running = PyDict_GetItemWithError(stream, s_running);
    if (running == NULL)
        return PyErr_Occurred() ? -1 : 2;
    if (running == Py_None)
        return 0;
    if (!PyDict_CheckExact(running))
        return 2;
    end = PyDict_GetItemWithError(running, s_end_ns);
    kernel = end == NULL ? NULL : PyDict_GetItemWithError(running, s_name);
    ticket = kernel == NULL ? NULL : PyDict_GetItemWithError(running, s_ticket);
    epoch = ticket == NULL ? NULL : PyDict_GetItemWithError(gpu, s_epoch);
    if (epoch == NULL)
        return PyErr_Occurred() ? -1 : 2;
    if (end != Py_None)
        return 0;
    same = PyObject_RichCompareBool(kernel, name, Py_EQ);
    if (same <= 0)
        return same;
    payload = done_payload(epoch, stream_name, ticket);
    if (payload == NULL)
        return -1;
    delivered = deliver(ctx, t, node, gpu_done_kind, payload);
    Py_DECREF(payload);
    return delivered < 0 ? -1 : 1;
}

static PyObject *
gpu_schedule_finishes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *ctx, *nodes, *stream_name, *name, *times, *kind, *payload, *finish_one, *nodes_table;
    Py_ssize_t index, count;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "gpu_schedule_finishes takes 8 arguments");
        return NULL;
    }
    ctx = args[0];
    nodes = args[1];
    stream_name = args[2];
    name = args[3];
    times = args[4];
    kind = args[5];
    payload = args[6];
    finish_one = args[7];
    if (gpu_done_kind == NULL || !PyObject_TypeCheck(ctx, context_core_type) ||
        ((ContextCore *)ctx)->world == NULL || !PyList_CheckExact(nodes) || !PyList_CheckExact(times) ||
        PyList_GET_SIZE(nodes) != PyList_GET_SIZE(times) || !PyUnicode_CheckExact(stream_name))
        Py_RETURN_NOTIMPLEMENTED;
    nodes_table = PyObject_GetAttrString(((ContextCore *)ctx)->world, "nodes");
    if (nodes_table == NULL)
        return NULL;
    if (!PyDict_CheckExact(nodes_table)) {
        Py_DECREF(nodes_table);
        Py_RETURN_NOTIMPLEMENTED;
    }
    count = PyList_GET_SIZE(nodes);
    for (index = 0; index < count && index < PyList_GET_SIZE(nodes) && index < PyList_GET_SIZE(times);
         index++) {
        PyObject *node = PyList_GET_ITEM(nodes, index), *t = PyList_GET_ITEM(times, index);
        int finished;
        Py_INCREF(node);
        Py_INCREF(t);
        finished = finish_plain(ctx, nodes_table, node, stream_name, name, t);
        if (finished == 2) {
            PyObject *call_args[5] = {ctx, node, stream_name, name, t};
            PyObject *result = PyObject_Vectorcall(finish_one, call_args, 5, NULL);
            finished = result == NULL ? -1 : PyObject_IsTrue(result);
            Py_XDECREF(result);
        }
        if (finished == 0)
            finished = deliver(ctx, t, node, kind, payload);
        Py_DECREF(t);
        Py_DECREF(node);
        if (finished < 0) {
            Py_DECREF(nodes_table);
            return NULL;
        }
    }
    Py_DECREF(nodes_table);
    Py_RETURN_NONE;
}

#endif /* _SPEEDUPS_DONE_H */
