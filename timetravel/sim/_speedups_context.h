/* The Context's core: the compiled fields of timetravel.sim.context.Context and its hot methods
 * ``choose``, ``timer`` and ``deliver`` (context.py's PythonContextCore is the reference).
 * Included once, by _speedups.c (one translation unit), after _speedups_heap.h; see that file for
 * the rules it follows. The struct is in _speedups_api.h: fabric's compiled engine reads it too. */
#ifndef _SPEEDUPS_CONTEXT_H
#define _SPEEDUPS_CONTEXT_H

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

/* The index of the next draw at ``site``, and the node's counter moved past it (counters[site] + 1).
 * 1: *index is a new reference, *index_value its value; 0: Python must draw (a counter table or a
 * counter that is not a plain int, nothing changed); -1: an error. */
static int
choose_index(ContextCore *self, PyObject *site, PyObject **index, unsigned long long *index_value)
{
    PyObject *counters, *next;
    counters = PyDict_GetItemWithError(self->state, counters_key);
    if (counters == NULL || !PyDict_CheckExact(counters))
        return PyErr_Occurred() ? -1 : 0;
    *index = PyDict_GetItemWithError(counters, site);
    if (*index == NULL) {
        if (PyErr_Occurred())
            return -1;
        *index = PyLong_FromLong(0);
    } else {
        if (!PyLong_CheckExact(*index))
            return 0;
        Py_INCREF(*index);
    }
    *index_value = PyLong_AsUnsignedLongLong(*index);
    if (*index_value == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_DECREF(*index);
        return 0;
    }
    next = PyLong_FromUnsignedLongLong(*index_value + 1);
    if (next == NULL || PyDict_SetItem(counters, site, next) < 0) {
        Py_XDECREF(next);
        Py_DECREF(*index);
        return -1;
    }
    Py_DECREF(next);
    return 1;
}

/* The stream base of (node, site): the context's cache of them, else self._stream_base(node, site). */
static PyObject *
choose_base(ContextCore *self, PyObject *site)
{
    PyObject *bases, *base = NULL;
    bases = PyDict_CheckExact(self->stream_bases) ? PyDict_GetItemWithError(self->stream_bases, self->node)
                                                   : NULL;
    if (bases != NULL && PyDict_CheckExact(bases)) {
        base = PyDict_GetItemWithError(bases, site);
        Py_XINCREF(base);
    }
    if (base != NULL || PyErr_Occurred())
        return base;
    return PyObject_CallMethodObjArgs((PyObject *)self, str_stream_base, self->node, site, NULL);
}

/* The draw in [0, bound): xxh3_64(index as 8 little-endian bytes, seed=base) scaled to the bound. */
static PyObject *
choose_draw(unsigned long long index_value, PyObject *base, unsigned long long bound_value)
{
    PyObject *key, *hashed;
    unsigned long long hash_value;
    unsigned char index_bytes[8];
    int byte;
    for (byte = 0; byte < 8; byte++)
        index_bytes[byte] = (unsigned char)(index_value >> (8 * byte));
    key = PyBytes_FromStringAndSize((const char *)index_bytes, 8);
    if (key == NULL)
        return NULL;
    {
        PyObject *call_args[2] = {key, base};
        hashed = PyObject_Vectorcall(hash64, call_args, 2, NULL);
    }
    Py_DECREF(key);
    if (hashed == NULL)
        return NULL;
    hash_value = PyLong_AsUnsignedLongLong(hashed);
    Py_DECREF(hashed);
    if (hash_value == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromUnsignedLongLong((unsigned long long)(((unsigned __int128)hash_value * bound_value) >> 64));
}

/* choice_log.append([node, site, index, value]). */
static int
choose_log(ContextCore *self, PyObject *site, PyObject *index, PyObject *value)
{
    PyObject *appended, *entry = PyList_New(4);
    if (entry == NULL)
        return -1;
    PyList_SET_ITEM(entry, 0, Py_NewRef(self->node));
    PyList_SET_ITEM(entry, 1, Py_NewRef(site));
    PyList_SET_ITEM(entry, 2, Py_NewRef(index));
    PyList_SET_ITEM(entry, 3, Py_NewRef(value));
    /* Only an exact list is appended to directly: a subclass may override append (the
     * minimizer's log keeps only what it needs), so it gets the method call Python makes. */
    if (PyList_CheckExact(self->choice_log))
        appended = PyList_Append(self->choice_log, entry) < 0 ? NULL : Py_NewRef(Py_None);
    else
        appended = PyObject_CallMethodOneArg(self->choice_log, str_append, entry);
    Py_DECREF(entry);
    if (appended == NULL)
        return -1;
    Py_DECREF(appended);
    return 0;
}

static PyObject *
core_choose(ContextCore *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *site, *index, *base, *value;
    unsigned long long bound_value, index_value;
    int found;

    if (nargs != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || self->state == NULL || self->node == NULL || self->stream_bases == NULL)
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    site = args[0];
    if (self->overrides != Py_None || !PyLong_CheckExact(args[1]) || !PyDict_CheckExact(self->state))
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    bound_value = PyLong_AsUnsignedLongLong(args[1]);
    if (bound_value == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* 2**64, or out of range: Python maps or refuses it */
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    }
    if (bound_value == 0)
        return call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    found = choose_index(self, site, &index, &index_value);
    if (found <= 0)
        return found < 0 ? NULL : call_python(python_choose, (PyObject *)self, args, nargs, kwnames);
    base = choose_base(self, site);
    value = base == NULL ? NULL : choose_draw(index_value, base, bound_value);
    Py_XDECREF(base);
    if (value != NULL && self->choice_log != NULL && self->choice_log != Py_None &&
        choose_log(self, site, index, value) < 0)
        Py_CLEAR(value);
    Py_DECREF(index);
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

#endif /* _SPEEDUPS_CONTEXT_H */
