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

/* -- decoding a stored value ------------------------------------------------------------------ */

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
 * once, and ``untrack`` builds the containers outside the cyclic collector's lists (what untrack()
 * above does afterwards, without the second walk). */
#define PLAIN_DEPTH_MAX 120 /* DECODE_DEPTH_MAX (sim/encoding.py) - PLAIN_MEMO_DEPTH_MAX */
#define PLAIN_STR_CACHED_BYTES_MAX 32
#define PLAIN_STR_CACHE_SLOTS 4096 /* a power of two */
#define PLAIN_MEMO_SPAN_MIN 4
#define PLAIN_MEMO_SPAN_MAX 1024
#define PLAIN_MEMO_ENTRIES_MAX 200000
#define PLAIN_MEMO_DEPTH_MAX 8
/* Containers are memoized only this near the top: one decoded at depth d holds at most
 * PLAIN_DEPTH_MAX - d levels, so met again at depth <= 8 it nests at most 128 deep, the
 * DECODE_DEPTH_MAX the msgpack path allows (a value that path would refuse is never built from
 * the memo); a deeper value is handed back, and that path refuses it. */

typedef struct {
    PyObject *str; /* a reference, or NULL */
    Py_ssize_t length;
    int score; /* hits minus the misses that wanted the slot: a slot changes hands at 0 */
    char bytes[PLAIN_STR_CACHED_BYTES_MAX];
} PlainStrSlot;
#define PLAIN_STR_SCORE_MAX 16

static PlainStrSlot plain_key_cache[PLAIN_STR_CACHE_SLOTS];
static PlainStrSlot plain_value_cache[PLAIN_STR_CACHE_SLOTS];
/* Two tables, so that the many distinct str values (node names: 10,000 at 10,000 ranks) never
 * push out the hundred-odd map keys that every state repeats. */
static PyObject *str_copy = NULL;

typedef struct {
    const unsigned char *at;
    const unsigned char *end;
    PyObject *factory;
    PyObject *memo;   /* dict or NULL */
    PyObject *arrays; /* dict or NULL */
    Py_ssize_t bytes_max;
    Py_ssize_t array_bytes;
    int untrack;
    int copy_arrays;
    int reading_key; /* the value being read is a map key */
    int counting;    /* items_left applies (decode_value's items_max, for untrusted input) */
    Py_ssize_t items_left;
} PlainInput;

enum { PLAIN_OK = 0, PLAIN_UNUSUAL = 1, PLAIN_ERROR = -1 };

static unsigned long long
plain_load(const unsigned char *at, int width)
{
    unsigned long long value = 0;
    int index;
    for (index = 0; index < width; index++)
        value = (value << 8) | at[index];
    return value;
}

/* The str of ``length`` UTF-8 bytes at ``bytes`` (a new reference), from the cache when short;
 * NULL with *unusual set when they are not valid UTF-8 (msgpack raises then: the caller falls back). */
static PyObject *
plain_str(const char *bytes, Py_ssize_t length, int is_key, int *unusual)
{
    PyObject *str;
    PlainStrSlot *slot = NULL;
    if (length <= PLAIN_STR_CACHED_BYTES_MAX) {
        /* FNV-1a over 8-byte words (the slot is all it picks: any mixing would do) */
        unsigned long long hash = 1469598103934665603ULL ^ (unsigned long long)length, word;
        Py_ssize_t index;
        for (index = 0; index + 8 <= length; index += 8) {
            memcpy(&word, bytes + index, 8);
            hash = (hash ^ word) * 1099511628211ULL;
        }
        if (index < length) {
            word = 0;
            memcpy(&word, bytes + index, (size_t)(length - index));
            hash = (hash ^ word) * 1099511628211ULL;
        }
        hash ^= hash >> 32;
        slot = &(is_key ? plain_key_cache : plain_value_cache)[(hash ^ (hash >> 29)) & (PLAIN_STR_CACHE_SLOTS - 1)];
        if (slot->str != NULL && slot->length == length && memcmp(slot->bytes, bytes, (size_t)length) == 0) {
            if (slot->score < PLAIN_STR_SCORE_MAX)
                slot->score++;
            Py_INCREF(slot->str);
            return slot->str;
        }
        /* Many distinct strs (10,000 node names as the keys of one map) must not keep replacing
         * the ones every state repeats: a slot in use goes to a newcomer only once misses have
         * worn its score down. */
        if (slot->str != NULL && --slot->score > 0)
            slot = NULL;
    }
    str = PyUnicode_DecodeUTF8(bytes, length, "strict");
    if (str == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            *unusual = 1;
        }
        return NULL;
    }
    if (slot != NULL) {
        if (is_key) /* as msgpack does with map keys */
            PyUnicode_InternInPlace(&str);
        Py_INCREF(str);
        Py_XSETREF(slot->str, str);
        slot->length = length;
        slot->score = 1;
        memcpy(slot->bytes, bytes, (size_t)length);
    }
    return str;
}

