/* Decoding a stored value against an earlier decoded version of it.
 * Included once, by snapshot/_speedups.c (one translation unit), after _speedups_plain.h, whose decoder
 * (PlainInput, plain_value, plain_skip) it reuses.
 *
 * decode_plain_against(data, base_data, base_value, factory, bytes_max, memo, arrays)
 *     -> (value, array_bytes), or NotImplemented.
 *
 * What decode_plain(data, factory, bytes_max, True, memo, arrays, False, None) gives — a
 * read-only value whose containers are outside the cyclic collector's reach — built from
 * ``base_value``, which must be what decoding ``base_data`` with the same bytes_max gave, wherever
 * the two encodings have the same bytes. Both are walked side by side from the top, once:
 * - a map with the base map's keys, in the same order and byte for byte, is base_value's own dict
 *   when every entry's bytes are equal too, else a copy of that dict (PyDict_Copy: one copy of its
 *   table) with the entries whose value bytes differ decoded again; an entry that is a map in both
 *   is decoded against the base's, recursively;
 * - any other value is the base's own object when its bytes are equal, else decoded as
 *   decode_plain decodes it (memo included);
 * - a map with other keys, or one whose base dict has fewer entries than its encoding (a repeated
 *   key: the dict's value for a key might be another position's), is decoded plainly.
 * Equal bytes decode to equal values, so the value is the one decode_plain gives; but its parts are
 * shared with base_value, so — exactly as with decode_plain's memo — this serves only values nobody
 * writes (recording/shared_nodes.py: a Session's read-only node states, each decoded against the
 * one decoded before it). Anything unusual is handed back (NotImplemented) as decode_plain hands
 * it back. Array bytes are those of the arrays decoded here; an array shared with the base was
 * counted with the value first decoded with it (as with the memo).
 *
 * Why: a first seek into a quiet snapshot of a 10,000-rank recording decodes 10,000 rank states of
 * ~1,200 bytes and 53 top-level entries; neighbouring ranks' states differ in a dozen entries (the
 * rank's index and neighbours, its data arrays, a kernel's end time), so copying the neighbour's
 * dicts and decoding what differs costs ~40% fewer instructions than building every dict entry by
 * entry (~69,000 a state with the memo). */
#ifndef _SPEEDUPS_AGAINST_H
#define _SPEEDUPS_AGAINST_H

#define AGAINST_IS_MAP_TAG(tag) (((tag) >= 0x80 && (tag) <= 0x8f) || (tag) == 0xde || (tag) == 0xdf)

/* The entry count of the map header at ``*at`` (moved past the header), or -1 when it is not a
 * map header or is cut short before ``end``. */
static Py_ssize_t
against_map_header(const unsigned char **at, const unsigned char *end)
{
    unsigned char tag;
    if (*at >= end)
        return -1;
    tag = **at;
    if (tag >= 0x80 && tag <= 0x8f) {
        *at += 1;
        return tag & 0x0f;
    }
    if (tag == 0xde && end - *at >= 3) {
        Py_ssize_t length = (Py_ssize_t)plain_load(*at + 1, 2);
        *at += 3;
        return length;
    }
    if (tag == 0xdf && end - *at >= 5) {
        Py_ssize_t length = (Py_ssize_t)plain_load(*at + 1, 4);
        *at += 5;
        return length;
    }
    return -1;
}

/* Where the value at ``at`` ends (NULL: not before ``end``, or unusual): the one-byte and short
 * scalars every state is full of without plain_skip's loop, the rest by plain_skip. */
static inline const unsigned char *
against_skip(const unsigned char *at, const unsigned char *end)
{
    unsigned char tag;
    Py_ssize_t size;
    if (at >= end)
        return NULL;
    tag = *at;
    if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3)
        size = 1;
    else if (tag >= 0xa0 && tag <= 0xbf)
        size = 1 + (tag & 0x1f);
    else if (tag == 0xcc || tag == 0xd0)
        size = 2;
    else if (tag == 0xcd || tag == 0xd1)
        size = 3;
    else if (tag == 0xca || tag == 0xce || tag == 0xd2)
        size = 5;
    else if (tag == 0xcb || tag == 0xcf || tag == 0xd3)
        size = 9;
    else if (tag == 0xd8)
        size = 18;
    else
        return plain_skip(at, end, end - at);
    return end - at < size ? NULL : at + size;
}

/* Whether ``length`` bytes at ``left`` and ``right`` are equal: most spans compared here are a few
 * bytes (a key, an int), for which a call to memcmp costs more than the comparison. */
