/* A fresh copy of a decoded value (snapshot/codec.py fresh_copy) in C. Included once, by
 * snapshot/_speedups.c (one translation unit), after _speedups_plain.h (PLAIN_* and str_copy). */
#ifndef _SPEEDUPS_COPY_H
#define _SPEEDUPS_COPY_H

/* copy_plain(value) -> a copy, or NotImplemented.
 *
 * What decoding the value's bytes afresh gives (decode_plain or msgpack, writeable arrays), made
 * from a decoded value instead: new exact dicts (same key order) and lists at every level, the
 * same immutable str, int, float, bool, None and bytes objects (a fresh decode would build equal
 * ones: sharing an immutable object is invisible), and ``.copy()`` of each numpy array (writeable
 * and C-contiguous, as the reader's copies are).
 * Containers shared inside the value (a memoized container met twice) come out as distinct
 * copies, as a fresh decode makes them. Anything else — a tuple, a subclass, nesting deeper than
 * PLAIN_DEPTH_MAX — returns NotImplemented and the caller decodes the bytes.
 *
 * Why: every seek restores a snapshot's parts afresh (a handler may change them), and at 10,000
 * ranks the fabric part alone is three lists of 60,000 ints: decoding them is ~20 ms a seek,
 * copying a decoded version is a fraction of a millisecond per list. */
static int
plain_copy(PyObject *value, int depth, PyObject **out)
{
    PyTypeObject *type = Py_TYPE(value);
    if (depth > PLAIN_DEPTH_MAX)
        return PLAIN_UNUSUAL;
    if (type == &PyUnicode_Type || type == &PyLong_Type || type == &PyFloat_Type || type == &PyBool_Type
        || type == &PyBytes_Type || value == Py_None) {
        Py_INCREF(value);
        *out = value;
        return PLAIN_OK;
    }
    if (type == &PyList_Type) {
        Py_ssize_t length = PyList_GET_SIZE(value), index;
        PyObject *list = PyList_New(length), *item;
        int status;
        if (list == NULL)
            return PLAIN_ERROR;
        for (index = 0; index < length; index++) {
            status = plain_copy(PyList_GET_ITEM(value, index), depth + 1, &item);
            if (status != PLAIN_OK) {
                Py_DECREF(list);
                return status;
            }
            PyList_SET_ITEM(list, index, item);
        }
        *out = list;
        return PLAIN_OK;
    }
    if (type == &PyDict_Type) {
        PyObject *dict = _PyDict_NewPresized(PyDict_GET_SIZE(value)), *key, *item, *copied;
        Py_ssize_t position = 0;
        int status;
        if (dict == NULL)
            return PLAIN_ERROR;
        while (PyDict_Next(value, &position, &key, &item)) {
            if (!PyUnicode_CheckExact(key)) {
                Py_DECREF(dict);
                return PLAIN_UNUSUAL;
            }
            status = plain_copy(item, depth + 1, &copied);
            if (status != PLAIN_OK) {
                Py_DECREF(dict);
                return status;
            }
            status = PyDict_SetItem(dict, key, copied);
            Py_DECREF(copied);
            if (status < 0) {
                Py_DECREF(dict);
                return PLAIN_ERROR;
            }
        }
        *out = dict;
        return PLAIN_OK;
    }
    if (strcmp(type->tp_name, "numpy.ndarray") != 0)
        return PLAIN_UNUSUAL; /* a tuple, a subclass, anything a decode does not build */
    if (str_copy == NULL && (str_copy = PyUnicode_InternFromString("copy")) == NULL)
        return PLAIN_ERROR;
    *out = PyObject_CallMethodNoArgs(value, str_copy);
    return *out == NULL ? PLAIN_ERROR : PLAIN_OK;
}

static PyObject *
copy_plain(PyObject *module, PyObject *value)
{
    PyObject *copied = NULL;
    int status = plain_copy(value, 0, &copied);
    if (status == PLAIN_ERROR)
        return NULL;
    if (status == PLAIN_UNUSUAL)
        Py_RETURN_NOTIMPLEMENTED;
    return copied;
}

#endif /* _SPEEDUPS_COPY_H */
