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

static int
is_false(PyObject *value)
{
    if (PyList_CheckExact(value))
        return PyList_GET_SIZE(value) == 0;
    if (PyDict_CheckExact(value))
        return PyDict_GET_SIZE(value) == 0;
    return !PyObject_IsTrue(value);
}

/* One run segment's arguments and where it stands (run_segment's state). */
typedef struct {
    ContextCore *ctx;
    PyObject *world, *queue, *nodes, *down, *failures, *batch, *tables, *flush, *handler_for, *until;
    PyObject *t; /* the clock: a new reference */
    long long processed, limit, next_flush, batch_events, until_value;
    int chain, until_overflow;
} Segment;

#define GO_ON (-1) /* not a stop: the loop goes on */

/* Read run_segment's 16 arguments into ``segment`` (0), or -1 with an exception set. */
static int
segment_start(Segment *segment, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 16) {
        PyErr_SetString(PyExc_TypeError, "run_segment takes 16 arguments");
        return -1;
    }
    if (!PyObject_TypeCheck(args[0], &ContextCoreType) || !PyList_CheckExact(args[2]) ||
        !PyDict_CheckExact(args[3]) || !PyDict_CheckExact(args[7]) || !PyList_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError, "run_segment: arguments of the wrong types");
        return -1;
    }
    segment->ctx = (ContextCore *)args[0];
    segment->world = args[1];
    segment->queue = args[2];
    segment->nodes = args[3];
    segment->down = args[4];
    segment->failures = args[5];
    segment->batch = args[6];
    segment->tables = args[7];
    segment->chain = PyObject_IsTrue(args[8]);
    segment->processed = PyLong_AsLongLong(args[9]);
    segment->limit = PyLong_AsLongLong(args[10]);
    segment->next_flush = PyLong_AsLongLong(args[11]);
    segment->batch_events = PyLong_AsLongLong(args[12]);
    segment->until = args[13];
    segment->until_overflow = 0;
    segment->until_value = PyLong_AsLongLongAndOverflow(segment->until, &segment->until_overflow);
    segment->flush = args[14];
    segment->handler_for = args[15];
    if (segment->chain < 0 || PyErr_Occurred())
        return -1;
    segment->t = PyObject_GetAttr(segment->world, str_t_ns);
    return segment->t == NULL ? -1 : 0;
}

/* A popped event (a new reference): GO_ON when it is due (no later than ``until``; the caller
 * runs it), STOP_UNTIL when it is not (pushed back onto the queue), STOP_RAISED (released, an
 * exception set). */
static int
segment_until(Segment *segment, PyObject *event)
{
    PyObject *t_event;
    int later;
    if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) < 4) {
        PyErr_SetString(PyExc_TypeError, "a queued event is not an Event tuple");
        Py_DECREF(event);
        return STOP_RAISED;
    }
    t_event = PyTuple_GET_ITEM(event, 0);
    if (PyLong_CheckExact(t_event)) {
        int overflow;
        long long value = PyLong_AsLongLongAndOverflow(t_event, &overflow);
        later = overflow || segment->until_overflow ? PyObject_RichCompareBool(t_event, segment->until, Py_GT)
                                                    : value > segment->until_value;
    } else {
        later = PyObject_RichCompareBool(t_event, segment->until, Py_GT);
    }
    if (later == 0)
        return GO_ON;
    if (later < 0) {
        Py_DECREF(event);
        return STOP_RAISED;
    }
    return heap_push(segment->queue, event) < 0 ? STOP_RAISED : STOP_UNTIL; /* heap_push takes it */
}

/* The event into the chain's batch, and the batch flushed when it is full: 0, or -1 (an error). */
static int
segment_chain(Segment *segment, PyObject *event)
{
    PyObject *count, *called;
    if (PyList_Append(segment->batch, event) < 0)
        return -1;
    if (segment->processed < segment->next_flush)
        return 0;
    count = PyLong_FromLongLong(segment->processed);
    if (count == NULL)
        return -1;
    called = PyObject_CallOneArg(segment->flush, count);
    Py_DECREF(count);
    if (called == NULL)
        return -1;
    Py_DECREF(called);
    segment->next_flush = segment->processed + segment->batch_events;
    return 0;
}

/* 1 when the event is dropped because its node is down (every kind but "fault"), 0 when it runs,
 * -1 on error. */
static int
segment_dropped(Segment *segment, PyObject *dst, PyObject *kind)
{
    int is_down = is_false(segment->down) ? 0 : PySequence_Contains(segment->down, dst);
    if (is_down <= 0)
        return is_down;
    return PyObject_RichCompareBool(kind, str_fault, Py_NE);
}

/* The handler of (dst, kind), a new reference in *handler: the tables' (dict lookups), else
 * handler_for(dst, kind)'s. 1: found; 0: there is none (handler_for gave None); -1: an error. */
