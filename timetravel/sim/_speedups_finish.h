/* fabric/gpu.py ``schedule_finishes`` in C: a collective-level all-reduce ends every member's open
 * kernel at its own completion time. Included once, by _speedups.c, after _speedups_gpu.h (it uses
 * that file's need(), deliver() and interned keys).
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
#ifndef _SPEEDUPS_FINISH_H
#define _SPEEDUPS_FINISH_H

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
    payload = PyList_New(3);
    if (payload == NULL)
        return -1;
    Py_INCREF(epoch);
    PyList_SET_ITEM(payload, 0, epoch);
    Py_INCREF(stream_name);
    PyList_SET_ITEM(payload, 1, stream_name);
    Py_INCREF(ticket);
    PyList_SET_ITEM(payload, 2, ticket);
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
    if (gpu_done_kind == NULL || !PyObject_TypeCheck(ctx, &ContextCoreType) ||
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

#endif /* _SPEEDUPS_FINISH_H */
