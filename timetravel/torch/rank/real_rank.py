"""Real torchrun's processes, for ``--against-real`` (world/real_torchrun.py starts them).

* ``python -m timetravel.torch.rank.real_rank torchrun ARGS...`` becomes ``python -m
  torch.distributed.run ARGS...`` (exec) after asking to die with its parent, the coordinator;
* ``python -m timetravel.torch.rank.real_rank CAPTURE_DIR (script PATH | module NAME) [ARGS...]`` is
  what that torchrun starts as each of its ranks: it dies with its parent (torchrun's agent), starts
  the capture (:mod:`.capture`) and runs the script as ``python PATH ARGS`` (or ``python -m NAME
  ARGS``) would: as ``__main__``, with its own ``sys.argv`` and its folder first on ``sys.path``.
  Nothing of the simulator is installed: this is real torch.
"""

from __future__ import annotations

import os
import runpy
import sys

from timetravel.torch.rank.process import die_with_parent


def main(argv: list[str]) -> None:
    die_with_parent()
    if argv[0] == "torchrun":
        os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *argv[1:]])
    capture_dir, kind, target, *args = argv
    from timetravel.torch.rank import capture as rank_capture

    capture = rank_capture.install(capture_dir, int(os.environ["RANK"]))
    sys.argv = [target, *args]
    namespace: dict[str, object] = {}  # held until the end record has read the modules left alive
    ended = "returned"
    try:
        if kind == "module":
            sys.path[0] = os.getcwd()
            namespace = runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            namespace = runpy.run_path(target, run_name="__main__")
    except SystemExit as request:
        ended = "returned" if request.code in (None, 0) else f"exit {request.code}"
        raise
    except BaseException as error:
        ended = f"raised {type(error).__name__}"
        raise
    finally:
        capture.finish(ended)
        namespace.clear()


if __name__ == "__main__":
    main(sys.argv[1:])
