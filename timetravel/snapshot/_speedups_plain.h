/* Decoding a stored value: msgpack's value of the hash form snapshot/codec.py stores, for the
 * common case, in C. Included once, by snapshot/_speedups.c (one translation unit), after
 * _speedups_plain_scan.h (its input, limits, str cache and skip). */
#ifndef _SPEEDUPS_PLAIN_H
#define _SPEEDUPS_PLAIN_H

/* decode_plain(data, factory, bytes_max, untrack, memo, arrays, copy_arrays, items_max)
 *     -> (value, array_bytes), or NotImplemented.
 *
 * The msgpack decoding of a stored value (snapshot/codec.py decode_value: msgpack-python's unpackb
 * with raw=False, strict_map_key=True and an ext hook for the array extension), for the common
 * case only: nil, bool, int, float, str, bin, array, map with str keys, and extension 2 with a
 * 16-byte payload (an array digest). Anything else — another extension (msgpack turns -1 into a
 * Timestamp), a key that is not a str, a str that is not valid UTF-8, a length over bytes_max or
 * over what the remaining bytes can hold, nesting deeper than PLAIN_DEPTH_MAX, bytes after the
 * value, a truncated value — returns NotImplemented and the caller decodes with msgpack, which
 * gives the value or raises the error it raises today. So the value is always msgpack's. An
 * exception raised by the factory propagates, as it does through msgpack. ``items_max`` (an int,
 * or None) is decode_value's budget of containers and entries (sim/encoding.py ItemBudget: a
 * container counts its length plus one); a value that would exceed it is handed back too.
 *
 * An array digest becomes ``arrays[digest][0]`` when ``arrays`` (a dict, or None) holds a
 * ``(array, nbytes)`` pair for it (the reader's array cache; ``.copy()`` of it when copy_arrays),
 * else ``factory(digest)``; array_bytes is the sum of those pairs' nbytes (what the factory would
 * have counted for them, give or take the cache's per-entry overhead).
 *
 * ``memo`` (a dict, or None) shares decoded containers between the values decoded with it: a map
 * or array whose encoding is PLAIN_MEMO_SPAN_MIN..PLAIN_MEMO_SPAN_MAX bytes long (the value
 * itself apart) is looked up by those bytes and, when absent, decoded and kept (while the memo
 * has fewer than PLAIN_MEMO_ENTRIES_MAX entries). Equal bytes decode to equal values, so the value
 * is the same; but its containers are then shared by every value decoded with the memo, so it
 * serves only values nobody writes (the read-only shared states of recording/shared_nodes.py),
 * never one a handler gets to change.
 *
 * Why: a first seek into a 10,000-rank snapshot decodes 10,000 rank states of ~270 objects each.
 * msgpack builds every map key as a new str and then interns it, and calls the ext hook (a Python
 * closure, then the reader's cache) for each of the ~50,000 arrays; and the ranks' states repeat
 * most of their containers (in two dp_training snapshots, 87% of the containers — a GPU's access
 * table, a stream's queue — have the bytes of another one). Here short strs (keys and values alike:
 * they are immutable, so sharing one object is invisible) come from a small cache keyed by their
 * UTF-8 bytes, cached arrays are found without a Python call, repeated containers are decoded
 * once, and ``untrack`` builds the containers outside the cyclic collector's lists (what recording's
 * untrack() does afterwards, recording/_speedups.c, without the second walk). */

static int plain_value(PlainInput *input, int depth, PyObject **out);

static int
plain_list(PlainInput *input, int depth, Py_ssize_t length, PyObject **out)
{
    PyObject *list, *item;
    Py_ssize_t index;
    int status;
    if (length > input->end - input->at) /* each item takes at least one byte */
        return PLAIN_UNUSUAL;
    if (input->counting) { /* ItemBudget: a container and its entries; past the budget msgpack judges */
        if (length + 1 > input->items_left)
            return PLAIN_UNUSUAL;
        input->items_left -= length + 1;
    }
    list = PyList_New(length);
    if (list == NULL)
        return PLAIN_ERROR;
    for (index = 0; index < length; index++) {
        status = plain_value(input, depth + 1, &item);
        if (status != PLAIN_OK) {
            Py_DECREF(list);
            return status;
        }
        PyList_SET_ITEM(list, index, item);
    }
    if (input->untrack)
        PyObject_GC_UnTrack(list);
    *out = list;
    return PLAIN_OK;
}

