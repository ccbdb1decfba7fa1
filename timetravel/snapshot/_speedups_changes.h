/* What a batch of events changed, for the snapshot store (snapshot/changes.py Changes.add) in C.
 * Included once, by snapshot/_speedups.c (one translation unit). */
#ifndef _SPEEDUPS_CHANGES_H
#define _SPEEDUPS_CHANGES_H

/* changes_add(events, start, seq_before, nodes, seqs) -> None: for each event of events[start:],
 * nodes.setdefault(event[2], None), and seqs.append(event[1]) when event[1] < seq_before: what
 * Changes.add does with dict.fromkeys(map(itemgetter(2), ...)) and a list comprehension, in the
 * same order, without a Python call per event. Events that are not tuples of 3 or more items are
 * read with PyObject_GetItem, as itemgetter reads them; an error is raised as Python would raise
 * it (a dst that cannot be a key, a seq that does not compare). */
static PyObject *
changes_add(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *events, *seq_before, *nodes, *seqs;
    Py_ssize_t start, index;
    long long before = 0;
    int before_fits = 0;
    if (nargs != 5 || !PyList_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyDict_CheckExact(args[3]) ||
        !PyList_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "changes_add(events: list, start: int, seq_before, nodes: dict, seqs: list)");
        return NULL;
    }
    events = args[0];
    seq_before = args[2];
    nodes = args[3];
    seqs = args[4];
    start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    if (start < 0)
        start = 0;
    if (PyLong_CheckExact(seq_before)) {
        int overflow;
        before = PyLong_AsLongLongAndOverflow(seq_before, &overflow);
        before_fits = overflow == 0 && !(before == -1 && PyErr_Occurred());
        PyErr_Clear();
    }
    for (index = start; index < PyList_GET_SIZE(events); index++) {
        PyObject *event = PyList_GET_ITEM(events, index), *dst, *seq;
        int below;
        Py_INCREF(event);
        if (PyTuple_Check(event) && PyTuple_GET_SIZE(event) >= 3) {
            dst = PyTuple_GET_ITEM(event, 2);
            seq = PyTuple_GET_ITEM(event, 1);
            Py_INCREF(dst);
            Py_INCREF(seq);
        } else {
            dst = PySequence_GetItem(event, 2);
            seq = dst == NULL ? NULL : PySequence_GetItem(event, 1);
            if (seq == NULL) {
                Py_XDECREF(dst);
                Py_DECREF(event);
                return NULL;
            }
        }
        Py_DECREF(event);
        if (PyDict_SetDefault(nodes, dst, Py_None) == NULL) {
            Py_DECREF(dst);
            Py_DECREF(seq);
            return NULL;
        }
        Py_DECREF(dst);
        below = -1;
        if (before_fits && PyLong_CheckExact(seq)) {
            int overflow;
            long long value = PyLong_AsLongLongAndOverflow(seq, &overflow);
            if (overflow == 0 && !(value == -1 && PyErr_Occurred()))
                below = value < before;
            PyErr_Clear();
        }
        if (below < 0)
            below = PyObject_RichCompareBool(seq, seq_before, Py_LT);
        if (below < 0 || (below && PyList_Append(seqs, seq) < 0)) {
            Py_DECREF(seq);
            return NULL;
        }
        Py_DECREF(seq);
    }
    Py_RETURN_NONE;
}

#endif /* _SPEEDUPS_CHANGES_H */
