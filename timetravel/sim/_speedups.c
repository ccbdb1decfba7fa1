/* The kernel's compiled core: the event loop and the Context's hot methods in C.
 *
 * Optional. `pip install -e .` builds it when a C compiler is there (setup.py marks it optional);
 * without it, or with TIMETRAVEL_PURE_PYTHON=1, timetravel runs the pure-Python code in kernel.py
 * and context.py, which is the reference: this file must produce the same bits (the same choice
 * values, the same event tuples, the same heap layout, the same failures), which
 * tests/test_speedups.py checks by running scenarios both ways.
 *
 * Anything off the common path is handed back to the Python implementation instead of being
 * re-implemented here: a choice with overrides, a bound that is not a plain int in [1, 2**64),
 * a timer delay or a delivery time that is not a plain non-negative int (Python raises the error),
 * a handler-table miss, an unhandled event, an exception.
 *
 * The heap is heapq's algorithm, step for step (siftdown/siftup from CPython's _heapqmodule.c), so
 * the queue list has the same layout as with heapq and Python code may keep calling heapq on it.
 * Only the comparison is faster: events compare by (t, seq) read as C integers, falling back to
 * Python's tuple comparison when those are not small ints or are equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

static PyTypeObject *event_type = NULL;
static PyObject *hash64 = NULL;          /* xxhash.xxh3_64_intdigest */
static PyObject *counters_key = NULL;    /* CHOICE_COUNTERS_KEY */
static PyObject *python_choose = NULL;   /* the pure-Python Context methods, for the rare paths */
static PyObject *python_timer = NULL;
static PyObject *python_deliver = NULL;
static PyObject *str_stream_base = NULL; /* "_stream_base" */
static PyObject *str_seq = NULL;
static PyObject *str_events_processed = NULL;
static PyObject *str_t_ns = NULL;
static PyObject *str_fault = NULL;
static PyObject *one = NULL;
static PyObject *str_append = NULL;

/* -- the heap -------------------------------------------------------------------------------- */

static int
event_less(PyObject *a, PyObject *b)
{
    /* Only tuples that compare as tuples do (Event does not override comparison). */
    if (PyTuple_Check(a) && PyTuple_Check(b) && Py_TYPE(a)->tp_richcompare == PyTuple_Type.tp_richcompare &&
        Py_TYPE(b)->tp_richcompare == PyTuple_Type.tp_richcompare && PyTuple_GET_SIZE(a) >= 2 &&
        PyTuple_GET_SIZE(b) >= 2) {
        int index;
        for (index = 0; index < 2; index++) {
            PyObject *x = PyTuple_GET_ITEM(a, index);
            PyObject *y = PyTuple_GET_ITEM(b, index);
            int overflow_x, overflow_y;
            long long vx, vy;
            if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y))
                break;
            vx = PyLong_AsLongLongAndOverflow(x, &overflow_x);
            vy = PyLong_AsLongLongAndOverflow(y, &overflow_y);
            if (overflow_x || overflow_y)
                break;
            if (vx != vy)
                return vx < vy;
        }
    }
    return PyObject_RichCompareBool(a, b, Py_LT);
}

static int
heap_siftdown(PyListObject *heap, Py_ssize_t startpos, Py_ssize_t pos)
{
    PyObject *newitem, *parent, **arr;
    Py_ssize_t parentpos, size;
    int cmp;

    size = PyList_GET_SIZE(heap);
    if (pos >= size) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return -1;
    }
    arr = heap->ob_item;
    newitem = arr[pos];
    while (pos > startpos) {
        parentpos = (pos - 1) >> 1;
        parent = arr[parentpos];
        Py_INCREF(newitem);
        Py_INCREF(parent);
        cmp = event_less(newitem, parent);
        Py_DECREF(parent);
        Py_DECREF(newitem);
        if (cmp < 0)
            return -1;
        if (size != PyList_GET_SIZE(heap)) {
            PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
            return -1;
        }
        if (cmp == 0)
            break;
        arr = heap->ob_item;
        parent = arr[parentpos];
        newitem = arr[pos];
        arr[parentpos] = newitem;
        arr[pos] = parent;
        pos = parentpos;
    }
    return 0;
}