static inline int
against_equal(const unsigned char *left, const unsigned char *right, Py_ssize_t length)
{
    unsigned long long left_word, right_word;
    if (length > 32)
        return memcmp(left, right, (size_t)length) == 0;
    for (; length >= 8; length -= 8, left += 8, right += 8) {
        memcpy(&left_word, left, 8);
        memcpy(&right_word, right, 8);
        if (left_word != right_word)
            return 0;
    }
    for (; length > 0; length--)
        if (*left++ != *right++)
            return 0;
    return 1;
}

#define AGAINST_ENTRIES_MAX 256 /* a map with more entries is decoded plainly (bounds the stack arrays) */
#define AGAINST_DEPTH_MAX 32 /* deeper maps are decoded plainly (bounds the stack: ~4 KB a level) */

static int against_value(PlainInput *input, int depth, const unsigned char **base_at, const unsigned char *base_end,
                         PyObject *base_value, PyObject **out, int *same);

static void
against_release(PyObject **keys, PyObject **items, Py_ssize_t count)
{
    Py_ssize_t index;
    for (index = 0; index < count; index++) {
        Py_DECREF(keys[index]);
        Py_DECREF(items[index]);
    }
}

/* One entry of a map read against the base map's entry at *base_at (both cursors move past it):
 * PLAIN_OK with *key NULL when its bytes are the base's (or its map value decodes to the base's
 * own), PLAIN_OK with *key and *item (new references) for an entry to set in a copy of the base
 * dict, PLAIN_UNUSUAL when the keys differ (or cannot be read), PLAIN_ERROR. */
static int
against_entry(PlainInput *input, int depth, const unsigned char **base_at, const unsigned char *base_end,
              PyObject *base_dict, PyObject **key, PyObject **item)
{
    const unsigned char *at = input->at, *base = *base_at, *key_end, *base_key_end, *end, *base_value_end = NULL;
    PyObject *base_item;
    int status, item_same = 0, maps;
    *key = NULL;
    key_end = against_skip(at, input->end);
    base_key_end = against_skip(base, base_end);
    if (key_end == NULL || base_key_end == NULL || key_end - at != base_key_end - base)
        return PLAIN_UNUSUAL; /* other keys */
    maps = AGAINST_IS_MAP_TAG(*key_end) && base_key_end < base_end && AGAINST_IS_MAP_TAG(*base_key_end);
    if (!maps) { /* the common entry: one comparison of key and value together */
        end = against_skip(key_end, input->end);
        base_value_end = against_skip(base_key_end, base_end);
        if (end == NULL || base_value_end == NULL)
            return PLAIN_UNUSUAL;
        if (end - at == base_value_end - base && against_equal(at, base, end - at)) {
            input->at = end;
            *base_at = base_value_end;
            return PLAIN_OK;
        }
    }
    if (!against_equal(at, base, key_end - at))
        return PLAIN_UNUSUAL; /* other keys */
    input->reading_key = 1;
    status = plain_value(input, depth + 1, key);
    input->reading_key = 0;
    if (status != PLAIN_OK)
        return status;
    if (!maps) { /* keys equal, values differ (end and base_value_end were found above) */
        *base_at = base_value_end;
        status = plain_value(input, depth + 1, item);
    } else {
        base_item = PyDict_GetItemWithError(base_dict, *key); /* borrowed */
        if (base_item == NULL) {
            status = PyErr_Occurred() ? PLAIN_ERROR : PLAIN_UNUSUAL;
        } else {
            *base_at = base_key_end;
            status = against_value(input, depth + 1, base_at, base_end, base_item, item, &item_same);
            if (status == PLAIN_OK && item_same)
                Py_DECREF(*item); /* the base's own: nothing to set */
        }
        if (status == PLAIN_OK && item_same)
            Py_CLEAR(*key);
    }
    if (status != PLAIN_OK)
        Py_CLEAR(*key);
    return status;
}

/* The map at input->at (its header read: ``length`` entries) against the base map whose entries
 * start at *base_at and decode to the exact dict ``base_dict`` (as many entries). When both have
 * the same keys in the same order, byte for byte: base_dict itself if every value's bytes are
 * equal too (*same), else a copy of it with the other values decoded again (a value that is a map
 * in both, against the base's); both cursors end past their maps. Otherwise PLAIN_UNUSUAL, both
 * cursors where they were: the caller decodes the map plainly. */
