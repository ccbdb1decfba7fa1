/* Snapshot's compiled code: the decoders of stored values (snapshot/codec.py) and the loop of
 * Changes.add (snapshot/changes.py) in C.
 *
 * Optional (setup.py marks it optional; snapshot/speedups.py does not load it with
 * TIMETRAVEL_PURE_PYTHON=1). The Python code beside it is the reference: a decoder gives msgpack's
 * value or hands the bytes back (NotImplemented) for msgpack to decode; tests/test_decode_plain.py,
 * test_decode_against.py and test_snapshot_changes.py run both and compare. It knows stored values
 * (snapshot/codec.py's hash form) and nothing of the recording's frames around them: those are
 * recording's (recording/_speedups.c).
 *
 * One translation unit: this file holds the module and includes _speedups_plain_scan.h (the
 * decoder's input, limits, str cache and skip), _speedups_plain.h (decode_plain),
 * _speedups_against.h (decode_plain_against), _speedups_copy.h (copy_plain) and
 * _speedups_changes.h (changes_add).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../sim/_speedups_api.h"

#include "_speedups_plain_scan.h"
#include "_speedups_plain.h"
#include "_speedups_against.h"
#include "_speedups_copy.h"
#include "_speedups_changes.h"

static PyMethodDef module_methods[] = {
    {"decode_plain", (PyCFunction)(void (*)(void))decode_plain, METH_FASTCALL,
     "A stored value's msgpack decoding for the common case (NotImplemented: decode it with msgpack)."},
    {"decode_plain_against", (PyCFunction)(void (*)(void))decode_plain_against, METH_FASTCALL,
     "decode_plain of a read-only value, sharing the parts it has in common with an earlier decoded value."},
    {"copy_plain", copy_plain, METH_O, "A fresh copy of a decoded value, as decoding it again gives (NotImplemented: decode it)."},
    {"changes_add", (PyCFunction)(void (*)(void))changes_add, METH_FASTCALL,
     "Changes.add's loop: each event's dst into a dict, its seq into a list when below seq_before."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Snapshot's compiled decoders of stored values (optional).", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return layer_module_create(&speedups_module, 1); /* its speedups.py's INTERFACE_VERSION */
}
