/* Recording's compiled code: the reader's check of a BLOBS frame (recording/reader.py) and the
 * untracking of the read-only plain data it keeps (recording/reader.py, recording/shared_nodes.py),
 * in C.
 *
 * Optional (setup.py marks it optional; recording/speedups.py does not load it with
 * TIMETRAVEL_PURE_PYTHON=1). The Python code beside it is the reference: blob_entries hands every
 * entry that is not the plain case back (NotImplemented) to catalog.check_blob_entry, and without
 * this module untrack does nothing (the data stays tracked, as before: a Python walk would cost
 * what the collector's does). tests/test_decode_plain.py and test_speedups.py check both.
 *
 * A decoded value the reader keeps is made only of exact dicts and lists, str, int, float, bool,
 * None, bytes and numpy arrays (the msgpack decoding builds nothing else), and has no cycles.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../sim/_speedups_api.h"

/* -- plain data out of the collector's reach ---------------------------------------------------- */

/* untrack(value) -> number of containers untracked.
 * Takes the exact dicts, lists and tuples of a plain-data value out of the cyclic garbage
 * collector's lists (recording/shared_nodes.py: the read-only decoded node states a Session shares
 * between seeks, ~360,000 containers at 10,000 ranks, which every young collection after a seek
 * walked and a full one walked again). Plain data has no cycles, so reference counting alone frees
 * them; nothing about the value changes (a dict given a tracked item later is tracked again). */
#define IS_PLAIN_CONTAINER(object)                                                                    \
    (Py_TYPE(object) == &PyDict_Type || Py_TYPE(object) == &PyList_Type || Py_TYPE(object) == &PyTuple_Type)

static PyObject *
untrack(PyObject *module, PyObject *value)
{
    Py_ssize_t size = 0, capacity = 64, count = 0, index;
    PyObject **stack = PyMem_Malloc(capacity * sizeof(PyObject *)), *item, *key;
    if (stack == NULL)
        return PyErr_NoMemory();
    stack[size++] = value;
    while (size > 0) {
        PyObject *top = stack[--size];
        PyTypeObject *type = Py_TYPE(top);
        Py_ssize_t length;
        /* An untracked container holds nothing tracked (CPython tracks a dict again when a tracked
         * item goes in, and untracks a dict or tuple only when nothing in it is tracked), so the
         * walk stops there; each container is entered once, which also ends the walk of a value
         * that (unlike decoded data) has a cycle. */
        if (!IS_PLAIN_CONTAINER(top) || !PyObject_GC_IsTracked(top))
            continue;
        PyObject_GC_UnTrack(top);
        count++;
        length = type == &PyDict_Type ? 2 * PyDict_GET_SIZE(top) : Py_SIZE(top);
        if (size + length > capacity) {
            PyObject **grown;
            capacity = 2 * (size + length);
            grown = PyMem_Realloc(stack, capacity * sizeof(PyObject *));
            if (grown == NULL) {
                PyMem_Free(stack);
                return PyErr_NoMemory();
            }
            stack = grown;
        }
        if (type == &PyDict_Type) {
            index = 0;
            while (PyDict_Next(top, &index, &key, &item)) {
                if (IS_PLAIN_CONTAINER(key))
                    stack[size++] = key;
                if (IS_PLAIN_CONTAINER(item))
                    stack[size++] = item;
            }
        } else if (type == &PyList_Type) {
            for (index = 0; index < length; index++) {
                item = PyList_GET_ITEM(top, index);
                if (IS_PLAIN_CONTAINER(item))
                    stack[size++] = item;
            }
        } else {
            for (index = 0; index < length; index++) {
                item = PyTuple_GET_ITEM(top, index);
                if (IS_PLAIN_CONTAINER(item))
                    stack[size++] = item;
            }
        }
    }
    PyMem_Free(stack);
    return PyLong_FromSsize_t(count);
}

/* untrack_events(events) -> number of containers untracked.
 * untrack() for a list of events kept read-only (recording/shared_nodes.py's queue chunks, the
 * reader's decoded event batches): each item of the list that is a tuple or an instance of a tuple
 * subclass without a __dict__ (timetravel.sim.event.Event, a NamedTuple), and the plain containers
 * in those (their payloads). A 10,000-rank snapshot's queue is ~20,000 events, and a kept batch
 * 4,096: with their payload lists they were a third of what every full collection in a seek walked.
 * An Event holds its five fields and nothing else, and plain payloads have no cycles. */
