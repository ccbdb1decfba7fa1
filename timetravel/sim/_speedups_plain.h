/* Plain-data values the recording reader decoded, taken out of the garbage collector's reach.
 * Included once, by _speedups.c (one translation unit). It serves recording/shared_nodes.py, which
 * keeps the decoded node states of a 10,000-rank snapshot for the seeks of one Session. A decoded
 * value is made only of exact dicts and lists, str, int, float, bool, None, bytes and numpy arrays
 * (the reader's msgpack decoding builds nothing else), and has no cycles. */
#ifndef _SPEEDUPS_PLAIN_H
#define _SPEEDUPS_PLAIN_H

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

#endif
