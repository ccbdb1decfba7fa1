/* The kernel's event loop (Simulation._run_segment in C).
 * Included once, by _speedups.c (one translation unit); see that file for the rules it follows. */
#ifndef _SPEEDUPS_LOOP_H
#define _SPEEDUPS_LOOP_H

/* -- the loop -------------------------------------------------------------------------------- */

enum {
    STOP_LIMIT = 0,
    STOP_DRAINED = 1,
    STOP_UNTIL = 2,
    STOP_FAILURE = 3,
    STOP_UNHANDLED = 4,
    STOP_RAISED = 5,
};

static void
set_field(PyObject **field, PyObject *value)
{
    PyObject *old = *field;
    Py_INCREF(value);
    *field = value;
    Py_XDECREF(old);
}

static int
is_false(PyObject *value)
{
    if (PyList_CheckExact(value))
        return PyList_GET_SIZE(value) == 0;
    if (PyDict_CheckExact(value))
        return PyDict_GET_SIZE(value) == 0;
    return !PyObject_IsTrue(value);
}

/* run_segment(ctx, world, queue, nodes, down, failures, batch, tables, chain, processed, limit,
 *             next_flush, batch_events, until, flush, handler_for)
 *   -> (stop, processed, t, detail)
 * The loop of Simulation._run_segment; see kernel.py for what each stop means. */
static PyObject *
run_segment(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ContextCore *ctx;
    PyObject *world, *queue, *nodes, *down, *failures, *batch, *tables, *flush, *handler_for;
    PyObject *t, *until, *event = NULL, *detail = Py_None, *result;
    long long processed, limit, next_flush, batch_events, until_value;
    int chain, stop = STOP_LIMIT, until_overflow = 0;

    if (nargs != 16) {
        PyErr_SetString(PyExc_TypeError, "run_segment takes 16 arguments");
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], &ContextCoreType) || !PyList_CheckExact(args[2]) ||
        !PyDict_CheckExact(args[3]) || !PyDict_CheckExact(args[7]) || !PyList_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError, "run_segment: arguments of the wrong types");
        return NULL;
    }
    ctx = (ContextCore *)args[0];
    world = args[1];
    queue = args[2];
    nodes = args[3];
    down = args[4];
    failures = args[5];
    batch = args[6];
    tables = args[7];
    chain = PyObject_IsTrue(args[8]);
    processed = PyLong_AsLongLong(args[9]);
    limit = PyLong_AsLongLong(args[10]);
    next_flush = PyLong_AsLongLong(args[11]);
    batch_events = PyLong_AsLongLong(args[12]);
    until = args[13];
    until_value = PyLong_AsLongLongAndOverflow(until, &until_overflow);
    flush = args[14];
    handler_for = args[15];
    if (chain < 0 || PyErr_Occurred())
        return NULL;
    t = PyObject_GetAttr(world, str_t_ns);
    if (t == NULL)
        return NULL;

    while (processed < limit) {
        PyObject *t_event, *dst, *kind, *table, *handler, *state, *called;
        PyObject *call_args[3];
        int later, is_down;

        event = heap_pop(queue);
        if (event == NULL) {
            if (PyErr_Occurred())
                goto raised;
            stop = STOP_DRAINED;
            break;
        }
        if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) < 4) {
            PyErr_SetString(PyExc_TypeError, "a queued event is not an Event tuple");
            goto raised;
        }
        t_event = PyTuple_GET_ITEM(event, 0);
        if (PyLong_CheckExact(t_event)) {
            int overflow;
            long long value = PyLong_AsLongLongAndOverflow(t_event, &overflow);
            later = overflow || until_overflow ? PyObject_RichCompareBool(t_event, until, Py_GT)
                                                : value > until_value;
        } else {
            later = PyObject_RichCompareBool(t_event, until, Py_GT);
        }
        if (later) {
            if (later < 0)
                goto raised;
            if (heap_push(queue, event) < 0) {
                event = NULL;
                goto raised;
            }
            event = NULL;
            stop = STOP_UNTIL;
            break;
        }
        Py_INCREF(t_event);
        Py_SETREF(t, t_event);
        set_field(&ctx->now, t_event);
        processed += 1;
        if (chain) {
            if (PyList_Append(batch, event) < 0)
                goto raised;
            if (processed >= next_flush) {
                PyObject *count = PyLong_FromLongLong(processed);
                if (count == NULL)
                    goto raised;
                called = PyObject_CallOneArg(flush, count);
                Py_DECREF(count);
                if (called == NULL)
                    goto raised;
                Py_DECREF(called);
                next_flush = processed + batch_events;
            }
        }
        dst = PyTuple_GET_ITEM(event, 2);
        kind = PyTuple_GET_ITEM(event, 3);
        is_down = is_false(down) ? 0 : PySequence_Contains(down, dst);
        if (is_down < 0)
            goto raised;
        if (is_down) {
            int not_fault = PyObject_RichCompareBool(kind, str_fault, Py_NE);
            if (not_fault < 0)
                goto raised;
            if (not_fault) {
                Py_CLEAR(event);
                continue;
            }
        }
        handler = NULL;
        table = PyDict_GetItemWithError(tables, dst);
        if (table != NULL && PyDict_CheckExact(table))
            handler = PyDict_GetItemWithError(table, kind);
        if (PyErr_Occurred()) /* an unhashable dst or kind: Python raises the same TypeError */
            goto raised;
        if (handler != NULL) {
            Py_INCREF(handler);
        } else {
            handler = PyObject_CallFunctionObjArgs(handler_for, dst, kind, NULL);
            if (handler == NULL)
                goto raised;
            if (handler == Py_None) {
                Py_DECREF(handler);
                stop = STOP_UNHANDLED;
                detail = event;
                event = NULL;
                break;
            }
        }
        state = PyDict_GetItemWithError(nodes, dst);
        if (state == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, dst);
            Py_DECREF(handler);
            goto raised;
        }
        set_field(&ctx->node, dst);
        set_field(&ctx->state, state);
        set_field(&ctx->event, event);
        call_args[0] = state;
        call_args[1] = event;
        call_args[2] = (PyObject *)ctx;
        called = PyObject_Vectorcall(handler, call_args, 3, NULL);
        Py_DECREF(handler);
        if (called == NULL)
            goto raised;
        Py_DECREF(called);
        Py_CLEAR(event);
        if (!is_false(failures)) {
            stop = STOP_FAILURE;
            break;
        }
    }
    Py_XDECREF(event);
    result = Py_BuildValue("(iLOO)", stop, processed, t, detail);
    if (detail != Py_None)
        Py_DECREF(detail);
    Py_DECREF(t);
    return result;

raised:
    Py_XDECREF(event);
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        if (traceback != NULL)
            PyException_SetTraceback(value, traceback);
        result = Py_BuildValue("(iLOO)", STOP_RAISED, processed, t, value);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        Py_DECREF(t);
        return result;
    }
    {
        /* Not an Exception (KeyboardInterrupt, SystemExit): leave the world where the loop stood. */
        PyObject *type, *value, *traceback, *count;
        PyErr_Fetch(&type, &value, &traceback);
        count = PyLong_FromLongLong(processed);
        if (count != NULL) {
            PyObject_SetAttr(world, str_events_processed, count);
            Py_DECREF(count);
        }
        PyObject_SetAttr(world, str_t_ns, t);
        PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    Py_DECREF(t);
    return NULL;
}

#endif /* _SPEEDUPS_LOOP_H */
