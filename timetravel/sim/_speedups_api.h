/* The kernel's C interface to the compiled code of the layers above it.
 *
 * The kernel's extension (timetravel.sim._speedups) holds the kernel only. A layer above with
 * compiled code of its own that works on the kernel's objects (fabric's GPU stream engine,
 * timetravel/fabric/_speedups.c: it reads a context's fields and builds events) includes this
 * header and imports, once, in its module's init, the KernelApi capsule the kernel's module
 * exports: the ContextCore type (to tell the compiled context from another one; its fields are
 * this header's struct, so they are read directly, as the kernel reads them) and make_event.
 * Nothing here calls upward: the kernel's C knows no layer above it. Every layer's module is made
 * by layer_module_create (below), which gives it the INTERFACE_VERSION its loader checks.
 *
 * KERNEL_API_VERSION names this header's layout: a kernel built from another version of it fails
 * kernel_api_import(), so the extension above fails its import and its layer runs its pure-Python
 * reference (timetravel/sim/speedups.py load_extension), never a mismatched struct.
 */
#ifndef TIMETRAVEL_SIM_SPEEDUPS_API_H
#define TIMETRAVEL_SIM_SPEEDUPS_API_H

#define KERNEL_API_VERSION 1
#define KERNEL_API_CAPSULE "timetravel.sim._speedups.kernel_api"

/* The compiled fields of timetravel.sim.context.Context (its C base class). */
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

/* An Event tuple (t, seq, dst, kind, payload) of the kernel's Event type (a new reference). */
typedef PyObject *(*MakeEvent)(PyObject *t, PyObject *seq, PyObject *dst, PyObject *kind, PyObject *payload);

typedef struct {
    int version;                     /* KERNEL_API_VERSION of the kernel that made it */
    PyTypeObject *context_core_type; /* ContextCore's type: Context derives from it */
    MakeEvent make_event;
} KernelApi;

/* *field = value (a new reference), releasing the old one: how the loop sets a context's fields. */
static inline void
set_field(PyObject **field, PyObject *value)
{
    PyObject *old = *field;
    Py_INCREF(value);
    *field = value;
    Py_XDECREF(old);
}

/* The kernel's KernelApi (NULL with ImportError set when the kernel's extension is missing or of
 * another KERNEL_API_VERSION). For a layer above, in its module's init. */
static inline const KernelApi *
kernel_api_import(void)
{
    /* PyCapsule_Import imports the top package only and reads the rest as attributes: the
     * kernel's module is imported first, and any failure is an ImportError (the loader's signal
     * that this extension cannot be used). */
    PyObject *kernel = PyImport_ImportModule("timetravel.sim._speedups");
    const KernelApi *api = NULL;
    if (kernel != NULL) {
        api = (const KernelApi *)PyCapsule_Import(KERNEL_API_CAPSULE, 0);
        Py_DECREF(kernel);
    }
    if (api == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError)) {
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyErr_NormalizeException(&type, &value, &traceback);
            PyErr_Format(PyExc_ImportError, "the kernel's compiled core has no C interface: %S", value);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
        }
        return NULL;
    }
    if (api->version != KERNEL_API_VERSION) {
        PyErr_Format(PyExc_ImportError, "the kernel's compiled core has C interface %d, this extension needs %d",
                     api->version, KERNEL_API_VERSION);
        return NULL;
    }
    return api;
}

/* A layer's compiled module from its definition, with the INTERFACE_VERSION its speedups.py
 * requires (sim/speedups.py load_extension: a stale build is not used). Every layer's
 * PyInit__speedups makes its module with it, the kernel's too. */
static inline PyObject *
layer_module_create(struct PyModuleDef *definition, int interface_version)
{
    PyObject *module = PyModule_Create(definition);
    if (module != NULL && PyModule_AddIntConstant(module, "INTERFACE_VERSION", interface_version) < 0)
        Py_CLEAR(module);
    return module;
}

#endif /* TIMETRAVEL_SIM_SPEEDUPS_API_H */
