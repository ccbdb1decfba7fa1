"""The rank's file watch: writes outside its working directory are reported once per directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from timetravel.torch.rank.env.files import WRITE_OUTSIDE_WORKDIR, install_file_watch


@pytest.fixture
def watched(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    warnings: list[tuple[str, str]] = []
    installation = install_file_watch(str(work), lambda name, detail: warnings.append((name, detail)))
    yield work, tmp_path / "outside", warnings
    installation.uninstall()


def test_writes_inside_the_working_directory_and_reads_outside_are_not_reported(watched) -> None:
    work, outside, warnings = watched
    outside.mkdir()
    (outside / "data.txt").write_text("read me")
    warnings.clear()
    with open(outside / "data.txt") as stream:
        stream.read()
    with open(work / "log.txt", "w") as stream:
        stream.write("inside")
    os.makedirs(work / "checkpoints")
    torch.save({"step": 1}, work / "checkpoints" / "latest.pt")
    torch.save({"step": 1}, str(work / "latest.pt"))
    os.replace(work / "latest.pt", work / "previous.pt")
    shutil.rmtree(work / "checkpoints")
    assert warnings == []


def test_each_kind_of_write_outside_is_reported_with_its_path(tmp_path: Path) -> None:
    work = tmp_path / "work"
    kinds = ("open", "os_open", "save", "rename", "remove", "rmtree", "mkdir")
    paths = {name: tmp_path / "outside" / name for name in kinds}
    for path in [work, *paths.values()]:
        path.mkdir(parents=True)
    (work / "moved").write_text("m")
    (paths["remove"] / "gone").touch()
    (paths["rmtree"] / "tree" / "deeper").mkdir(parents=True)
    (paths["rmtree"] / "tree" / "deeper" / "file").touch()
    warnings: list[tuple[str, str]] = []
    with install_file_watch(str(work), lambda name, detail: warnings.append((name, detail))):
        with open(paths["open"] / "log.txt", "a") as stream:
            stream.write("x")
        os.close(os.open(paths["os_open"] / "raw", os.O_WRONLY | os.O_CREAT))
        torch.save({"step": 1}, str(paths["save"] / "model.pt"))  # C++ opens it: no audit event of its own
        os.rename(work / "moved", paths["rename"] / "moved")
        os.remove(paths["remove"] / "gone")
        shutil.rmtree(paths["rmtree"] / "tree")  # its files one by one: not one warning each
        os.mkdir(paths["mkdir"] / "new")
    assert all(name == WRITE_OUTSIDE_WORKDIR for name, _ in warnings)
    assert [detail for _, detail in warnings] == [
        os.path.realpath(path)
        for path in (
            paths["open"] / "log.txt",
            paths["os_open"] / "raw",
            paths["save"] / "model.pt",
            paths["rename"] / "moved",
            paths["remove"] / "gone",
            paths["rmtree"] / "tree",
            paths["mkdir"] / "new",
        )
    ]


def test_once_per_directory_never_for_pycache_and_off_after_uninstall(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside"
    (outside / "__pycache__").mkdir(parents=True)
    warnings: list[tuple[str, str]] = []
    installation = install_file_watch(str(work), lambda name, detail: warnings.append((name, detail)))
    for index in range(5):
        (outside / f"step_{index}.log").write_text("x")
    (outside / "__pycache__" / "module.cpython-312.pyc").write_bytes(b"")
    torch.save({}, str(outside / "model.pt"))
    assert warnings == [(WRITE_OUTSIDE_WORKDIR, os.path.realpath(outside / "step_0.log"))]
    installation.uninstall()
    (tmp_path / "after.txt").write_text("x")
    torch.save({}, str(tmp_path / "after.pt"))
    assert len(warnings) == 1
    assert torch.save.__name__ == "save"
