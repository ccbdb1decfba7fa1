"""Start-up: ``timetravel --help`` loads no heavy library, and the lazy command table is honest.

Not a timed test (the machine is shared): what keeps start-up fast is which modules load, so that is
what is checked, in a fresh interpreter. ``timetravel bench kernel`` reports ``cli_startup_ms``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

import timetravel.cli as cli

HEAVY_MODULES = ("numpy", "ml_dtypes", "textual", "prompt_toolkit", "dask", "torch")


def _modules_loaded_by(argv: list[str]) -> set[str]:
    probe = (
        "import sys, json, contextlib, io\n"
        "from timetravel.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(completed.stdout.strip().splitlines()[-1]))


def test_help_imports_no_heavy_library() -> None:
    loaded = _modules_loaded_by(["--help"])
    assert "timetravel.cli" in loaded
    assert not {name for name in loaded if name.split(".")[0] in HEAVY_MODULES}


@pytest.mark.parametrize("command", ["run", "replay", "tui", "shell", "fuzz", "branches"])
def test_a_command_loads_only_its_own_module(command: str) -> None:
    loaded = _modules_loaded_by([command, "--help"])
    own = next(entry.module for entry in cli.COMMANDS if entry.name == command)
    assert own in loaded
    others = {module for module in cli.COMMAND_MODULES if module != own}
    assert not others & loaded
    assert not {
        name for name in loaded if name.split(".")[0] in ("textual", "prompt_toolkit", "dask", "torch")
    }


def test_the_command_table_says_what_the_modules_register() -> None:
    parser = cli.build_parser(None)
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    registered = {choice.dest: choice.help for choice in subparsers._choices_actions}
    assert registered == {entry.name: entry.help for entry in cli.COMMANDS}
    for entry in cli.COMMANDS:
        assert subparsers.choices[entry.name].get_default("func").__module__ == entry.module
        for alias in entry.aliases:
            assert subparsers.choices[alias] is subparsers.choices[entry.name]


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    for entry in cli.COMMANDS:
        assert entry.name in out


def test_a_user_error_of_a_lazily_loaded_module_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "no-such-scenario"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("timetravel: error: ") and len(err.strip().splitlines()) == 1


def test_every_user_error_module_and_name_exists() -> None:
    import importlib

    from timetravel.cli import common

    errors = set(common.all_user_errors())
    named = {getattr(importlib.import_module(module), name) for module, name in common._BASE_USER_ERRORS}
    assert len(named) == len(common._BASE_USER_ERRORS)
    assert named <= errors
    assert all(issubclass(error, BaseException) for error in errors)