static PyObject *
untrack_events(PyObject *module, PyObject *events)
{
    Py_ssize_t index, length, count = 0, item_index;
    if (!PyList_CheckExact(events)) {
        PyErr_SetString(PyExc_TypeError, "untrack_events(events: list)");
        return NULL;
    }
    length = PyList_GET_SIZE(events);
    for (index = 0; index < length; index++) {
        PyObject *event = PyList_GET_ITEM(events, index);
        if (!PyTuple_Check(event) || Py_TYPE(event)->tp_dictoffset != 0 || !PyObject_GC_IsTracked(event))
            continue;
        for (item_index = 0; item_index < PyTuple_GET_SIZE(event); item_index++) {
            PyObject *item = PyTuple_GET_ITEM(event, item_index), *walked;
            if (!IS_PLAIN_CONTAINER(item))
                continue;
            walked = untrack(module, item);
            if (walked == NULL)
                return NULL;
            count += PyLong_AsSsize_t(walked);
            Py_DECREF(walked);
        }
        PyObject_GC_UnTrack(event);
        count++;
    }
    return PyLong_FromSsize_t(count);
}

/* -- a BLOBS frame's entries ------------------------------------------------------------------- */

/* blob_entries(entries) -> ({digest: (digest, kind, codec, base, itemsize, data)}, size), or
 * NotImplemented.
 *
 * recording/reader.py's check of a BLOBS frame (catalog.check_blob_entry on every entry, the last of
 * equal digests kept, size = the data's bytes plus 100 an entry) for the plain case: each entry an
 * exact list [16-byte bytes, kind 0/1/2, int codec, None or 16-byte bytes, int itemsize, bytes], the
 * ints exact. Anything else returns NotImplemented and the Python check runs, raising what it
 * raises. Why: a first seek into a 10,000-rank snapshot loads ~30 such frames of ~1,000 entries
 * each, and checking them one by one in Python was ~45 ms of it. The entry tuples and the dict are
 * returned untracked by the cyclic collector (they hold only bytes, ints and None). */
static int
blob_digest_ok(PyObject *value)
{
    return PyBytes_CheckExact(value) && PyBytes_GET_SIZE(value) == 16;
}

static PyObject *
blob_entries(PyObject *module, PyObject *entries)
{
    PyObject *by_digest, *result;
    Py_ssize_t index, count, size = 0;
    if (!PyList_CheckExact(entries))
        Py_RETURN_NOTIMPLEMENTED;
    count = PyList_GET_SIZE(entries);
    by_digest = PyDict_New();
    if (by_digest == NULL)
        return NULL;
    for (index = 0; index < count; index++) {
        PyObject *entry = PyList_GET_ITEM(entries, index), *kind, *checked;
        long kind_value;
        if (!PyList_CheckExact(entry) || PyList_GET_SIZE(entry) != 6 || !blob_digest_ok(PyList_GET_ITEM(entry, 0))
            || !PyLong_CheckExact(PyList_GET_ITEM(entry, 1)) || !PyLong_CheckExact(PyList_GET_ITEM(entry, 2))
            || !(PyList_GET_ITEM(entry, 3) == Py_None || blob_digest_ok(PyList_GET_ITEM(entry, 3)))
            || !PyLong_CheckExact(PyList_GET_ITEM(entry, 4)) || !PyBytes_CheckExact(PyList_GET_ITEM(entry, 5))) {
            Py_DECREF(by_digest);
            Py_RETURN_NOTIMPLEMENTED;
        }
        kind = PyList_GET_ITEM(entry, 1);
        kind_value = PyLong_AsLong(kind);
        if (kind_value == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (kind_value < 0 || kind_value > 2) { /* BLOB_VALUE, BLOB_ARRAY, BLOB_PAGE */
            Py_DECREF(by_digest);
            Py_RETURN_NOTIMPLEMENTED;
        }
        checked = PyList_AsTuple(entry);
        /* bytes, ints and None only: out of the collector's lists, as its first pass would take it
         * (the frames stay cached for later seeks; ~10,000 entries a 10,000-rank snapshot), and the
         * dict of them then stays untracked too */
        if (checked != NULL)
            PyObject_GC_UnTrack(checked);
        if (checked == NULL || PyDict_SetItem(by_digest, PyList_GET_ITEM(entry, 0), checked) < 0) {
            Py_XDECREF(checked);
            Py_DECREF(by_digest);
            return NULL;
        }
        Py_DECREF(checked);
        size += PyBytes_GET_SIZE(PyList_GET_ITEM(entry, 5)) + 100;
    }
    result = Py_BuildValue("(Nn)", by_digest, size);
    return result;
}

static PyMethodDef module_methods[] = {
    {"untrack", untrack, METH_O, "Take a plain-data value's containers out of the garbage collector's reach."},
    {"untrack_events", untrack_events, METH_O, "untrack() for a list of read-only events and their payloads."},
    {"blob_entries", blob_entries, METH_O, "A BLOBS frame's entries checked, by digest (NotImplemented: check them in Python)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Recording's compiled frame check and untrack (optional).", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return layer_module_create(&speedups_module, 1); /* its speedups.py's INTERFACE_VERSION */
}
