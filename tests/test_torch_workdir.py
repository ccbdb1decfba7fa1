"""The private working directory of a torch execution: copy, capture, restore, limits (no torch here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from timetravel.sim.scenario import ConfigError
from timetravel.torch.rank.errors import relative_path_hint
from timetravel.torch.world import workdir
from timetravel.torch.world.workdir import (
    ManifestEntry,
    WorkdirError,
    WorkingDirectory,
    manifest_digest,
    source_digest,
)


def tree(root: str | Path) -> dict[str, object]:
    """Everything under ``root`` as {relative path: bytes | ('link', target) | 'dir'}, links unfollowed."""
    found: dict[str, object] = {}
    for directory, subdirectories, files in os.walk(root):
        for name in [*subdirectories, *files]:
            full = os.path.join(directory, name)
            relative = os.path.relpath(full, root)
            if os.path.islink(full):
                found[relative] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                found[relative] = "dir"
            else:
                found[relative] = Path(full).read_bytes()
    return found


@pytest.fixture
def directory():
    created = WorkingDirectory.create()
    yield created
    created.close()


def test_a_fresh_directory_is_empty_private_and_removed_by_close() -> None:
    created = WorkingDirectory.create()
    assert os.path.isdir(created.path) and os.listdir(created.path) == []
    assert created.capture() == ()
    created.close()
    assert not os.path.exists(created.root)
    created.close()  # twice is fine


def test_a_copy_of_the_source_keeps_files_modes_and_links_as_links(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "checkpoints").mkdir(parents=True)
    (source / "checkpoints" / "step_100.pt").write_bytes(b"weights")
    (source / "latest.pt").symlink_to("checkpoints/step_100.pt")
    (source / "run.sh").write_text("echo hi\n")
    (source / "run.sh").chmod(0o755)
    copy = WorkingDirectory.create(str(source))
    try:
        assert tree(copy.path) == tree(source)
        assert os.path.islink(os.path.join(copy.path, "latest.pt"))
        assert os.stat(os.path.join(copy.path, "run.sh")).st_mode & 0o777 == 0o755
        assert manifest_digest(copy.capture()) == source_digest(str(source))
        (Path(copy.path) / "new.txt").write_text("only in the copy")
        assert not (source / "new.txt").exists()
    finally:
        copy.close()
    assert source_digest("") == workdir.EMPTY_DIGEST != source_digest(str(source))


def test_restore_after_modify_delete_and_add_gives_the_captured_directory_back(directory) -> None:
    work = Path(directory.path)
    (work / "logs").mkdir()
    (work / "logs" / "train.log").write_text("step 0\n")
    (work / "latest.pt").write_bytes(b"A" * 1000)
    (work / "keep.txt").write_text("same")
    os.symlink("latest.pt", work / "current")
    before = tree(work)
    manifest = directory.capture()
    assert [entry.path for entry in manifest] == [
        "current",
        "keep.txt",
        "latest.pt",
        "logs",
        "logs/train.log",
    ]
    (work / "latest.pt").write_bytes(b"B" * 1000)  # the same size, at once: still seen as changed
    (work / "logs" / "train.log").unlink()
    (work / "extra").mkdir()
    (work / "extra" / "deep.bin").write_bytes(b"x")
    (work / "current").unlink()
    (work / "current").write_text("now a file")
    assert directory.capture() != manifest
    directory.restore(manifest)
    assert tree(work) == before
    assert directory.capture() == manifest


def test_restore_writes_a_file_in_place_so_an_open_descriptor_sees_the_restored_content(directory) -> None:
    path = Path(directory.path) / "log.txt"
    path.write_text("first\n")
    manifest = directory.capture()
    inode = path.stat().st_ino
    path.write_text("second, longer\n")
    directory.restore(manifest)
    assert path.stat().st_ino == inode and path.read_text() == "first\n"


def test_two_branches_alternating_restores_each_see_their_own_files(directory) -> None:
    work = Path(directory.path)
    (work / "latest.pt").write_bytes(b"step 10")
    fork_point = directory.capture()
    (work / "latest.pt").write_bytes(b"step 20 of branch A")
    (work / "a.log").write_text("A")
    branch_a = directory.capture()
    directory.restore(fork_point)
    assert tree(work) == {"latest.pt": b"step 10"}
    (work / "latest.pt").write_bytes(b"step 20 of branch B")
    branch_b = directory.capture()
    for _ in range(3):
        directory.restore(branch_a)
        assert tree(work) == {"latest.pt": b"step 20 of branch A", "a.log": b"A"}
        directory.restore(branch_b)
        assert tree(work) == {"latest.pt": b"step 20 of branch B"}
    assert directory.capture() == branch_b


def test_captures_store_each_content_once(directory) -> None:
    work = Path(directory.path)
    (work / "big.bin").write_bytes(b"z" * 100_000)
    directory.capture()
    stored = directory.store.bytes_stored
    (work / "copy.bin").write_bytes(b"z" * 100_000)  # the same content under another name
    directory.capture()
    directory.capture()
    assert directory.store.bytes_stored == stored == 100_000
    assert directory.bytes_used() == 200_000 + stored


def test_a_read_only_directory_the_script_made_is_restored_and_removed(directory) -> None:
    work = Path(directory.path)
    (work / "frozen").mkdir()
    (work / "frozen" / "a.txt").write_text("a")
    (work / "frozen").chmod(0o555)
    manifest = directory.capture()
    (work / "frozen").chmod(0o755)
    (work / "frozen" / "a.txt").write_text("changed")
    directory.restore(manifest)
    assert (work / "frozen" / "a.txt").read_text() == "a"
    assert (work / "frozen").stat().st_mode & 0o777 == 0o555
    directory.restore(())
    assert tree(work) == {}


@pytest.mark.parametrize(
    ("path", "entries"),
    [
        ("../escape", [("../escape", "", 0o100644, 0)]),
        ("/etc/passwd", [("/etc/passwd", "", 0o100644, 0)]),
        ("a/./b", [("a", "", 0o40755, 0), ("a/./b", "", 0o100644, 0)]),
    ],
)
def test_a_manifest_name_that_could_leave_the_directory_is_refused(directory, path, entries) -> None:
    with pytest.raises(WorkdirError, match="not a plain relative path"):
        directory.restore(tuple(ManifestEntry(*entry) for entry in entries))


def test_a_manifest_entry_without_its_directory_is_refused_before_anything_is_written(directory) -> None:
    (Path(directory.path) / "kept").write_text("kept")
    with pytest.raises(WorkdirError, match="has no directory 'a'"):
        directory.restore((ManifestEntry("a/b", "0" * 64, 0o100644, 1),))
    assert tree(directory.path) == {"kept": b"kept"}


def test_a_link_out_of_the_directory_is_never_followed(tmp_path: Path, directory) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("outside")
    work = Path(directory.path)
    os.symlink(outside, work / "elsewhere")
    manifest = directory.capture()
    assert [entry.path for entry in manifest] == ["elsewhere"]  # the link, not what it points to
    (work / "elsewhere").unlink()
    (work / "elsewhere").mkdir()
    (work / "elsewhere" / "secret").write_text("inside")
    directory.restore(manifest)
    assert os.readlink(work / "elsewhere") == str(outside)
    assert (outside / "secret").read_text() == "outside"


def test_over_the_limits_is_one_line_naming_the_limit_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "many"
    source.mkdir()
    for index in range(4):
        (source / f"f{index}").write_bytes(b"12345")
    roots: list[str] = []
    make_root = workdir.tempfile.mkdtemp
    monkeypatch.setattr(
        workdir.tempfile, "mkdtemp", lambda **keys: roots.append(make_root(**keys)) or roots[-1]
    )
    monkeypatch.setattr(workdir, "WORKDIR_FILES_MAX", 3)
    with pytest.raises(ConfigError, match=r"workdir '.*many' holds more than WORKDIR_FILES_MAX=3 entries"):
        WorkingDirectory.create(str(source))
    with pytest.raises(ConfigError, match="WORKDIR_FILES_MAX=3"):
        source_digest(str(source))
    monkeypatch.setattr(workdir, "WORKDIR_FILES_MAX", 100)
    monkeypatch.setattr(workdir, "WORKDIR_BYTES_MAX", 12)
    with pytest.raises(ConfigError, match=r"more than WORKDIR_BYTES_MAX=12 bytes"):
        WorkingDirectory.create(str(source))
    monkeypatch.setattr(workdir, "WORKDIR_BYTES_MAX", 1 << 20)
    created = WorkingDirectory.create()
    try:
        (Path(created.path) / "big").write_bytes(b"x" * 2_000_000)
        with pytest.raises(WorkdirError, match=r"the working directory .* WORKDIR_BYTES_MAX"):
            created.capture()
    finally:
        created.close()
    assert all(not os.path.exists(root) for root in roots)  # a refused copy leaves nothing behind


def test_a_source_that_is_not_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config key 'workdir': '.*nowhere' is not a directory"):
        WorkingDirectory.create(str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="is not a directory"):
        source_digest(str(tmp_path / "nowhere"))


def test_a_changed_source_is_named_against_the_recording(tmp_path: Path) -> None:
    (tmp_path / "latest.pt").write_bytes(b"1")
    recorded = source_digest(str(tmp_path))
    assert workdir.changed_since_recording(recorded, str(tmp_path)) is None
    (tmp_path / "latest.pt").write_bytes(b"2")
    message = workdir.changed_since_recording(recorded, str(tmp_path))
    assert message is not None and message.startswith("the working directory changed since the recording")


def test_the_hint_is_for_relative_paths_only() -> None:
    assert relative_path_hint(FileNotFoundError(2, "No such file", "data/train.txt")).startswith(
        "(ranks run in a private working directory"
    )
    assert relative_path_hint(IsADirectoryError(21, "Is a directory", "checkpoints")) != ""
    assert relative_path_hint(FileNotFoundError(2, "No such file", "/abs/train.txt")) == ""
    assert relative_path_hint(ValueError("data/train.txt")) == ""
    assert relative_path_hint(RuntimeError("Parent directory ../shared does not exist.")) != ""  # torch.save
    assert relative_path_hint(RuntimeError("Parent directory /shared does not exist.")) == ""
