/* The queue's binary heap: heapq's algorithm step for step, with a faster comparison of events.
 * Included once, by _speedups.c (one translation unit); see that file for the rules it follows. */
#ifndef _SPEEDUPS_HEAP_H
#define _SPEEDUPS_HEAP_H

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

#endif /* _SPEEDUPS_HEAP_H */