static int
heap_siftup(PyListObject *heap, Py_ssize_t pos)
{
    Py_ssize_t startpos, endpos, childpos, limit;
    PyObject *tmp1, *tmp2, **arr;
    int cmp;

    endpos = PyList_GET_SIZE(heap);
    startpos = pos;
    if (pos >= endpos) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return -1;
    }
    arr = heap->ob_item;
    limit = endpos >> 1;
    while (pos < limit) {
        childpos = 2 * pos + 1;
        if (childpos + 1 < endpos) {
            PyObject *a = arr[childpos];
            PyObject *b = arr[childpos + 1];
            Py_INCREF(a);
            Py_INCREF(b);
            cmp = event_less(a, b);
            Py_DECREF(a);
            Py_DECREF(b);
            if (cmp < 0)
                return -1;
            childpos += ((unsigned)cmp ^ 1);
            arr = heap->ob_item;
            if (endpos != PyList_GET_SIZE(heap)) {
                PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
                return -1;
            }
        }
        tmp1 = arr[childpos];
        tmp2 = arr[pos];
        arr[childpos] = tmp2;
        arr[pos] = tmp1;
        pos = childpos;
    }
    return heap_siftdown(heap, startpos, pos);
}

/* Push ``item`` (a new reference, stolen) onto ``heap``. */
static int
heap_push(PyObject *heap, PyObject *item)
{
    int status;
    if (!PyList_Check(heap)) {
        Py_DECREF(item);
        PyErr_SetString(PyExc_TypeError, "the queue must be a list");
        return -1;
    }
    status = PyList_Append(heap, item);
    Py_DECREF(item);
    if (status < 0)
        return -1;
    return heap_siftdown((PyListObject *)heap, 0, PyList_GET_SIZE(heap) - 1);
}

/* Pop the smallest item (a new reference); NULL without an error set when the heap is empty. */
static PyObject *
heap_pop(PyObject *heap)
{
    PyObject *lastelt, *returnitem;
    Py_ssize_t n = PyList_GET_SIZE(heap);
    if (n == 0)
        return NULL;
    lastelt = PyList_GET_ITEM(heap, n - 1);
    Py_INCREF(lastelt);
    if (PyList_SetSlice(heap, n - 1, n, NULL)) {
        Py_DECREF(lastelt);
        return NULL;
    }
    n--;
    if (!n)
        return lastelt;
    returnitem = PyList_GET_ITEM(heap, 0);
    PyList_SET_ITEM(heap, 0, lastelt);
    if (heap_siftup((PyListObject *)heap, 0)) {
        Py_DECREF(returnitem);
        return NULL;
    }
    return returnitem;
}

static PyObject *
make_event(PyObject *t, PyObject *seq, PyObject *dst, PyObject *kind, PyObject *payload)
{
    PyObject *event = event_type->tp_alloc(event_type, 5);
    if (event == NULL)
        return NULL;
    Py_INCREF(t);
    Py_INCREF(seq);
    Py_INCREF(dst);
    Py_INCREF(kind);
    Py_INCREF(payload);
    PyTuple_SET_ITEM(event, 0, t);
    PyTuple_SET_ITEM(event, 1, seq);
    PyTuple_SET_ITEM(event, 2, dst);
    PyTuple_SET_ITEM(event, 3, kind);
    PyTuple_SET_ITEM(event, 4, payload);
    return event;
}

/* -- the Context's core ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *world;
    PyObject *transport;
    PyObject *overrides;
    PyObject *choice_log;
    PyObject *now;
    PyObject *queue;
    PyObject *node;
    PyObject *event;
    PyObject *state;
    PyObject *stream_bases;
} ContextCore;

static int
core_traverse(ContextCore *self, visitproc visit, void *arg)
{
    Py_VISIT(self->world);
    Py_VISIT(self->transport);
    Py_VISIT(self->overrides);
    Py_VISIT(self->choice_log);
    Py_VISIT(self->now);
    Py_VISIT(self->queue);
    Py_VISIT(self->node);
    Py_VISIT(self->event);
    Py_VISIT(self->state);
    Py_VISIT(self->stream_bases);
    return 0;
}

static int
core_clear(ContextCore *self)
{
    Py_CLEAR(self->world);
    Py_CLEAR(self->transport);
    Py_CLEAR(self->overrides);
    Py_CLEAR(self->choice_log);
    Py_CLEAR(self->now);
    Py_CLEAR(self->queue);
    Py_CLEAR(self->node);
    Py_CLEAR(self->event);
    Py_CLEAR(self->state);
    Py_CLEAR(self->stream_bases);
    return 0;
}

static void
core_dealloc(ContextCore *self)
{
    PyObject_GC_UnTrack(self);
    core_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Call the pure-Python method ``function(self, *args, **kwargs)``: the reference for every rare path. */
