/* fabric.launch, fabric.record, fabric.wait and the gpu.done handler as C callables: what the
 * scenario's handler calls is this code itself, not a Python function that calls it.
 * Included once, by fabric/_speedups.c, last of the engine's headers (it runs gpu_launch, gpu_record,
 * gpu_wait and gpu_done).
 *
 * fabric/gpu.py's ``launch`` (and ``record``, ``wait``) was a Python function whose body asked the
 * compiled engine (``_engine.gpu_launch``) and ran ``_launch_python`` when it handed back
 * NotImplemented. Its frame (keyword arguments bound, a global and an attribute read, a call of 9
 * arguments) cost ~500 instructions a call, 8 calls per rank and step of dp_training, and the
 * ``gpu.done`` handler's frame as much, 4 times a rank and step. Each entry here does what that
 * Python body does, in the same order, with no frame:
 *
 * - the arguments are bound as Python binds them (positional, then keywords by name, defaults for
 *   the rest); a call Python would refuse (a missing or unknown argument, one given twice) is handed
 *   to the Python function itself, which raises its own TypeError;
 * - ``gpu._engine`` is read at every call (tests switch engines by setting it): the compiled module
 *   runs its C body (``gpu_launch``, ...) and the Python body only for NotImplemented; None runs the
 *   Python body; anything else goes through the Python function, as it always did.
 *
 * configure_entries(globals, launch, record, wait, launch_python, record_python, wait_python,
 * streams_max, events_max) hands over gpu.py's module dict, its Python functions and their bodies,
 * and the bounds the engine's first use of a stream or an event checks (gpu_launch, gpu_record
 * create them in C as gpu_streams.stream_of and gpu_streams.event_entry would; _speedups_gpu_host.h).
 */
#ifndef _SPEEDUPS_ENTRY_H
#define _SPEEDUPS_ENTRY_H

static PyObject *entry_globals = NULL; /* fabric/gpu.py's module dict: its _engine picks the engine */
static PyObject *entry_launch = NULL, *entry_record = NULL, *entry_wait = NULL; /* gpu.launch, ... */
static PyObject *entry_launch_body = NULL, *entry_record_body = NULL, *entry_wait_body = NULL;
static PyObject *s_engine, *s_ctx, *s_stream, *s_empty_tuple;

#define LAUNCH_ARGUMENTS 9
#define EVENT_ARGUMENTS 3

/* Bind a vectorcall's arguments to ``count`` parameters named ``names`` (borrowed into
 * ``values``), the first ``required`` of them without a default, the rest defaulting to
 * ``defaults``. 1: bound; 0: a call Python would refuse (its own function must raise). */
static int
entry_bind(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject *const *names, int count,
           int required, PyObject *const *defaults, PyObject **values)
{
    Py_ssize_t keywords = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames), index;
    int at;
    if (nargs > count)
        return 0;
    for (at = 0; at < count; at++)
        values[at] = at < nargs ? args[at] : NULL;
    for (index = 0; index < keywords; index++) {
        PyObject *keyword = PyTuple_GET_ITEM(kwnames, index);
        for (at = 0; at < count && names[at] != keyword; at++)
            ;
        if (at == count) /* a keyword string that is not the interned one: compare the text */
            for (at = 0; at < count && !(PyUnicode_Check(keyword) && PyUnicode_Compare(keyword, names[at]) == 0);
                 at++)
                ;
        if (at == count || values[at] != NULL)
            return 0;
        values[at] = args[nargs + index];
    }
    for (at = 0; at < count; at++) {
        if (values[at] == NULL) {
            if (at < required)
                return 0;
            values[at] = defaults[at - required];
        }
    }
    return 1;
}

/* gpu._engine, borrowed (NULL with an error set, or NULL when the module has none: Python's
 * function then raises its NameError). */
static PyObject *
entry_engine(void)
{
    if (entry_globals == NULL)
        return NULL;
    return PyDict_GetItemWithError(entry_globals, s_engine);
}

/* The shared body of the three entries: ``python`` is the Python function (for a call it would
 * refuse, an engine that is neither the module nor None, or before configure_entries); ``body``
 * the Python body the NotImplemented of ``compiled`` hands over to. */
