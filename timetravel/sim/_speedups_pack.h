/* The chain batch's msgpack bytes, identical to encoding.pack(events).
 * Included once, by _speedups.c (one translation unit); see that file for the rules it follows. */
#ifndef _SPEEDUPS_PACK_H
#define _SPEEDUPS_PACK_H

/* -- the chain batch's bytes ----------------------------------------------------------------- */

/* msgpack bytes of a list of events, identical to encoding.pack(events) (msgpack-python with
 * use_bin_type): the smallest int and str forms msgpack picks, a payload that is not None, an int,
 * a str or a flat list or tuple of those packed by encoding.pack itself (msgpack output concatenates, so a value packs to the
 * same bytes alone as inside an array). Anything unusual (an int out of 64 bits, a str that is not
 * valid UTF-8, an item that is not an event, a payload encoding.pack refuses) returns None and the
 * caller packs the whole batch in Python, which gives the bytes or raises the error Python would. */

typedef struct {
    char *data;
    Py_ssize_t length;
    Py_ssize_t capacity;
} Buffer;

static int
buffer_reserve(Buffer *buffer, Py_ssize_t more)
{
    if (buffer->length + more > buffer->capacity) {
        Py_ssize_t capacity = buffer->capacity * 2 > buffer->length + more ? buffer->capacity * 2
                                                                           : buffer->length + more + 4096;
        char *data = PyMem_Realloc(buffer->data, (size_t)capacity);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        buffer->data = data;
        buffer->capacity = capacity;
    }
    return 0;
}

static int
buffer_put(Buffer *buffer, const void *bytes, Py_ssize_t length)
{
    if (buffer_reserve(buffer, length) < 0)
        return -1;
    memcpy(buffer->data + buffer->length, bytes, (size_t)length);
    buffer->length += length;
    return 0;
}

static int
put_tagged(Buffer *buffer, unsigned char tag, unsigned long long value, int width)
{
    unsigned char bytes[9];
    int index;
    bytes[0] = tag;
    for (index = 0; index < width; index++)
        bytes[1 + index] = (unsigned char)(value >> (8 * (width - 1 - index)));
    return buffer_put(buffer, bytes, 1 + width);
}

/* 1 packed, 0 not a plain int in 64 bits (the caller falls back), -1 error. */
static int
put_int(Buffer *buffer, PyObject *value)
{
    int overflow;
    long long signed_value;
    if (!PyLong_CheckExact(value))
        return 0;
    signed_value = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow < 0)
        return 0;
    if (overflow > 0) {
        unsigned long long unsigned_value = PyLong_AsUnsignedLongLong(value);
        if (unsigned_value == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return put_tagged(buffer, 0xcf, unsigned_value, 8) < 0 ? -1 : 1;
    }
    if (signed_value < -(1LL << 5)) {
        if (signed_value < -(1LL << 15)) {
            if (signed_value < -(1LL << 31))
                return put_tagged(buffer, 0xd3, (unsigned long long)signed_value, 8) < 0 ? -1 : 1;
            return put_tagged(buffer, 0xd2, (unsigned long long)signed_value, 4) < 0 ? -1 : 1;
        }
        if (signed_value < -(1LL << 7))
            return put_tagged(buffer, 0xd1, (unsigned long long)signed_value, 2) < 0 ? -1 : 1;
        return put_tagged(buffer, 0xd0, (unsigned long long)signed_value, 1) < 0 ? -1 : 1;
    }
    if (signed_value < (1LL << 7)) {
        unsigned char byte = (unsigned char)signed_value;
        return buffer_put(buffer, &byte, 1) < 0 ? -1 : 1;
    }
    if (signed_value < (1LL << 16)) {
        if (signed_value < (1LL << 8))
            return put_tagged(buffer, 0xcc, (unsigned long long)signed_value, 1) < 0 ? -1 : 1;
        return put_tagged(buffer, 0xcd, (unsigned long long)signed_value, 2) < 0 ? -1 : 1;
    }
    if (signed_value < (1LL << 32))
        return put_tagged(buffer, 0xce, (unsigned long long)signed_value, 4) < 0 ? -1 : 1;
    return put_tagged(buffer, 0xcf, (unsigned long long)signed_value, 8) < 0 ? -1 : 1;
}

