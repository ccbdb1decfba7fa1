/* The tree all-reduce's timing (fabric/collective.py ``tree_completions_python``) in C.
 * Included once, by fabric/_speedups.c (one translation unit).
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

/* One tree_times call: the fabric's tables and the collective's inputs as C arrays, and what it
 * computes (per rank, its completion; per chunk and rank, whether the right child came first). */
typedef struct {
    TreeFabric fabric;
    long long *route, *table, *entries, *chunks, *heard, *down, *done;
    unsigned char *orders;
    Py_ssize_t ranks, chunk_count;
} TreeRun;

static void
tree_free(TreeRun *run)
{
    PyMem_Free(run->route);
    PyMem_Free(run->table);
    PyMem_Free(run->fabric.latency);
    PyMem_Free(run->fabric.bandwidth);
    PyMem_Free(run->entries);
    PyMem_Free(run->chunks);
    PyMem_Free(run->fabric.busy);
    PyMem_Free(run->heard);
    PyMem_Free(run->down);
    PyMem_Free(run->done);
    PyMem_Free(run->orders);
}

/* Read tree_times's arguments (route, busy, latency, bandwidth, half_jitter, entries, chunk_bytes)
 * into ``run`` and make its work arrays: 1; 0 when a value is not what the C path takes (Python's
 * runs); -1 on error. What was allocated is freed by tree_free whatever the answer. */