static int
plain_map(PlainInput *input, int depth, Py_ssize_t length, PyObject **out)
{
    PyObject *dict, *key, *item;
    Py_ssize_t index;
    int status;
    if (length > (input->end - input->at) / 2) /* each entry takes at least two bytes */
        return PLAIN_UNUSUAL;
    if (input->counting) { /* the header's count: at least the dict's size (equal keys collapse) */
        if (length + 1 > input->items_left)
            return PLAIN_UNUSUAL;
        input->items_left -= length + 1;
    }
    dict = _PyDict_NewPresized(length);
    if (dict == NULL)
        return PLAIN_ERROR;
    for (index = 0; index < length; index++) {
        input->reading_key = 1;
        status = plain_value(input, depth + 1, &key);
        input->reading_key = 0;
        if (status != PLAIN_OK) {
            Py_DECREF(dict);
            return status;
        }
        if (!PyUnicode_CheckExact(key)) { /* bytes keys and the rest: msgpack's rules */
            Py_DECREF(key);
            Py_DECREF(dict);
            return PLAIN_UNUSUAL;
        }
        status = plain_value(input, depth + 1, &item);
        if (status != PLAIN_OK) {
            Py_DECREF(key);
            Py_DECREF(dict);
            return status;
        }
        status = PyDict_SetItem(dict, key, item);
        Py_DECREF(key);
        Py_DECREF(item);
        if (status < 0) {
            Py_DECREF(dict);
            return PLAIN_ERROR;
        }
    }
    if (input->untrack && PyObject_GC_IsTracked(dict))
        PyObject_GC_UnTrack(dict);
    *out = dict;
    return PLAIN_OK;
}

static int
plain_ext(PlainInput *input, Py_ssize_t length, PyObject **out)
{
    PyObject *payload, *array = NULL;
    if (length < 0 || input->end - input->at < 1 + length)
        return PLAIN_UNUSUAL;
    if ((signed char)input->at[0] != 2 || length != 16) /* EXT_ARRAY_DIGEST with a digest */
        return PLAIN_UNUSUAL;
    payload = PyBytes_FromStringAndSize((const char *)input->at + 1, length);
    if (payload == NULL)
        return PLAIN_ERROR;
    input->at += 1 + length;
    if (input->arrays != NULL) {
        PyObject *held = PyDict_GetItemWithError(input->arrays, payload); /* borrowed */
        if (held == NULL && PyErr_Occurred()) {
            Py_DECREF(payload);
            return PLAIN_ERROR;
        }
        if (held != NULL && PyTuple_CheckExact(held) && PyTuple_GET_SIZE(held) == 2
            && PyLong_CheckExact(PyTuple_GET_ITEM(held, 1))) {
            Py_ssize_t nbytes = PyLong_AsSsize_t(PyTuple_GET_ITEM(held, 1));
            if (nbytes == -1 && PyErr_Occurred()) {
                Py_DECREF(payload);
                return PLAIN_ERROR;
            }
            array = PyTuple_GET_ITEM(held, 0);
            if (input->copy_arrays)
                array = PyObject_CallMethodNoArgs(array, str_copy);
            else
                Py_INCREF(array);
            if (array == NULL) {
                Py_DECREF(payload);
                return PLAIN_ERROR;
            }
            input->array_bytes += nbytes;
        }
    }
    if (array == NULL)
        array = PyObject_CallOneArg(input->factory, payload);
    Py_DECREF(payload);
    if (array == NULL)
        return PLAIN_ERROR;
    *out = array;
    return PLAIN_OK;
}

/* Read a big-endian length of ``width`` bytes; PLAIN_UNUSUAL when the bytes are not there. */
#define PLAIN_TAKE(width, into)                                                                       \
    do {                                                                                              \
        if (input->end - input->at < (width))                                                         \
            return PLAIN_UNUSUAL;                                                                     \
        (into) = plain_load(input->at, (width));                                                      \
        input->at += (width);                                                                         \
    } while (0)

static int
plain_bytes(PlainInput *input, unsigned long long length, int is_str, PyObject **out)
{
    const char *start = (const char *)input->at;
    int unusual = 0;
    if (length > (unsigned long long)input->bytes_max || (long long)length > input->end - input->at)
        return PLAIN_UNUSUAL;
    input->at += length;
    if (!is_str) {
        *out = PyBytes_FromStringAndSize(start, (Py_ssize_t)length);
        return *out == NULL ? PLAIN_ERROR : PLAIN_OK;
    }
    *out = plain_str(start, (Py_ssize_t)length, input->reading_key, &unusual);
    if (*out == NULL)
        return unusual ? PLAIN_UNUSUAL : PLAIN_ERROR;
    return PLAIN_OK;
}

/* The value of a tag in 0xc0..0xdf (nil, bool, bin, ext, float, int, str, array and map with
 * explicit lengths), input->at past the tag. */
