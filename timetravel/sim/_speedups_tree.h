/* The tree all-reduce's timing (fabric/collective.py ``tree_completions_python``) in C.
 * Included once, by _speedups.c (one translation unit); see that file for the rules it follows.
 *
 * tree_times(route, busy, latency, bandwidth, half_jitter, entries, chunk_bytes) computes, with
 * the same integer arithmetic in the same order, what the Python function computes: per chunk the
 * messages up the binary-heap tree (a parent's children in (heard time, rank) order, the first to
 * arrive winning ties by that order) and back down, each reserved FIFO on the links of its path;
 * then it raises ``busy`` (the fabric's busy-until list) to what the collective left, as
 * ``_Links.commit`` does. It returns ``(done, right_first)`` as lists, or None, touching nothing,
 * when a value is not a plain int or could leave int64 (the Python function then runs: the same
 * bits, only slower). tests/test_fabric_collective_tree.py compares the two.
 */
#ifndef _SPEEDUPS_TREE_H
#define _SPEEDUPS_TREE_H

#define TREE_VALUE_MAX ((long long)1 << 61) /* any time, rate or size past this: Python's ints */

/* A list of plain non-negative ints below TREE_VALUE_MAX as a new C array; 0 when it is not one
 * (no error set), -1 on error. */
static int
tree_ints(PyObject *list, long long **out, Py_ssize_t *length)
{
    Py_ssize_t index, size;
    long long *values;
    *out = NULL;
    if (!PyList_CheckExact(list))
        return 0;
    size = PyList_GET_SIZE(list);
    values = PyMem_Malloc((size_t)(size > 0 ? size : 1) * sizeof(long long));
    if (values == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (index = 0; index < size; index++) {
        PyObject *item = PyList_GET_ITEM(list, index);
        int overflow = 0;
        long long value;
        if (!PyLong_CheckExact(item)) {
            PyMem_Free(values);
            return 0;
        }
        value = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || value < 0 || value >= TREE_VALUE_MAX) {
            PyMem_Free(values);
            return 0;
        }
        values[index] = value;
    }
    *out = values;
    *length = size;
    return 1;
}

typedef struct {
    long long ranks, gpus_per_host, ranks_per_leaf, spines, up_base, down_base;
    long long half_jitter, links;
    long long *busy, *latency, *bandwidth;
    int overflow;
} TreeFabric;

/* _sender's send(): reserve the path source -> destination from ``now``; the arrival time. */
static long long
tree_send(TreeFabric *fabric, long long source, long long destination, long long now, long long nbytes)
{
    long long path[4], head, tail = 0;
    int count, index;
    __int128 scaled = (__int128)nbytes * 1000000000;
    if (source / fabric->gpus_per_host == destination / fabric->gpus_per_host) {
        path[0] = source;
        path[1] = fabric->ranks + destination;
        count = 2;
    } else {
        long long leaf_source = source / fabric->ranks_per_leaf;
        long long leaf_destination = destination / fabric->ranks_per_leaf;
        if (leaf_source == leaf_destination) {
            path[0] = 2 * fabric->ranks + source;
            path[1] = 3 * fabric->ranks + destination;
            count = 2;
        } else {
            long long spine = (source + destination) % fabric->spines;
            path[0] = 2 * fabric->ranks + source;
            path[1] = fabric->up_base + leaf_source * fabric->spines + spine;
            path[2] = fabric->down_base + leaf_destination * fabric->spines + spine;
            path[3] = 3 * fabric->ranks + destination;
            count = 4;
        }
    }
    head = now + fabric->half_jitter;
    for (index = 0; index < count; index++) {
        long long link = path[index], start, end, rate;
        __int128 serialization;
        if (link < 0 || link >= fabric->links) {
            fabric->overflow = 1;
            return 0;
        }
        start = fabric->busy[link];
        if (head > start)
            start = head;
        rate = fabric->bandwidth[link];
        if (rate <= 0) {
            fabric->overflow = 1;
            return 0;
        }
        serialization = (scaled + rate - 1) / rate;
        if (serialization >= TREE_VALUE_MAX || start + serialization >= TREE_VALUE_MAX) {
            fabric->overflow = 1;
            return 0;
        }
        end = start + (long long)serialization;
        if (tail > end)
            end = tail;
        fabric->busy[link] = end;
        head = start + fabric->latency[link];
        tail = end + fabric->latency[link];
        if (head >= TREE_VALUE_MAX || tail >= TREE_VALUE_MAX) {
            fabric->overflow = 1;
            return 0;
        }
    }
    return tail;
}

