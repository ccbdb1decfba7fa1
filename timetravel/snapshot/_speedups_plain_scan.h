/* The byte-level part of the decoder of stored values (_speedups_plain.h): its limits, its input,
 * the cache of short strs and the skip over a msgpack value. Included once, by snapshot/_speedups.c
 * (one translation unit), before _speedups_plain.h. */
#ifndef _SPEEDUPS_PLAIN_SCAN_H
#define _SPEEDUPS_PLAIN_SCAN_H

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

#endif /* _SPEEDUPS_PLAIN_SCAN_H */