static int
plain_tagged(PlainInput *input, int depth, unsigned char tag, PyObject **out)
{
    unsigned long long value;
    switch (tag) {
    case 0xc0:
        *out = Py_NewRef(Py_None);
        return PLAIN_OK;
    case 0xc2:
        *out = Py_NewRef(Py_False);
        return PLAIN_OK;
    case 0xc3:
        *out = Py_NewRef(Py_True);
        return PLAIN_OK;
    case 0xc4: PLAIN_TAKE(1, value); return plain_bytes(input, value, 0, out);
    case 0xc5: PLAIN_TAKE(2, value); return plain_bytes(input, value, 0, out);
    case 0xc6: PLAIN_TAKE(4, value); return plain_bytes(input, value, 0, out);
    case 0xc7: PLAIN_TAKE(1, value); return plain_ext(input, (Py_ssize_t)value, out);
    case 0xc8: PLAIN_TAKE(2, value); return plain_ext(input, (Py_ssize_t)value, out);
    case 0xc9: PLAIN_TAKE(4, value); return plain_ext(input, (Py_ssize_t)value, out);
    case 0xca: {
        union { unsigned int bits; float number; } single;
        PLAIN_TAKE(4, value);
        single.bits = (unsigned int)value;
        *out = PyFloat_FromDouble((double)single.number);
        break;
    }
    case 0xcb: {
        union { unsigned long long bits; double number; } twice;
        PLAIN_TAKE(8, value);
        twice.bits = value;
        *out = PyFloat_FromDouble(twice.number);
        break;
    }
    case 0xcc: PLAIN_TAKE(1, value); *out = PyLong_FromUnsignedLongLong(value); break;
    case 0xcd: PLAIN_TAKE(2, value); *out = PyLong_FromUnsignedLongLong(value); break;
    case 0xce: PLAIN_TAKE(4, value); *out = PyLong_FromUnsignedLongLong(value); break;
    case 0xcf: PLAIN_TAKE(8, value); *out = PyLong_FromUnsignedLongLong(value); break;
    case 0xd0: PLAIN_TAKE(1, value); *out = PyLong_FromLongLong((signed char)value); break;
    case 0xd1: PLAIN_TAKE(2, value); *out = PyLong_FromLongLong((short)value); break;
    case 0xd2: PLAIN_TAKE(4, value); *out = PyLong_FromLongLong((int)value); break;
    case 0xd3: PLAIN_TAKE(8, value); *out = PyLong_FromLongLong((long long)value); break;
    case 0xd4: return plain_ext(input, 1, out);
    case 0xd5: return plain_ext(input, 2, out);
    case 0xd6: return plain_ext(input, 4, out);
    case 0xd7: return plain_ext(input, 8, out);
    case 0xd8: return plain_ext(input, 16, out);
    case 0xd9: PLAIN_TAKE(1, value); return plain_bytes(input, value, 1, out);
    case 0xda: PLAIN_TAKE(2, value); return plain_bytes(input, value, 1, out);
    case 0xdb: PLAIN_TAKE(4, value); return plain_bytes(input, value, 1, out);
    case 0xdc: PLAIN_TAKE(2, value); return plain_list(input, depth, (Py_ssize_t)value, out);
    case 0xdd: PLAIN_TAKE(4, value); return plain_list(input, depth, (Py_ssize_t)value, out);
    case 0xde: PLAIN_TAKE(2, value); return plain_map(input, depth, (Py_ssize_t)value, out);
    case 0xdf: PLAIN_TAKE(4, value); return plain_map(input, depth, (Py_ssize_t)value, out);
    default: /* 0xc1, never used */
        return PLAIN_UNUSUAL;
    }
    return *out == NULL ? PLAIN_ERROR : PLAIN_OK;
}

/* The value at input->at, decoded (the memo aside: plain_value). */
static int
plain_fresh(PlainInput *input, int depth, PyObject **out)
{
    unsigned char tag;
    if (depth > PLAIN_DEPTH_MAX || input->at >= input->end)
        return PLAIN_UNUSUAL;
    tag = *input->at++;
    if (tag <= 0x7f)
        *out = PyLong_FromLong(tag);
    else if (tag >= 0xe0)
        *out = PyLong_FromLong((long)(signed char)tag);
    else if (tag <= 0x8f)
        return plain_map(input, depth, tag & 0x0f, out);
    else if (tag <= 0x9f)
        return plain_list(input, depth, tag & 0x0f, out);
    else if (tag <= 0xbf)
        return plain_bytes(input, tag & 0x1f, 1, out);
    else
        return plain_tagged(input, depth, tag, out);
    return *out == NULL ? PLAIN_ERROR : PLAIN_OK;
}

#undef PLAIN_TAKE

#define PLAIN_IS_CONTAINER_TAG(tag)                                                                   \
    (((tag) >= 0x80 && (tag) <= 0x9f) || ((tag) >= 0xdc && (tag) <= 0xdf))