/* Where the value at ``at`` ends, if it ends within ``limit`` bytes (and before ``end``) and holds
 * only msgpack's defined tags; NULL otherwise (too long to memoize, or the decoder will judge it). */
static const unsigned char *
plain_skip(const unsigned char *at, const unsigned char *end, Py_ssize_t limit)
{
    const unsigned char *stop = end - at > limit ? at + limit : end;
    unsigned long long pending = 1, length = 0;
    while (pending > 0) {
        unsigned char tag;
        int width = 0, extra = 0;
        if (at >= stop || pending > (unsigned long long)(stop - at))
            return NULL;
        tag = *at++;
        pending--;
        if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3)
            continue;
        if (tag <= 0x8f) {
            pending += 2 * (unsigned long long)(tag & 0x0f);
            continue;
        }
        if (tag <= 0x9f) {
            pending += tag & 0x0f;
            continue;
        }
        if (tag <= 0xbf) {
            length = tag & 0x1f;
        } else {
            switch (tag) {
            case 0xc4: case 0xd9: width = 1; break;
            case 0xc5: case 0xda: width = 2; break;
            case 0xc6: case 0xdb: width = 4; break;
            case 0xc7: width = 1; extra = 1; break;
            case 0xc8: width = 2; extra = 1; break;
            case 0xc9: width = 4; extra = 1; break;
            case 0xcc: case 0xd0: length = 1; break;
            case 0xcd: case 0xd1: length = 2; break;
            case 0xca: case 0xce: case 0xd2: length = 4; break;
            case 0xcb: case 0xcf: case 0xd3: length = 8; break;
            case 0xd4: length = 2; break;
            case 0xd5: length = 3; break;
            case 0xd6: length = 5; break;
            case 0xd7: length = 9; break;
            case 0xd8: length = 17; break;
            case 0xdc: case 0xdd: case 0xde: case 0xdf: {
                int count_width = (tag == 0xdc || tag == 0xde) ? 2 : 4;
                unsigned long long count;
                if (stop - at < count_width)
                    return NULL;
                count = plain_load(at, count_width);
                at += count_width;
                pending += tag >= 0xde ? 2 * count : count;
                continue;
            }
            default: /* 0xc1 */
                return NULL;
            }
            if (width > 0) {
                if (stop - at < width)
                    return NULL;
                length = plain_load(at, width) + (unsigned long long)extra;
                at += width;
            }
        }
        if (length > (unsigned long long)(stop - at))
            return NULL;
        at += length;
    }
    return at;
}

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

static int
plain_fresh(PlainInput *input, int depth, PyObject **out)
{
    unsigned char tag;
    unsigned long long value;
    if (depth > PLAIN_DEPTH_MAX || input->at >= input->end)
        return PLAIN_UNUSUAL;
    tag = *input->at++;
    if (tag <= 0x7f) {
        *out = PyLong_FromLong(tag);
    } else if (tag >= 0xe0) {
        *out = PyLong_FromLong((long)(signed char)tag);
    } else if (tag <= 0x8f) {
        return plain_map(input, depth, tag & 0x0f, out);
    } else if (tag <= 0x9f) {
        return plain_list(input, depth, tag & 0x0f, out);
    } else if (tag <= 0xbf) {
        return plain_bytes(input, tag & 0x1f, 1, out);
    } else {
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
    }
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

/* -- a fresh copy of a decoded value ----------------------------------------------------------- */

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

/* -- a BLOBS frame's entries ---------------------------------------------------------------------- */

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

#endif
