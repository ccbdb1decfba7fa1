"""Build the optional compiled code of each layer; everything else about the package is in pyproject.toml.

Each layer's C lives with that layer and builds into an extension of its own: the kernel's
(``timetravel.sim._speedups``), fabric's GPU stream engine and tree timing
(``timetravel.fabric._speedups``, which uses the kernel's through its C interface,
``sim/_speedups_api.h``), snapshot's decoders of stored values (``timetravel.snapshot._speedups``)
and the recording reader's helpers (``timetravel.recording._speedups``). Every one is ``optional``:
without a C compiler (or Python headers) the build goes on without it and that layer runs its
pure-Python reference, which gives the same bits (docs/performance.md, "The compiled core").
"""

from setuptools import Extension, setup

KERNEL_API = "timetravel/sim/_speedups_api.h"
"""The kernel's C interface, which fabric's extension includes too."""
HEADERS = {
    "sim": ("api", "heap", "context", "loop", "pack"),
    "fabric": ("gpu", "gpu_race", "gpu_pump", "gpu_host", "done", "entry", "tree"),
    "snapshot": ("plain_scan", "plain", "against", "copy", "changes"),
    "recording": (),
}
"""Each layer's ``_speedups.c`` includes these ``_speedups_<name>.h`` of its folder."""


def layer_extension(layer: str, headers: tuple[str, ...]) -> Extension:
    """``timetravel.<layer>._speedups``, built from ``timetravel/<layer>/_speedups.c``."""
    folder = f"timetravel/{layer}"
    depends = [f"{folder}/_speedups_{name}.h" for name in headers]
    return Extension(
        f"timetravel.{layer}._speedups",
        [f"{folder}/_speedups.c"],
        depends=depends if layer == "sim" else [*depends, KERNEL_API],
        optional=True,
        extra_compile_args=["-O2"],
    )


setup(ext_modules=[layer_extension(layer, headers) for layer, headers in HEADERS.items()])