/* 1 packed, 0 not an exact str that encodes to UTF-8 (fall back), -1 error. */
static int
put_str(Buffer *buffer, PyObject *value)
{
    Py_ssize_t length;
    const char *utf8;
    int status;
    if (!PyUnicode_CheckExact(value))
        return 0;
    utf8 = PyUnicode_AsUTF8AndSize(value, &length);
    if (utf8 == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (length < 32) {
        unsigned char tag = (unsigned char)(0xa0 | length);
        status = buffer_put(buffer, &tag, 1);
    } else if (length < 256) {
        status = put_tagged(buffer, 0xd9, (unsigned long long)length, 1);
    } else if (length < 65536) {
        status = put_tagged(buffer, 0xda, (unsigned long long)length, 2);
    } else if (length <= 0xffffffffLL) {
        status = put_tagged(buffer, 0xdb, (unsigned long long)length, 4);
    } else {
        return 0;
    }
    if (status < 0 || buffer_put(buffer, utf8, length) < 0)
        return -1;
    return 1;
}

static int
put_array_header(Buffer *buffer, Py_ssize_t length)
{
    if (length < 16) {
        unsigned char tag = (unsigned char)(0x90 | length);
        return buffer_put(buffer, &tag, 1);
    }
    if (length < 65536)
        return put_tagged(buffer, 0xdc, (unsigned long long)length, 2);
    return put_tagged(buffer, 0xdd, (unsigned long long)length, 4);
}

/* A payload that is a list or tuple of None, plain ints and strs (dp_training's [generation, step],
 * the fabric's [epoch, stream, ticket]): msgpack's array of them. 1 packed, 0 another payload
 * (nothing written: encoding.pack packs it), -1 error. */
static int
put_flat_sequence(Buffer *buffer, PyObject *payload)
{
    Py_ssize_t start = buffer->length, index, size;
    if (!PyList_CheckExact(payload) && !PyTuple_CheckExact(payload))
        return 0;
    size = PySequence_Fast_GET_SIZE(payload);
    if (put_array_header(buffer, size) < 0)
        return -1;
    for (index = 0; index < size; index++) {
        PyObject *item = PySequence_Fast_GET_ITEM(payload, index);
        int status;
        if (item == Py_None) {
            unsigned char nil = 0xc0;
            status = buffer_put(buffer, &nil, 1) < 0 ? -1 : 1;
        } else if (PyLong_CheckExact(item)) {
            status = put_int(buffer, item);
        } else if (PyUnicode_CheckExact(item)) {
            status = put_str(buffer, item);
        } else {
            status = 0;
        }
        if (status <= 0) {
            buffer->length = start;
            return status;
        }
    }
    return 1;
}

/* 1 packed, 0 fall back, -1 error. */
static int
put_event(Buffer *buffer, PyObject *event, PyObject *pack)
{
    PyObject *payload;
    int status, index;
    if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 5 ||
        (Py_TYPE(event) != event_type && !PyTuple_CheckExact(event)))
        return 0;
    if (put_array_header(buffer, 5) < 0)
        return -1;
    for (index = 0; index < 2; index++) {
        status = put_int(buffer, PyTuple_GET_ITEM(event, index));
        if (status <= 0)
            return status;
    }
    for (index = 2; index < 4; index++) {
        status = put_str(buffer, PyTuple_GET_ITEM(event, index));
        if (status <= 0)
            return status;
    }
    payload = PyTuple_GET_ITEM(event, 4);
    if (payload == Py_None) {
        unsigned char nil = 0xc0;
        return buffer_put(buffer, &nil, 1) < 0 ? -1 : 1;
    }
    status = PyLong_CheckExact(payload) ? put_int(buffer, payload)
             : PyUnicode_CheckExact(payload) ? put_str(buffer, payload)
                                             : put_flat_sequence(buffer, payload);
    if (status != 0)
        return status;
    {
        PyObject *packed = PyObject_CallOneArg(pack, payload);
        if (packed == NULL && !PyErr_ExceptionMatches(PyExc_Exception))
            return -1; /* a KeyboardInterrupt (Ctrl-C) raised in pack: never swallowed */
        if (packed == NULL || !PyBytes_Check(packed)) {
            Py_XDECREF(packed);
            PyErr_Clear(); /* the whole batch in Python raises what Python raises */
            return 0;
        }
        status = buffer_put(buffer, PyBytes_AS_STRING(packed), PyBytes_GET_SIZE(packed)) < 0 ? -1 : 1;
        Py_DECREF(packed);
        return status;
    }
}

/* pack_events(events, pack) -> bytes, or None when the caller must pack the batch in Python. */
static PyObject *
pack_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Buffer buffer = {NULL, 0, 0};
    PyObject *events, *result;
    Py_ssize_t index, count;
    if (nargs != 2 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "pack_events(events: list, pack)");
        return NULL;
    }
    events = args[0];
    count = PyList_GET_SIZE(events);
    if (buffer_reserve(&buffer, 16 + 24 * count) < 0 || put_array_header(&buffer, count) < 0)
        goto error;
    for (index = 0; index < PyList_GET_SIZE(events); index++) {
        int status = put_event(&buffer, PyList_GET_ITEM(events, index), args[1]);
        if (status < 0)
            goto error;
        if (status == 0) {
            PyMem_Free(buffer.data);
            Py_RETURN_NONE;
        }
    }
    if (PyList_GET_SIZE(events) != count) { /* a payload's packing changed the batch */
        PyMem_Free(buffer.data);
        Py_RETURN_NONE;
    }
    result = PyBytes_FromStringAndSize(buffer.data, buffer.length);
    PyMem_Free(buffer.data);
    return result;

error:
    PyMem_Free(buffer.data);
    return NULL;
}

#endif /* _SPEEDUPS_PACK_H */