static PyObject *
call_python(PyObject *function, PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *small[8], **stack, *result;
    Py_ssize_t total = nargs + (kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0), index;
    stack = total + 1 <= 8 ? small : PyMem_Malloc((size_t)(total + 1) * sizeof(PyObject *));
    if (stack == NULL)
        return PyErr_NoMemory();
    stack[0] = self;
    for (index = 0; index < total; index++)
        stack[index + 1] = args[index];
    result = PyObject_Vectorcall(function, stack, nargs + 1, kwnames);
    if (stack != small)
        PyMem_Free(stack);
    return result;
}

static PyObject *
core_choose(ContextCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *site, *bound, *counters, *index, *next, *bases, *base, *key, *hashed, *value;
    unsigned long long bound_value, hash_value, index_value;
    unsigned char index_bytes[8];
    int byte;

    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || self->state == NULL || self->node == NULL || self->stream_bases == NULL)
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    site = args[0];
    bound = args[1];
    if (self->overrides != Py_None || !PyLong_CheckExact(bound) || !PyDict_CheckExact(self->state))
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    bound_value = PyLong_AsUnsignedLongLong(bound);
    if (bound_value == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* 2**64, or out of range: Python maps or refuses it */
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    }
    if (bound_value == 0)
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    counters = PyDict_GetItemWithError(self->state, counters_key);
    if (counters == NULL || !PyDict_CheckExact(counters)) {
        if (PyErr_Occurred())
            return NULL;
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    }
    index = PyDict_GetItemWithError(counters, site);
    if (index == NULL) {
        if (PyErr_Occurred())
            return NULL;
        index = PyLong_FromLong(0);
    } else {
        if (!PyLong_CheckExact(index))
            return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
        Py_INCREF(index);
    }
    index_value = PyLong_AsUnsignedLongLong(index);
    if (index_value == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_DECREF(index);
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    }
    next = PyLong_FromUnsignedLongLong(index_value + 1);
    if (next == NULL || PyDict_SetItem(counters, site, next) < 0) {
        Py_XDECREF(next);
        Py_DECREF(index);
        return NULL;
    }
    Py_DECREF(next);

    base = NULL;
    bases = PyDict_CheckExact(self->stream_bases) ? PyDict_GetItemWithError(self->stream_bases, self->node)
                                                   : NULL;
    if (bases != NULL && PyDict_CheckExact(bases)) {
        base = PyDict_GetItemWithError(bases, site);
        Py_XINCREF(base);
    }
    if (base == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(index);
            return NULL;
        }
        base = PyObject_CallMethodObjArgs((PyObject *)self, str_stream_base, self->node, site, NULL);
        if (base == NULL) {
            Py_DECREF(index);
            return NULL;
        }
    }
    for (byte = 0; byte < 8; byte++)
        index_bytes[byte] = (unsigned char)(index_value >> (8 * byte));
    key = PyBytes_FromStringAndSize((const char *)index_bytes, 8);
    if (key == NULL) {
        Py_DECREF(base);
        Py_DECREF(index);
        return NULL;
    }
    {
        PyObject *call_args[2] = {key, base};
        hashed = PyObject_Vectorcall(hash64, call_args, 2, NULL);
    }
    Py_DECREF(key);
    Py_DECREF(base);
    if (hashed == NULL) {
        Py_DECREF(index);
        return NULL;
    }
    hash_value = PyLong_AsUnsignedLongLong(hashed);
    Py_DECREF(hashed);
    if (hash_value == (unsigned long long)-1 && PyErr_Occurred()) {
        Py_DECREF(index);
        return NULL;
    }
    value = PyLong_FromUnsignedLongLong(
        (unsigned long long)(((unsigned __int128)hash_value * bound_value) >> 64));
    if (value == NULL) {
        Py_DECREF(index);
        return NULL;
    }
    if (self->choice_log != NULL && self->choice_log != Py_None) {
        PyObject *appended, *entry = PyList_New(4);
        if (entry == NULL) {
            Py_DECREF(index);
            Py_DECREF(value);
            return NULL;
        }
        Py_INCREF(self->node);
        Py_INCREF(site);
        Py_INCREF(value);
        PyList_SET_ITEM(entry, 0, self->node);
        PyList_SET_ITEM(entry, 1, site);
        PyList_SET_ITEM(entry, 2, index);
        PyList_SET_ITEM(entry, 3, value);
        index = NULL; /* the entry owns it now */
        /* Only an exact list is appended to directly: a subclass may override append (the
         * minimizer's log keeps only what it needs), so it gets the method call Python makes. */
        if (PyList_CheckExact(self->choice_log)) {
            appended = PyList_Append(self->choice_log, entry) < 0 ? NULL : Py_NewRef(Py_None);
        } else {
            appended = PyObject_CallMethodOneArg(self->choice_log, str_append, entry);
        }
        if (appended == NULL) {
            Py_DECREF(entry);
            Py_DECREF(value);
            return NULL;
        }
        Py_DECREF(appended);
        Py_DECREF(entry);
    }
    Py_XDECREF(index);
    return value;
}