static int
segment_handler(Segment *segment, PyObject *dst, PyObject *kind, PyObject **handler)
{
    PyObject *table;
    *handler = NULL;
    table = PyDict_GetItemWithError(segment->tables, dst);
    if (table != NULL && PyDict_CheckExact(table))
        *handler = PyDict_GetItemWithError(table, kind);
    if (PyErr_Occurred()) /* an unhashable dst or kind: Python raises the same TypeError */
        return -1;
    if (*handler != NULL) {
        Py_INCREF(*handler);
        return 1;
    }
    *handler = PyObject_CallFunctionObjArgs(segment->handler_for, dst, kind, NULL);
    if (*handler == NULL)
        return -1;
    if (*handler != Py_None)
        return 1;
    Py_CLEAR(*handler);
    return 0;
}

/* Run a due event (a new reference, released here or handed over in *detail): the clock moves to
 * it, the chain takes it, its node's handler runs. GO_ON, STOP_FAILURE (the handler failed the
 * run), STOP_UNHANDLED (*detail is the event) or STOP_RAISED (an exception set). */
static int
segment_event(Segment *segment, PyObject *event, PyObject **detail)
{
    PyObject *t_event = PyTuple_GET_ITEM(event, 0), *dst, *kind, *handler, *state, *called;
    PyObject *call_args[3];
    int dropped, found;
    Py_INCREF(t_event);
    Py_SETREF(segment->t, t_event);
    set_field(&segment->ctx->now, t_event);
    segment->processed += 1;
    if (segment->chain && segment_chain(segment, event) < 0)
        goto raised;
    dst = PyTuple_GET_ITEM(event, 2);
    kind = PyTuple_GET_ITEM(event, 3);
    dropped = segment_dropped(segment, dst, kind);
    if (dropped != 0) {
        Py_DECREF(event);
        return dropped < 0 ? STOP_RAISED : GO_ON;
    }
    found = segment_handler(segment, dst, kind, &handler);
    if (found == 0) {
        *detail = event;
        return STOP_UNHANDLED;
    }
    if (found < 0)
        goto raised;
    state = PyDict_GetItemWithError(segment->nodes, dst);
    if (state == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, dst);
        Py_DECREF(handler);
        goto raised;
    }
    set_field(&segment->ctx->node, dst);
    set_field(&segment->ctx->state, state);
    set_field(&segment->ctx->event, event);
    call_args[0] = state;
    call_args[1] = event;
    call_args[2] = (PyObject *)segment->ctx;
    called = PyObject_Vectorcall(handler, call_args, 3, NULL);
    Py_DECREF(handler);
    if (called == NULL)
        goto raised;
    Py_DECREF(called);
    Py_DECREF(event);
    return is_false(segment->failures) ? GO_ON : STOP_FAILURE;
raised:
    Py_DECREF(event);
    return STOP_RAISED;
}

/* run_segment's answer to an exception: (STOP_RAISED, processed, t, the exception) for an
 * Exception; for anything else (KeyboardInterrupt, SystemExit) the world left where the loop
 * stood and the exception raised on. Releases segment->t. */
static PyObject *
segment_raised(Segment *segment)
{
    PyObject *type, *value, *traceback, *result = NULL, *count;
    PyErr_Fetch(&type, &value, &traceback);
    if (PyErr_GivenExceptionMatches(type, PyExc_Exception)) {
        PyErr_NormalizeException(&type, &value, &traceback);
        if (traceback != NULL)
            PyException_SetTraceback(value, traceback);
        result = Py_BuildValue("(iLOO)", STOP_RAISED, segment->processed, segment->t, value);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        Py_DECREF(segment->t);
        return result;
    }
    count = PyLong_FromLongLong(segment->processed);
    if (count != NULL) {
        PyObject_SetAttr(segment->world, str_events_processed, count);
        Py_DECREF(count);
    }
    PyObject_SetAttr(segment->world, str_t_ns, segment->t);
    PyErr_Clear();
    PyErr_Restore(type, value, traceback);
    Py_DECREF(segment->t);
    return NULL;
}

/* run_segment(ctx, world, queue, nodes, down, failures, batch, tables, chain, processed, limit,
 *             next_flush, batch_events, until, flush, handler_for)
 *   -> (stop, processed, t, detail)
 * The loop of Simulation._run_segment; see kernel.py for what each stop means. */
static PyObject *
run_segment(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Segment segment;
    PyObject *event, *detail = Py_None, *result;
    int stop = GO_ON;
    if (segment_start(&segment, args, nargs) < 0)
        return NULL;
    while (stop == GO_ON) {
        if (segment.processed >= segment.limit) {
            stop = STOP_LIMIT;
            break;
        }
        event = heap_pop(segment.queue);
        if (event == NULL) {
            stop = PyErr_Occurred() ? STOP_RAISED : STOP_DRAINED;
            break;
        }
        stop = segment_until(&segment, event);
        if (stop == GO_ON)
            stop = segment_event(&segment, event, &detail);
    }
    if (stop == STOP_RAISED)
        return segment_raised(&segment);
    result = Py_BuildValue("(iLOO)", stop, segment.processed, segment.t, detail);
    if (detail != Py_None)
        Py_DECREF(detail);
    Py_DECREF(segment.t);
    return result;
}

#endif /* _SPEEDUPS_LOOP_H */