static int
against_map(PlainInput *input, int depth, Py_ssize_t length, const unsigned char **base_at,
            const unsigned char *base_end, PyObject *base_dict, PyObject **out, int *same)
{
    PyObject *keys[AGAINST_ENTRIES_MAX], *items[AGAINST_ENTRIES_MAX], *dict;
    const unsigned char *start = input->at, *base_start = *base_at;
    Py_ssize_t index, count = 0;
    int status = PLAIN_OK;
    for (index = 0; index < length && status == PLAIN_OK; index++) {
        status = against_entry(input, depth, base_at, base_end, base_dict, &keys[count], &items[count]);
        if (status == PLAIN_OK && keys[count] != NULL)
            count++;
    }
    if (status != PLAIN_OK) {
        against_release(keys, items, count);
        input->at = start;
        *base_at = base_start;
        return status;
    }
    if (count == 0) {
        *same = 1;
        *out = Py_NewRef(base_dict);
        return PLAIN_OK;
    }
    dict = PyDict_Copy(base_dict);
    for (index = 0; dict != NULL && index < count; index++) {
        if (PyDict_SetItem(dict, keys[index], items[index]) < 0) /* an existing key: its place stays */
            Py_CLEAR(dict);
    }
    against_release(keys, items, count);
    if (dict == NULL)
        return PLAIN_ERROR;
    if (PyObject_GC_IsTracked(dict))
        PyObject_GC_UnTrack(dict);
    *same = 0;
    *out = dict;
    return PLAIN_OK;
}

/* The value at input->at against the base value at *base_at (which decodes to ``base_value``):
 * base_value itself when the bytes are equal (*same), a map against the base map, else decoded
 * plainly; *base_at ends past the base value. */
static int
against_value(PlainInput *input, int depth, const unsigned char **base_at, const unsigned char *base_end,
              PyObject *base_value, PyObject **out, int *same)
{
    const unsigned char *start = input->at, *base_start = *base_at, *end, *base_after;
    Py_ssize_t length, base_length;
    int status;
    *same = 0;
    if (depth > PLAIN_DEPTH_MAX || start >= input->end || base_start >= base_end)
        return PLAIN_UNUSUAL;
    if (depth <= AGAINST_DEPTH_MAX && AGAINST_IS_MAP_TAG(*start) && AGAINST_IS_MAP_TAG(*base_start)
        && PyDict_CheckExact(base_value)) {
        base_length = against_map_header(base_at, base_end);
        length = against_map_header(&input->at, input->end);
        if (base_length >= 0 && base_length == length && length == PyDict_GET_SIZE(base_value)
            && length <= AGAINST_ENTRIES_MAX) {
            status = against_map(input, depth, length, base_at, base_end, base_value, out, same);
            if (status != PLAIN_UNUSUAL)
                return status;
        }
        input->at = start; /* other keys, or unusual: decode it plainly (which judges the unusual) */
        *base_at = base_start;
    } else {
        end = against_skip(start, input->end);
        base_after = against_skip(base_start, base_end);
        if (end != NULL && base_after != NULL && end - start == base_after - base_start
            && against_equal(start, base_start, end - start)) {
            input->at = end;
            *base_at = base_after;
            *same = 1;
            *out = Py_NewRef(base_value);
            return PLAIN_OK;
        }
    }
    base_after = plain_skip(base_start, base_end, base_end - base_start);
    if (base_after == NULL) /* the base is not a whole value: the caller's data is not what it says */
        return PLAIN_UNUSUAL;
    *base_at = base_after;
    return plain_value(input, depth, out);
}

static PyObject *
decode_plain_against(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PlainInput input;
    PyObject *value = NULL;
    const unsigned char *base_at, *base_end;
    int status, same = 0;
    if (nargs != 7 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) || !PyLong_CheckExact(args[4])
        || (args[5] != Py_None && !PyDict_CheckExact(args[5])) || (args[6] != Py_None && !PyDict_Check(args[6]))) {
        PyErr_SetString(PyExc_TypeError,
                        "decode_plain_against(data: bytes, base_data: bytes, base_value, factory, bytes_max: int, "
                        "memo: dict | None, arrays: dict | None)");
        return NULL;
    }
    if (plain_input_start(&input, args[0], args[3], args[4], args[5], args[6]) < 0)
        return NULL;
    base_at = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    base_end = base_at + PyBytes_GET_SIZE(args[1]);
    if (base_at >= base_end)
        status = plain_value(&input, 0, &value); /* no base */
    else
        status = against_value(&input, 0, &base_at, base_end, args[2], &value, &same);
    return plain_result(&input, status, value);
}

#endif