/* world.seq, then world.seq += 1: the event's scheduling number (a new reference). */
static PyObject *
next_seq(ContextCore *self)
{
    PyObject *seq, *next;
    seq = PyObject_GetAttr(self->world, str_seq);
    if (seq == NULL)
        return NULL;
    next = PyNumber_Add(seq, one);
    if (next == NULL || PyObject_SetAttr(self->world, str_seq, next) < 0) {
        Py_XDECREF(next);
        Py_DECREF(seq);
        return NULL;
    }
    Py_DECREF(next);
    return seq;
}

static PyObject *
schedule(ContextCore *self, PyObject *t, PyObject *dst, PyObject *kind, PyObject *payload)
{
    PyObject *seq, *event;
    seq = next_seq(self);
    if (seq == NULL)
        return NULL;
    event = make_event(t, seq, dst, kind, payload);
    Py_DECREF(seq);
    if (event == NULL || heap_push(self->queue, event) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
core_timer(ContextCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *delay, *t, *result;
    if (nargs < 2 || nargs > 3 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || self->now == NULL || self->node == NULL || self->world == NULL ||
        self->queue == NULL)
        return call_python(python_timer, (PyObject *)self, args, nargs, kwnames);
    delay = args[0];
    if (!PyLong_CheckExact(delay) || _PyLong_Sign(delay) < 0)
        return call_python(python_timer, (PyObject *)self, args, nargs, kwnames);
    t = PyNumber_Add(self->now, delay);
    if (t == NULL)
        return NULL;
    result = schedule(self, t, self->node, args[1], nargs == 3 ? args[2] : Py_None);
    Py_DECREF(t);
    return result;
}

static PyObject *
core_deliver(ContextCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *t;
    int earlier;
    if (nargs < 3 || nargs > 4 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || self->now == NULL || self->world == NULL || self->queue == NULL)
        return call_python(python_deliver, (PyObject *)self, args, nargs, kwnames);
    t = args[0];
    if (!PyLong_CheckExact(t))
        return call_python(python_deliver, (PyObject *)self, args, nargs, kwnames);
    earlier = PyObject_RichCompareBool(t, self->now, Py_LT);
    if (earlier != 0) {
        if (earlier < 0)
            return NULL;
        return call_python(python_deliver, (PyObject *)self, args, nargs, kwnames);
    }
    return schedule(self, t, args[1], args[2], nargs == 4 ? args[3] : Py_None);
}

static PyMethodDef core_methods[] = {
    {"choose", (PyCFunction)(void (*)(void))core_choose, METH_FASTCALL | METH_KEYWORDS,
     "Draw an int in [0, bound) at site; 0 is the canonical (simplest) value."},
    {"timer", (PyCFunction)(void (*)(void))core_timer, METH_FASTCALL | METH_KEYWORDS,
     "Deliver event kind to this node after delay_ns nanoseconds."},
    {"deliver", (PyCFunction)(void (*)(void))core_deliver, METH_FASTCALL | METH_KEYWORDS,
     "Schedule an event at absolute time t_ns; for transports and fault injectors."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef core_members[] = {
    {"world", T_OBJECT_EX, offsetof(ContextCore, world), 0, NULL},
    {"transport", T_OBJECT_EX, offsetof(ContextCore, transport), 0, NULL},
    {"overrides", T_OBJECT_EX, offsetof(ContextCore, overrides), 0, NULL},
    {"choice_log", T_OBJECT_EX, offsetof(ContextCore, choice_log), 0, NULL},
    {"now", T_OBJECT_EX, offsetof(ContextCore, now), 0, NULL},
    {"queue", T_OBJECT_EX, offsetof(ContextCore, queue), 0, NULL},
    {"node", T_OBJECT_EX, offsetof(ContextCore, node), 0, NULL},
    {"event", T_OBJECT_EX, offsetof(ContextCore, event), 0, NULL},
    {"state", T_OBJECT_EX, offsetof(ContextCore, state), 0, NULL},
    {"_stream_bases", T_OBJECT_EX, offsetof(ContextCore, stream_bases), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ContextCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "timetravel.sim._speedups.ContextCore",
    .tp_basicsize = sizeof(ContextCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled fields and hot methods of timetravel.sim.context.Context.",
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_methods = core_methods,
    .tp_members = core_members,
    .tp_new = PyType_GenericNew,
};

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


/* -- the chain batch's bytes ----------------------------------------------------------------- */

/* msgpack bytes of a list of events, identical to encoding.pack(events) (msgpack-python with
 * use_bin_type): the smallest int and str forms msgpack picks, a payload that is not None, an int
 * or a str packed by encoding.pack itself (msgpack output concatenates, so a value packs to the
 * same bytes alone as inside an array). Anything unusual (an int out of 64 bits, a str that is not
 * valid UTF-8, an item that is not an event, a payload encoding.pack refuses) returns None and the
 * caller packs the whole batch in Python, which gives the bytes or raises the error Python would. */

typedef struct {
    char *data;
    Py_ssize_t length;
    Py_ssize_t capacity;
} Buffer;

static int
buffer_reserve(Buffer *buffer, Py_ssize_t more)
{
    if (buffer->length + more > buffer->capacity) {
        Py_ssize_t capacity = buffer->capacity * 2 > buffer->length + more ? buffer->capacity * 2
                                                                           : buffer->length + more + 4096;
        char *data = PyMem_Realloc(buffer->data, (size_t)capacity);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        buffer->data = data;
        buffer->capacity = capacity;
    }
    return 0;
}

static int
buffer_put(Buffer *buffer, const void *bytes, Py_ssize_t length)
{
    if (buffer_reserve(buffer, length) < 0)
        return -1;
    memcpy(buffer->data + buffer->length, bytes, (size_t)length);
    buffer->length += length;
    return 0;
}

static int
put_tagged(Buffer *buffer, unsigned char tag, unsigned long long value, int width)
{
    unsigned char bytes[9];
    int index;
    bytes[0] = tag;
    for (index = 0; index < width; index++)
        bytes[1 + index] = (unsigned char)(value >> (8 * (width - 1 - index)));
    return buffer_put(buffer, bytes, 1 + width);
}

/* 1 packed, 0 not a plain int in 64 bits (the caller falls back), -1 error. */
static int
put_int(Buffer *buffer, PyObject *value)
{
    int overflow;
    long long signed_value;
    if (!PyLong_CheckExact(value))
        return 0;
    signed_value = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow < 0)
        return 0;
    if (overflow > 0) {
        unsigned long long unsigned_value = PyLong_AsUnsignedLongLong(value);
        if (unsigned_value == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return put_tagged(buffer, 0xcf, unsigned_value, 8) < 0 ? -1 : 1;
    }
    if (signed_value < -(1LL << 5)) {
        if (signed_value < -(1LL << 15)) {
            if (signed_value < -(1LL << 31))
                return put_tagged(buffer, 0xd3, (unsigned long long)signed_value, 8) < 0 ? -1 : 1;
            return put_tagged(buffer, 0xd2, (unsigned long long)signed_value, 4) < 0 ? -1 : 1;
        }
        if (signed_value < -(1LL << 7))
            return put_tagged(buffer, 0xd1, (unsigned long long)signed_value, 2) < 0 ? -1 : 1;
        return put_tagged(buffer, 0xd0, (unsigned long long)signed_value, 1) < 0 ? -1 : 1;
    }
    if (signed_value < (1LL << 7)) {
        unsigned char byte = (unsigned char)signed_value;
        return buffer_put(buffer, &byte, 1) < 0 ? -1 : 1;
    }
    if (signed_value < (1LL << 16)) {
        if (signed_value < (1LL << 8))
            return put_tagged(buffer, 0xcc, (unsigned long long)signed_value, 1) < 0 ? -1 : 1;
        return put_tagged(buffer, 0xcd, (unsigned long long)signed_value, 2) < 0 ? -1 : 1;
    }
    if (signed_value < (1LL << 32))
        return put_tagged(buffer, 0xce, (unsigned long long)signed_value, 4) < 0 ? -1 : 1;
    return put_tagged(buffer, 0xcf, (unsigned long long)signed_value, 8) < 0 ? -1 : 1;
}

/* 1 packed, 0 not an exact str that encodes to UTF-8 (fall back), -1 error. */
static int
put_str(Buffer *buffer, PyObject *value)
{
    Py_ssize_t length;
    const char *utf8;
    int status;
    if (!PyUnicode_CheckExact(value))
        return 0;
    utf8 = PyUnicode_AsUTF8AndSize(value, &length);
    if (utf8 == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (length < 32) {
        unsigned char tag = (unsigned char)(0xa0 | length);
        status = buffer_put(buffer, &tag, 1);
    } else if (length < 256) {
        status = put_tagged(buffer, 0xd9, (unsigned long long)length, 1);
    } else if (length < 65536) {
        status = put_tagged(buffer, 0xda, (unsigned long long)length, 2);
    } else if (length <= 0xffffffffLL) {
        status = put_tagged(buffer, 0xdb, (unsigned long long)length, 4);
    } else {
        return 0;
    }
    if (status < 0 || buffer_put(buffer, utf8, length) < 0)
        return -1;
    return 1;
}

static int
put_array_header(Buffer *buffer, Py_ssize_t length)
{
    if (length < 16) {
        unsigned char tag = (unsigned char)(0x90 | length);
        return buffer_put(buffer, &tag, 1);
    }
    if (length < 65536)
        return put_tagged(buffer, 0xdc, (unsigned long long)length, 2);
    return put_tagged(buffer, 0xdd, (unsigned long long)length, 4);
}

/* 1 packed, 0 fall back, -1 error. */
static int
put_event(Buffer *buffer, PyObject *event, PyObject *pack)
{
    PyObject *payload;
    int status, index;
    if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 5 ||
        (Py_TYPE(event) != event_type && !PyTuple_CheckExact(event)))
        return 0;
    if (put_array_header(buffer, 5) < 0)
        return -1;
    for (index = 0; index < 2; index++) {
        status = put_int(buffer, PyTuple_GET_ITEM(event, index));
        if (status <= 0)
            return status;
    }
    for (index = 2; index < 4; index++) {
        status = put_str(buffer, PyTuple_GET_ITEM(event, index));
        if (status <= 0)
            return status;
    }
    payload = PyTuple_GET_ITEM(event, 4);
    if (payload == Py_None) {
        unsigned char nil = 0xc0;
        return buffer_put(buffer, &nil, 1) < 0 ? -1 : 1;
    }
    status = PyLong_CheckExact(payload) ? put_int(buffer, payload)
             : PyUnicode_CheckExact(payload) ? put_str(buffer, payload)
                                             : 0;
    if (status != 0)
        return status;
    {
        PyObject *packed = PyObject_CallOneArg(pack, payload);
        if (packed == NULL || !PyBytes_Check(packed)) {
            Py_XDECREF(packed);
            PyErr_Clear(); /* the whole batch in Python raises what Python raises */
            return 0;
        }
        status = buffer_put(buffer, PyBytes_AS_STRING(packed), PyBytes_GET_SIZE(packed)) < 0 ? -1 : 1;
        Py_DECREF(packed);
        return status;
    }
}

/* pack_events(events, pack) -> bytes, or None when the caller must pack the batch in Python. */
static PyObject *
pack_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Buffer buffer = {NULL, 0, 0};
    PyObject *events, *result;
    Py_ssize_t index, count;
    if (nargs != 2 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "pack_events(events: list, pack)");
        return NULL;
    }
    events = args[0];
    count = PyList_GET_SIZE(events);
    if (buffer_reserve(&buffer, 16 + 24 * count) < 0 || put_array_header(&buffer, count) < 0)
        goto error;
    for (index = 0; index < PyList_GET_SIZE(events); index++) {
        int status = put_event(&buffer, PyList_GET_ITEM(events, index), args[1]);
        if (status < 0)
            goto error;
        if (status == 0) {
            PyMem_Free(buffer.data);
            Py_RETURN_NONE;
        }
    }
    if (PyList_GET_SIZE(events) != count) { /* a payload's packing changed the batch */
        PyMem_Free(buffer.data);
        Py_RETURN_NONE;
    }
    result = PyBytes_FromStringAndSize(buffer.data, buffer.length);
    PyMem_Free(buffer.data);
    return result;

error:
    PyMem_Free(buffer.data);
    return NULL;
}

/* configure(Event, xxh3_64_intdigest, counters_key, python_choose, python_timer, python_deliver) */
static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *event, *hash, *key, *choose, *timer, *deliver;
    if (!PyArg_ParseTuple(args, "O!OUOOO", &PyType_Type, &event, &hash, &key, &choose, &timer, &deliver))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)event, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "Event must be a tuple subclass");
        return NULL;
    }
    Py_INCREF(event);
    Py_XSETREF(event_type, (PyTypeObject *)event);
    Py_INCREF(hash);
    Py_XSETREF(hash64, hash);
    Py_INCREF(key);
    Py_XSETREF(counters_key, key);
    Py_INCREF(choose);
    Py_XSETREF(python_choose, choose);
    Py_INCREF(timer);
    Py_XSETREF(python_timer, timer);
    Py_INCREF(deliver);
    Py_XSETREF(python_deliver, deliver);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"run_segment", (PyCFunction)(void (*)(void))run_segment, METH_FASTCALL,
     "The kernel's event loop (see Simulation._run_segment)."},
    {"pack_events", (PyCFunction)(void (*)(void))pack_events, METH_FASTCALL,
     "msgpack bytes of a chain batch, as encoding.pack gives them (None: pack it in Python)."},
    {"configure", configure, METH_VARARGS, "Hand the module the Python objects it builds on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "_speedups", "The kernel's compiled core (optional).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *module;
    if (PyType_Ready(&ContextCoreType) < 0)
        return NULL;
    str_stream_base = PyUnicode_InternFromString("_stream_base");
    str_seq = PyUnicode_InternFromString("seq");
    str_events_processed = PyUnicode_InternFromString("events_processed");
    str_t_ns = PyUnicode_InternFromString("t_ns");
    str_fault = PyUnicode_InternFromString("fault");
    one = PyLong_FromLong(1);
    str_append = PyUnicode_InternFromString("append");
    if (!str_stream_base || !str_seq || !str_events_processed || !str_t_ns || !str_fault || !one || !str_append)
        return NULL;
    module = PyModule_Create(&speedups_module);
    if (module == NULL)
        return NULL;
    /* speedups.py loads the module only when this matches its INTERFACE_VERSION: a stale build
     * (the Python side changed, the .so was not rebuilt) leaves the pure-Python kernel running. */
    if (PyModule_AddIntConstant(module, "INTERFACE_VERSION", 2) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&ContextCoreType);
    if (PyModule_AddObject(module, "ContextCore", (PyObject *)&ContextCoreType) < 0) {
        Py_DECREF(&ContextCoreType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
