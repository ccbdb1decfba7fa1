/* Fabric's compiled code: the GPU stream engine (fabric/gpu.py) and the tree all-reduce's timing
 * (fabric/collective.py) in C.
 *
 * Optional, as the kernel's compiled core is (setup.py marks it optional; fabric/speedups.py loads
 * it only when the kernel's is loaded too, and not with TIMETRAVEL_PURE_PYTHON=1). The Python code
 * beside it is the reference: this code gives the same bits, and hands everything off its common
 * path back to the Python functions fabric/gpu.py hands over (configure_gpu, configure_entries):
 * tests/test_fabric_gpu_compiled.py, test_fabric_gpu.py, test_fabric_gpu_entries.py and
 * test_fabric_collective_tree.py run both and compare.
 *
 * The engine works on the kernel's objects: a handler's context (the kernel's ContextCore, whose
 * fields it reads) and the Event it builds for a kernel's done_kind. It gets both from the kernel's
 * C interface (sim/_speedups_api.h: the KernelApi capsule of timetravel.sim._speedups, imported
 * once, here), so the kernel's C knows nothing of GPUs. Deliveries go through the context's own
 * ``deliver`` method, as the Python engine's do.
 *
 * One translation unit: this file holds the module and includes, in this order, _speedups_gpu.h
 * (the engine's configuration, keys and state readers), _speedups_gpu_race.h (the race check),
 * _speedups_gpu_pump.h (the pump), _speedups_gpu_host.h (launch, record, wait), _speedups_done.h
 * (the gpu.done handler, schedule_finishes), _speedups_entry.h (the compiled entries) and
 * _speedups_tree.h (the tree's timing).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../sim/_speedups_api.h"

static PyTypeObject *context_core_type = NULL; /* the kernel's ContextCore */
static MakeEvent make_event = NULL;            /* the kernel's make_event */

#include "_speedups_gpu.h"
#include "_speedups_gpu_race.h"
#include "_speedups_gpu_pump.h"
#include "_speedups_gpu_host.h"
#include "_speedups_done.h"
#include "_speedups_entry.h"
#include "_speedups_tree.h"

static PyMethodDef module_methods[] = {
    {"gpu_pump", (PyCFunction)(void (*)(void))gpu_pump, METH_FASTCALL,
     "The GPU stream engine's pump (fabric/gpu.py _pump_python), same bits."},
    {"configure_gpu", configure_gpu, METH_VARARGS, "Hand the GPU pump the Python functions it calls."},
    {"gpu_launch", (PyCFunction)(void (*)(void))gpu_launch, METH_FASTCALL, "fabric.launch (NotImplemented: run Python's)."},
    {"gpu_record", (PyCFunction)(void (*)(void))gpu_record, METH_FASTCALL, "fabric.record (NotImplemented: run Python's)."},
    {"gpu_wait", (PyCFunction)(void (*)(void))gpu_wait, METH_FASTCALL, "fabric.wait (NotImplemented: run Python's)."},
    {"gpu_done", (PyCFunction)(void (*)(void))gpu_done, METH_FASTCALL, "The gpu.done handler (NotImplemented: run Python's)."},
    {"launch", (PyCFunction)(void (*)(void))entry_launch_call, METH_FASTCALL | METH_KEYWORDS,
     "launch($module, /, ctx, stream, name, duration_ns, reads=(), writes=(), done_kind=None, payload=None, "
     "started_kind=None)\n--\n\nfabric.launch: queue a kernel (fabric/gpu.py; the compiled entry, no Python frame)."},
    {"record", (PyCFunction)(void (*)(void))entry_record_call, METH_FASTCALL | METH_KEYWORDS,
     "record($module, /, ctx, stream, event)\n--\n\nfabric.record: queue an event record (the compiled entry)."},
    {"wait", (PyCFunction)(void (*)(void))entry_wait_call, METH_FASTCALL | METH_KEYWORDS,
     "wait($module, /, ctx, stream, event)\n--\n\nfabric.wait: make a stream wait for an event (the compiled entry)."},
    {"gpu_done_entry", (PyCFunction)(void (*)(void))gpu_done_entry, METH_FASTCALL,
     "The gpu.done handler (table, python_handler, state, event, ctx): gpu_done, or the Python handler."},
    {"configure_entries", configure_entries, METH_VARARGS, "Hand the GPU entries gpu.py's module dict and functions."},
    {"gpu_schedule_finishes", (PyCFunction)(void (*)(void))gpu_schedule_finishes, METH_FASTCALL,
     "fabric.schedule_finishes (NotImplemented: run Python's)."},
    {"tree_times", (PyCFunction)(void (*)(void))tree_times, METH_FASTCALL,
     "The tree all-reduce's timing (fabric/collective.py tree_completions_python), same ints; None: run that."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "_speedups", "Fabric's compiled GPU stream engine and tree timing (optional).", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    const KernelApi *kernel = kernel_api_import();
    if (kernel == NULL)
        return NULL;
    context_core_type = kernel->context_core_type;
    make_event = kernel->make_event;
    if (gpu_intern() < 0 || entry_intern() < 0)
        return NULL;
    return layer_module_create(&speedups_module, 1); /* fabric/speedups.py's INTERFACE_VERSION */
}