static PyObject *
entry_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject *python,
           PyObject *body, PyObject *(*compiled)(PyObject *, PyObject *const *, Py_ssize_t),
           PyObject *const *names, int count, int required, PyObject *const *defaults)
{
    PyObject *values[LAUNCH_ARGUMENTS], *engine, *result;
    if (python == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the GPU entries are not configured (fabric/gpu.py does it)");
        return NULL;
    }
    engine = entry_engine();
    if (engine == NULL && PyErr_Occurred())
        return NULL;
    if ((engine != module && engine != Py_None) ||
        !entry_bind(args, nargs, kwnames, names, count, required, defaults, values))
        return PyObject_Vectorcall(python, args, nargs, kwnames);
    if (engine == module) {
        result = compiled(module, values, count);
        if (result == NULL || result == Py_None)
            return result; /* ``engine.gpu_launch(...) is None``: done */
        Py_DECREF(result);
    }
    result = PyObject_Vectorcall(body, values, count, NULL);
    if (result != NULL)
        Py_SETREF(result, Py_NewRef(Py_None));
    return result;
}

/* launch(ctx, stream, name, duration_ns, reads=(), writes=(), done_kind=None, payload=None,
 *        started_kind=None) */
static PyObject *
entry_launch_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *const names[LAUNCH_ARGUMENTS] = {s_ctx,       s_stream,  s_name,    s_duration_ns, s_reads,
                                               s_writes,    s_done_kind, s_payload, s_started_kind};
    PyObject *const defaults[5] = {s_empty_tuple, s_empty_tuple, Py_None, Py_None, Py_None};
    return entry_call(module, args, nargs, kwnames, entry_launch, entry_launch_body, gpu_launch, names,
                      LAUNCH_ARGUMENTS, 4, defaults);
}

/* record(ctx, stream, event) */
static PyObject *
entry_record_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *const names[EVENT_ARGUMENTS] = {s_ctx, s_stream, s_event};
    return entry_call(module, args, nargs, kwnames, entry_record, entry_record_body, gpu_record, names,
                      EVENT_ARGUMENTS, EVENT_ARGUMENTS, NULL);
}

/* wait(ctx, stream, event) */
static PyObject *
entry_wait_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *const names[EVENT_ARGUMENTS] = {s_ctx, s_stream, s_event};
    return entry_call(module, args, nargs, kwnames, entry_wait, entry_wait_body, gpu_wait, names,
                      EVENT_ARGUMENTS, EVENT_ARGUMENTS, NULL);
}

/* gpu_done_entry(table, python_handler, state, event, ctx): the gpu.done handler of one role
 * (fabric/gpu.py binds the first two with functools.partial). The compiled module as gpu._engine
 * runs gpu_done; anything else, or its NotImplemented (handed back before it changed anything),
 * runs ``python_handler(state, event, ctx)``, the Python handler, which asks the engine itself. */
static PyObject *
gpu_done_entry(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *engine, *result;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "gpu_done_entry takes 5 arguments");
        return NULL;
    }
    engine = entry_engine();
    if (engine == NULL && PyErr_Occurred())
        return NULL;
    if (engine == module) {
        PyObject *done_args[4] = {args[0], args[2], args[3], args[4]};
        result = gpu_done(module, done_args, 4);
        if (result != Py_NotImplemented)
            return result;
        Py_DECREF(result);
    }
    return PyObject_Vectorcall(args[1], args + 2, 3, NULL);
}

/* configure_entries(globals, launch, record, wait, launch_python, record_python, wait_python,
 *                   streams_max, events_max) */
static PyObject *
configure_entries(PyObject *module, PyObject *args)
{
    PyObject *globals, *launch, *record, *wait, *launch_body, *record_body, *wait_body;
    Py_ssize_t streams_max, events_max;
    if (!PyArg_ParseTuple(args, "O!OOOOOOnn", &PyDict_Type, &globals, &launch, &record, &wait, &launch_body,
                          &record_body, &wait_body, &streams_max, &events_max))
        return NULL;
    gpu_streams_max = streams_max;
    gpu_events_max = events_max;
    Py_XSETREF(entry_globals, Py_NewRef(globals));
    Py_XSETREF(entry_launch, Py_NewRef(launch));
    Py_XSETREF(entry_record, Py_NewRef(record));
    Py_XSETREF(entry_wait, Py_NewRef(wait));
    Py_XSETREF(entry_launch_body, Py_NewRef(launch_body));
    Py_XSETREF(entry_record_body, Py_NewRef(record_body));
    Py_XSETREF(entry_wait_body, Py_NewRef(wait_body));
    Py_RETURN_NONE;
}

static int
entry_intern(void)
{
    GPU_INTERN(s_engine, "_engine");
    GPU_INTERN(s_ctx, "ctx");
    GPU_INTERN(s_stream, "stream");
    if ((s_empty_tuple = PyTuple_New(0)) == NULL)
        return -1;
    return 0;
}

#endif
