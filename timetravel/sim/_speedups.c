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
 *
 * One translation unit: this file holds the module, the Context's core and its methods, and
 * includes _speedups_heap.h (the heap), _speedups_loop.h (the loop), _speedups_pack.h (the chain
 * batch's bytes), _speedups_gpu.h (the GPU stream engine's pump, fabric/gpu.py's reference; the
 * fabric hands it the Python functions it calls back, so no C code imports a layer above sim/) and
 * _speedups_tree.h (the tree all-reduce's timing, fabric/collective.py's reference).
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

#include "_speedups_heap.h"

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

#include "_speedups_loop.h"
#include "_speedups_pack.h"
#include "_speedups_plain.h"
#include "_speedups_against.h"
#include "_speedups_gpu.h"
#include "_speedups_finish.h"
#include "_speedups_entry.h"
#include "_speedups_tree.h"

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
    {"changes_add", (PyCFunction)(void (*)(void))changes_add, METH_FASTCALL,
     "Changes.add's loop: each event's dst into a dict, its seq into a list when below seq_before."},
    {"configure", configure, METH_VARARGS, "Hand the module the Python objects it builds on."},
    {"untrack", untrack, METH_O, "Take a plain-data value's containers out of the garbage collector's reach."},
    {"untrack_events", untrack_events, METH_O, "untrack() for a list of read-only events and their payloads."},
    {"decode_plain", (PyCFunction)(void (*)(void))decode_plain, METH_FASTCALL,
     "A stored value's msgpack decoding for the common case (NotImplemented: decode it with msgpack)."},
    {"decode_plain_against", (PyCFunction)(void (*)(void))decode_plain_against, METH_FASTCALL,
     "decode_plain of a read-only value, sharing the parts it has in common with an earlier decoded value."},
    {"blob_entries", blob_entries, METH_O, "A BLOBS frame's entries checked, by digest (NotImplemented: check them in Python)."},
    {"copy_plain", copy_plain, METH_O, "A fresh copy of a decoded value, as decoding it again gives (NotImplemented: decode it)."},
    {"gpu_pump", (PyCFunction)(void (*)(void))gpu_pump, METH_FASTCALL,
     "The GPU stream engine's pump (fabric/gpu.py _pump_python), same bits."},
    {"configure_gpu", configure_gpu, METH_VARARGS, "Hand the GPU pump the Python functions it calls."},
    {"gpu_launch", (PyCFunction)(void (*)(void))gpu_launch, METH_FASTCALL, "fabric.launch (NotImplemented: run Python's)."},
    {"gpu_record", (PyCFunction)(void (*)(void))gpu_record, METH_FASTCALL, "fabric.record (NotImplemented: run Python's)."},
    {"gpu_wait", (PyCFunction)(void (*)(void))gpu_wait, METH_FASTCALL, "fabric.wait (NotImplemented: run Python's)."},
    {"gpu_done", (PyCFunction)(void (*)(void))gpu_done, METH_FASTCALL, "The gpu.done handler (NotImplemented: run Python's)."},
    {"launch", (PyCFunction)(void (*)(void))entry_launch_call, METH_FASTCALL | METH_KEYWORDS,
     "launch($module, /, ctx, stream, name, duration_ns, reads=(), writes=(), done_kind=None, payload=None, "
     "started_kind=None)\n--\n\nfabric.launch: queue a kernel (fabric/gpu.py; the compiled entry, no Python frame)."},
    {"record", (PyCFunction)(void (*)(void))entry_record_call, METH_FASTCALL | METH_KEYWORDS,
     "record($module, /, ctx, stream, event)\n--\n\nfabric.record: queue an event record (the compiled entry)."},
    {"wait", (PyCFunction)(void (*)(void))entry_wait_call, METH_FASTCALL | METH_KEYWORDS,
     "wait($module, /, ctx, stream, event)\n--\n\nfabric.wait: make a stream wait for an event (the compiled entry)."},
    {"gpu_done_entry", (PyCFunction)(void (*)(void))gpu_done_entry, METH_FASTCALL,
     "The gpu.done handler (table, python_handler, state, event, ctx): gpu_done, or the Python handler."},
    {"configure_entries", configure_entries, METH_VARARGS, "Hand the GPU entries gpu.py's module dict and functions."},
    {"gpu_schedule_finishes", (PyCFunction)(void (*)(void))gpu_schedule_finishes, METH_FASTCALL,
     "fabric.schedule_finishes (NotImplemented: run Python's)."},
    {"tree_times", (PyCFunction)(void (*)(void))tree_times, METH_FASTCALL,
     "The tree all-reduce's timing (fabric/collective.py tree_completions_python), same ints; None: run that."},
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
    if (gpu_intern() < 0 || entry_intern() < 0)
        return NULL;
    module = PyModule_Create(&speedups_module);
    if (module == NULL)
        return NULL;
    /* speedups.py loads the module only when this matches its INTERFACE_VERSION: a stale build
     * (the Python side changed, the .so was not rebuilt) leaves the pure-Python kernel running. */
    if (PyModule_AddIntConstant(module, "INTERFACE_VERSION", 4) < 0) {
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