static PyObject *
tree_times(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    TreeFabric fabric = {0};
    long long *route = NULL, *table = NULL, *entries = NULL, *chunks = NULL, *heard = NULL, *down = NULL;
    long long *done = NULL, half_jitter;
    unsigned char *orders = NULL;
    Py_ssize_t route_length = 0, links = 0, latency_links = 0, bandwidth_links = 0, ranks = 0, chunk_count = 0;
    Py_ssize_t chunk, parent, rank;
    PyObject *result = NULL, *done_list = NULL, *order_lists = NULL;
    int ok;

    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "tree_times takes 7 arguments");
        return NULL;
    }
    if (!PyLong_CheckExact(args[4]))
        Py_RETURN_NONE;
    half_jitter = PyLong_AsLongLong(args[4]);
    if (half_jitter == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (half_jitter < 0 || half_jitter >= TREE_VALUE_MAX)
        Py_RETURN_NONE;
    if ((ok = tree_ints(args[0], &route, &route_length)) <= 0 || route_length != 6 ||
        (ok = tree_ints(args[1], &table, &links)) <= 0 ||
        (ok = tree_ints(args[2], &fabric.latency, &latency_links)) <= 0 ||
        (ok = tree_ints(args[3], &fabric.bandwidth, &bandwidth_links)) <= 0 ||
        (ok = tree_ints(args[5], &entries, &ranks)) <= 0 || (ok = tree_ints(args[6], &chunks, &chunk_count)) <= 0)
        goto fallback;
    if (latency_links != links || bandwidth_links != links || route[0] != ranks || route[1] <= 0 ||
        route[2] <= 0 || route[3] <= 0)
        goto fallback;
    fabric.ranks = route[0];
    fabric.gpus_per_host = route[1];
    fabric.ranks_per_leaf = route[2];
    fabric.spines = route[3];
    fabric.up_base = route[4];
    fabric.down_base = route[5];
    fabric.half_jitter = half_jitter;
    fabric.links = links;
    fabric.busy = PyMem_Malloc((size_t)(links > 0 ? links : 1) * sizeof(long long));
    heard = PyMem_Malloc((size_t)(ranks > 0 ? ranks : 1) * sizeof(long long));
    down = PyMem_Malloc((size_t)(ranks > 0 ? ranks : 1) * sizeof(long long));
    done = PyMem_Calloc((size_t)(ranks > 0 ? ranks : 1), sizeof(long long));
    orders = PyMem_Calloc((size_t)(ranks > 0 ? ranks : 1) * (size_t)(chunk_count > 0 ? chunk_count : 1), 1);
    if (fabric.busy == NULL || heard == NULL || down == NULL || done == NULL || orders == NULL) {
        PyErr_NoMemory();
        ok = -1;
        goto fallback;
    }
    memcpy(fabric.busy, table, (size_t)links * sizeof(long long));
    for (chunk = 0; chunk < chunk_count && !fabric.overflow; chunk++) {
        long long nbytes = chunks[chunk];
        unsigned char *order = orders + chunk * ranks;
        memcpy(heard, entries, (size_t)ranks * sizeof(long long));
        for (parent = ranks >= 2 ? (ranks - 2) / 2 : -1; parent >= 0; parent--) {
            long long left = 2 * parent + 1, right = left + 1;
            if (right < ranks) {
                long long first = heard[right] < heard[left] ? right : left;
                long long second = first == left ? right : left;
                long long arrival_first = tree_send(&fabric, first, parent, heard[first], nbytes);
                long long arrival_second = tree_send(&fabric, second, parent, heard[second], nbytes);
                long long latest = arrival_first > arrival_second ? arrival_first : arrival_second;
                if (latest > heard[parent])
                    heard[parent] = latest;
                order[parent] = ((arrival_second < arrival_first ? second : first) % 2) == 0;
            } else {
                long long arrival = tree_send(&fabric, left, parent, heard[left], nbytes);
                if (arrival > heard[parent])
                    heard[parent] = arrival;
            }
        }
        if (ranks > 0) {
            memset(down, 0, (size_t)ranks * sizeof(long long));
            down[0] = heard[0];
        }
        for (rank = 0; 2 * rank + 1 < ranks; rank++) {
            long long left = 2 * rank + 1;
            down[left] = tree_send(&fabric, rank, left, down[rank], nbytes);
            if (left + 1 < ranks)
                down[left + 1] = tree_send(&fabric, rank, left + 1, down[rank], nbytes);
        }
        for (rank = 0; rank < ranks; rank++)
            if (down[rank] > done[rank])
                done[rank] = down[rank];
    }
    if (fabric.overflow)
        goto fallback;
    done_list = PyList_New(ranks);
    order_lists = PyList_New(chunk_count);
    if (done_list == NULL || order_lists == NULL)
        goto error;
    for (rank = 0; rank < ranks; rank++) {
        PyObject *value = PyLong_FromLongLong(done[rank]);
        if (value == NULL)
            goto error;
        PyList_SET_ITEM(done_list, rank, value);
    }
    for (chunk = 0; chunk < chunk_count; chunk++) {
        PyObject *order = PyList_New(ranks);
        if (order == NULL)
            goto error;
        PyList_SET_ITEM(order_lists, chunk, order);
        for (rank = 0; rank < ranks; rank++) {
            PyObject *flag = orders[chunk * ranks + rank] ? Py_True : Py_False;
            Py_INCREF(flag);
            PyList_SET_ITEM(order, rank, flag);
        }
    }
    /* _Links.commit: only now, when nothing can fail any more, is the fabric's table touched */
    for (rank = 0; rank < links; rank++) {
        if (fabric.busy[rank] > table[rank]) {
            PyObject *value = PyLong_FromLongLong(fabric.busy[rank]);
            if (value == NULL)
                goto error;
            if (PyList_SetItem(args[1], rank, value) < 0)
                goto error;
        }
    }
    result = PyTuple_Pack(2, done_list, order_lists);
error:
    Py_XDECREF(done_list);
    Py_XDECREF(order_lists);
    ok = result == NULL ? -1 : 1;
fallback:
    PyMem_Free(route);
    PyMem_Free(table);
    PyMem_Free(fabric.latency);
    PyMem_Free(fabric.bandwidth);
    PyMem_Free(entries);
    PyMem_Free(chunks);
    PyMem_Free(fabric.busy);
    PyMem_Free(heard);
    PyMem_Free(down);
    PyMem_Free(done);
    PyMem_Free(orders);
    if (ok < 0)
        return NULL;
    if (result == NULL)
        Py_RETURN_NONE;
    return result;
}

#endif
