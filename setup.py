"""Build the kernel's optional compiled core; everything else about the package is in pyproject.toml.

The extension is ``optional``: without a C compiler (or Python headers) the build goes on without it
and timetravel runs its pure-Python kernel, which gives the same bits (docs/performance.md, kernel).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "timetravel.sim._speedups",
            ["timetravel/sim/_speedups.c"],
            depends=[
                f"timetravel/sim/_speedups_{part}.h"
                for part in ("heap", "loop", "pack", "plain", "against", "gpu", "finish", "tree", "entry")
            ],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
