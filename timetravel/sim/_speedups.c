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
 * One translation unit, the kernel's only: this file holds the module and includes
 * _speedups_heap.h (the heap), _speedups_context.h (the Context's core and its methods),
 * _speedups_loop.h (the loop) and _speedups_pack.h (the chain batch's bytes). The layers above keep
 * their compiled code with them (fabric/_speedups.c: the GPU stream engine and the tree's timing;
 * snapshot/_speedups.c: the stored values' decoders; recording/_speedups.c: the reader's frame
 * check and untrack); the one that works on the kernel's objects reaches them through the
 * KernelApi capsule this module exports (_speedups_api.h), never the other way round.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_speedups_api.h"

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

/* An Event (configure's type) of the five fields: the kernel's MakeEvent (_speedups_api.h). */
static PyObject *
make_event(PyObject *t, PyObject *seq, PyObject *dst, PyObject *kind, PyObject *payload)
{
    PyObject *event;
    if (event_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the kernel's compiled core is not configured (context.py does it)");
        return NULL;
    }
    event = event_type->tp_alloc(event_type, 5);
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

#include "_speedups_context.h"
#include "_speedups_loop.h"
#include "_speedups_pack.h"

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

/* What the layers above may use of the kernel's C (_speedups_api.h). */
static KernelApi kernel_api = {KERNEL_API_VERSION, &ContextCoreType, make_event};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "_speedups", "The kernel's compiled core (optional).", -1, module_methods,
};

/* A module attribute (stolen reference); -1 when it could not be added (released then). */
static int
add_object(PyObject *module, const char *name, PyObject *value)
{
    if (value == NULL)
        return -1;
    if (PyModule_AddObject(module, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}

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
    /* speedups.py loads the module only when its INTERFACE_VERSION matches: a stale build (the
     * Python side changed, the .so was not rebuilt) leaves the pure-Python kernel running. */
    module = layer_module_create(&speedups_module, 5);
    if (module == NULL)
        return NULL;
    if (add_object(module, "ContextCore", Py_NewRef((PyObject *)&ContextCoreType)) < 0 ||
        add_object(module, "kernel_api", PyCapsule_New(&kernel_api, KERNEL_API_CAPSULE, NULL)) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