static int
tree_read(TreeRun *run, PyObject *const *args, long long half_jitter)
{
    Py_ssize_t route_length = 0, links = 0, latency_links = 0, bandwidth_links = 0, ranks;
    int ok;
    if ((ok = tree_ints(args[0], &run->route, &route_length)) <= 0 || route_length != 6 ||
        (ok = tree_ints(args[1], &run->table, &links)) <= 0 ||
        (ok = tree_ints(args[2], &run->fabric.latency, &latency_links)) <= 0 ||
        (ok = tree_ints(args[3], &run->fabric.bandwidth, &bandwidth_links)) <= 0 ||
        (ok = tree_ints(args[5], &run->entries, &run->ranks)) <= 0 ||
        (ok = tree_ints(args[6], &run->chunks, &run->chunk_count)) <= 0)
        return ok < 0 ? -1 : 0;
    ranks = run->ranks;
    if (latency_links != links || bandwidth_links != links || run->route[0] != ranks || run->route[1] <= 0 ||
        run->route[2] <= 0 || run->route[3] <= 0)
        return 0;
    run->fabric.ranks = run->route[0];
    run->fabric.gpus_per_host = run->route[1];
    run->fabric.ranks_per_leaf = run->route[2];
    run->fabric.spines = run->route[3];
    run->fabric.up_base = run->route[4];
    run->fabric.down_base = run->route[5];
    run->fabric.half_jitter = half_jitter;
    run->fabric.links = links;
    run->fabric.busy = PyMem_Malloc((size_t)(links > 0 ? links : 1) * sizeof(long long));
    run->heard = PyMem_Malloc((size_t)(ranks > 0 ? ranks : 1) * sizeof(long long));
    run->down = PyMem_Malloc((size_t)(ranks > 0 ? ranks : 1) * sizeof(long long));
    run->done = PyMem_Calloc((size_t)(ranks > 0 ? ranks : 1), sizeof(long long));
    run->orders = PyMem_Calloc((size_t)(ranks > 0 ? ranks : 1) * (size_t)(run->chunk_count > 0 ? run->chunk_count : 1), 1);
    if (run->fabric.busy == NULL || run->heard == NULL || run->down == NULL || run->done == NULL || run->orders == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(run->fabric.busy, run->table, (size_t)links * sizeof(long long));
    return 1;
}

/* One chunk of ``nbytes``: up the tree (a parent's children in (heard time, rank) order), then
 * down from the root; each rank's completion raised to the chunk's arrival. */
static void
tree_chunk(TreeRun *run, long long nbytes, unsigned char *order)
{
    TreeFabric *fabric = &run->fabric;
    long long *heard = run->heard, *down = run->down, ranks = run->ranks;
    Py_ssize_t parent, rank;
    memcpy(heard, run->entries, (size_t)ranks * sizeof(long long));
    for (parent = ranks >= 2 ? (ranks - 2) / 2 : -1; parent >= 0; parent--) {
        long long left = 2 * parent + 1, right = left + 1;
        if (right < ranks) {
            long long first = heard[right] < heard[left] ? right : left;
            long long second = first == left ? right : left;
            long long arrival_first = tree_send(fabric, first, parent, heard[first], nbytes);
            long long arrival_second = tree_send(fabric, second, parent, heard[second], nbytes);
            long long latest = arrival_first > arrival_second ? arrival_first : arrival_second;
            if (latest > heard[parent])
                heard[parent] = latest;
            order[parent] = ((arrival_second < arrival_first ? second : first) % 2) == 0;
        } else {
            long long arrival = tree_send(fabric, left, parent, heard[left], nbytes);
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
        down[left] = tree_send(fabric, rank, left, down[rank], nbytes);
        if (left + 1 < ranks)
            down[left + 1] = tree_send(fabric, rank, left + 1, down[rank], nbytes);
    }
    for (rank = 0; rank < ranks; rank++)
        if (down[rank] > run->done[rank])
            run->done[rank] = down[rank];
}

/* (done, right_first) as lists, and the fabric's busy-until list raised to what the collective
 * left (``_Links.commit``: only now, when nothing can fail any more, is it touched). */
static PyObject *
tree_answer(TreeRun *run, PyObject *busy_list)
{
    PyObject *result = NULL, *done_list = PyList_New(run->ranks), *order_lists = PyList_New(run->chunk_count);
    Py_ssize_t chunk, rank;
    if (done_list == NULL || order_lists == NULL)
        goto error;
    for (rank = 0; rank < run->ranks; rank++) {
        PyObject *value = PyLong_FromLongLong(run->done[rank]);
        if (value == NULL)
            goto error;
        PyList_SET_ITEM(done_list, rank, value);
    }
    for (chunk = 0; chunk < run->chunk_count; chunk++) {
        PyObject *order = PyList_New(run->ranks);
        if (order == NULL)
            goto error;
        PyList_SET_ITEM(order_lists, chunk, order);
        for (rank = 0; rank < run->ranks; rank++)
            PyList_SET_ITEM(order, rank, Py_NewRef(run->orders[chunk * run->ranks + rank] ? Py_True : Py_False));
    }
    for (rank = 0; rank < run->fabric.links; rank++) {
        if (run->fabric.busy[rank] > run->table[rank]) {
            PyObject *value = PyLong_FromLongLong(run->fabric.busy[rank]);
            if (value == NULL || PyList_SetItem(busy_list, rank, value) < 0)
                goto error;
        }
    }
    result = PyTuple_Pack(2, done_list, order_lists);
error:
    Py_XDECREF(done_list);
    Py_XDECREF(order_lists);
    return result;
}

static PyObject *
tree_times(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    TreeRun run;
    PyObject *result = NULL;
    long long half_jitter;
    Py_ssize_t chunk;
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
    memset(&run, 0, sizeof(run));
    ok = tree_read(&run, args, half_jitter);
    for (chunk = 0; ok > 0 && chunk < run.chunk_count && !run.fabric.overflow; chunk++)
        tree_chunk(&run, run.chunks[chunk], run.orders + chunk * run.ranks);
    if (ok > 0 && !run.fabric.overflow) {
        result = tree_answer(&run, args[1]);
        ok = result == NULL ? -1 : 1;
    }
    tree_free(&run);
    if (ok < 0)
        return NULL;
    if (result == NULL)
        Py_RETURN_NONE;
    return result;
}

#endif