/* The value at input->at: from the memo when it is a container met before, else decoded. */
static int
plain_value(PlainInput *input, int depth, PyObject **out)
{
    const unsigned char *start = input->at, *after;
    PyObject *key, *held;
    int status;
    if (input->memo == NULL || depth == 0 || depth > PLAIN_MEMO_DEPTH_MAX || start >= input->end || !PLAIN_IS_CONTAINER_TAG(*start))
        return plain_fresh(input, depth, out);
    after = plain_skip(start, input->end, PLAIN_MEMO_SPAN_MAX);
    if (after == NULL || after - start < PLAIN_MEMO_SPAN_MIN)
        return plain_fresh(input, depth, out);
    key = PyBytes_FromStringAndSize((const char *)start, after - start);
    if (key == NULL)
        return PLAIN_ERROR;
    held = PyDict_GetItemWithError(input->memo, key); /* borrowed */
    if (held != NULL) {
        Py_DECREF(key);
        Py_INCREF(held);
        input->at = after;
        *out = held;
        return PLAIN_OK;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return PLAIN_ERROR;
    }
    status = plain_fresh(input, depth, out);
    if (status == PLAIN_OK && input->at == after && PyDict_GET_SIZE(input->memo) < PLAIN_MEMO_ENTRIES_MAX
        && PyDict_SetItem(input->memo, key, *out) < 0) {
        Py_DECREF(*out);
        status = PLAIN_ERROR;
    }
    Py_DECREF(key);
    return status;
}

/* The common part of decode_plain's and decode_plain_against's arguments, into ``input``
 * (-1 with an exception set: bytes_max is not a Py_ssize_t). */
static int
plain_input_start(PlainInput *input, PyObject *data, PyObject *factory, PyObject *bytes_max, PyObject *memo,
                  PyObject *arrays)
{
    if (str_copy == NULL && (str_copy = PyUnicode_InternFromString("copy")) == NULL)
        return -1;
    input->at = (const unsigned char *)PyBytes_AS_STRING(data);
    input->end = input->at + PyBytes_GET_SIZE(data);
    input->factory = factory;
    input->bytes_max = PyLong_AsSsize_t(bytes_max);
    if (input->bytes_max == -1 && PyErr_Occurred())
        return -1;
    input->memo = memo == Py_None ? NULL : memo;
    if (input->memo != NULL && input->bytes_max < PLAIN_MEMO_SPAN_MAX)
        input->memo = NULL; /* a memoized container was decoded under a bytes_max at least this */
    input->arrays = arrays == Py_None ? NULL : arrays;
    input->array_bytes = 0;
    input->reading_key = 0;
    input->untrack = 1;
    input->copy_arrays = 0;
    input->counting = 0;
    input->items_left = 0;
    return 0;
}

/* What a decode returns for ``status``: (value, array_bytes), NotImplemented (unusual, or bytes
 * after the value), or NULL (an exception). */
static PyObject *
plain_result(PlainInput *input, int status, PyObject *value)
{
    if (status == PLAIN_ERROR)
        return NULL;
    if (status == PLAIN_UNUSUAL || input->at != input->end) {
        Py_XDECREF(value);
        Py_RETURN_NOTIMPLEMENTED;
    }
    return Py_BuildValue("(Nn)", value, input->array_bytes);
}

static PyObject *
decode_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PlainInput input;
    PyObject *value = NULL;
    int status;
    if (nargs != 8 || !PyBytes_CheckExact(args[0]) || !PyLong_CheckExact(args[2])
        || (args[7] != Py_None && !PyLong_CheckExact(args[7]))
        || (args[4] != Py_None && !PyDict_CheckExact(args[4])) || (args[5] != Py_None && !PyDict_Check(args[5]))) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_plain(data: bytes, factory, bytes_max: int, untrack: bool, memo: dict | None, "
                        "arrays: dict | None, copy_arrays: bool, items_max: int | None)");
        return NULL;
    }
    if (plain_input_start(&input, args[0], args[1], args[2], args[4], args[5]) < 0)
        return NULL;
    input.untrack = PyObject_IsTrue(args[3]);
    input.copy_arrays = PyObject_IsTrue(args[6]);
    if (input.untrack < 0 || input.copy_arrays < 0)
        return NULL;
    input.counting = args[7] != Py_None;
    input.items_left = 0;
    if (input.counting) {
        input.items_left = PyLong_AsSsize_t(args[7]);
        if (input.items_left == -1 && PyErr_Occurred())
            return NULL;
        input.memo = NULL; /* a container from the memo would not be counted */
    }
    status = plain_value(&input, 0, &value); /* before reading value: argument order is unspecified */
    return plain_result(&input, status, value);
}

#endif /* _SPEEDUPS_PLAIN_H */
