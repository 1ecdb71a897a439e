"""`linnet.atomic`: whole files or nothing, with the permissions a user expects.

Checked through the writers that use it (SafeTensors, `linnet fmt`'s helper)
and directly: a new file gets 0o666 less the umask (not mkstemp's 0o600), a
replaced file keeps its mode, a failure in the middle leaves the earlier
file and no temporary file, an `OSError` is a `LinnetError` naming the file;
the next write removes the temporaries of a killed one (and only those), a
data file is named after its content, and only data files no model refers to
are removed. The kill and file-size-limit test is tests/onnx/test_export_kill.py.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from linnet.atomic import (
    STALE_AFTER,
    atomic_write,
    ensure_folder,
    remove_unreferenced,
    versioned_name,
    versioned_write,
    write_bytes,
)
from linnet.errors import LinnetError
from linnet.weights.safetensors import read_safetensors, save_safetensors


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("durable", [True, False])
def test_new_files_get_the_umask_default(tmp_path: Path, umask_022: None, durable: bool) -> None:
    write_bytes(tmp_path / "a.txt", b"hello", durable=durable)
    assert (tmp_path / "a.txt").read_bytes() == b"hello" and _mode(tmp_path / "a.txt") == 0o644
    save_safetensors({"w": np.arange(3, dtype=np.float32)}, tmp_path / "w.safetensors")
    assert _mode(tmp_path / "w.safetensors") == 0o644
    np.testing.assert_array_equal(read_safetensors(tmp_path / "w.safetensors")["w"], [0, 1, 2])


@pytest.mark.parametrize("durable", [True, False])
def test_a_replaced_file_keeps_its_mode(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "kept.txt"
    target.write_bytes(b"old")
    target.chmod(0o640)
    write_bytes(target, b"new", durable=durable)
    assert target.read_bytes() == b"new" and _mode(target) == 0o640


@pytest.mark.parametrize("durable", [True, False])
def test_a_failure_leaves_the_earlier_file(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"earlier")
    full = pytest.raises(LinnetError, match=r"cannot write `.*model\.bin`: No space left")
    with full, atomic_write(target, durable=durable) as out:
        out.write(b"half of it")
        raise OSError(28, "No space left on device")
    with pytest.raises(ValueError, match="not ours"), atomic_write(target, durable=durable):
        raise ValueError("not ours")
    assert target.read_bytes() == b"earlier"
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]


def test_an_unwritable_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LinnetError, match=r"cannot write `.*missing/x`"):
        write_bytes(tmp_path / "missing" / "x", b"")


def _dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_next_write_removes_what_a_killed_write_left(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    dead = tmp_path / f".model.bin.linnet-tmp-{_dead_pid()}-0a1b2c3d"
    live = tmp_path / f".model.bin.linnet-tmp-{os.getppid()}-0a1b2c3d"  # a writer still at work
    old_live = tmp_path / f".model.bin.linnet-tmp-{os.getppid()}-00ff00ff"
    other = tmp_path / f".other.bin.linnet-tmp-{_dead_pid()}-0a1b2c3d"  # another target's
    for path in (dead, live, old_live, other):
        path.write_bytes(b"half")
    an_hour_ago = time.time() - STALE_AFTER - 60
    os.utime(old_live, (an_hour_ago, an_hour_ago))
    write_bytes(target, b"whole", durable=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["model.bin", live.name, other.name]
    )


def test_temporaries_are_named_after_the_target_and_the_writer(tmp_path: Path) -> None:
    with atomic_write(tmp_path / "w.safetensors") as out:
        (temporary,) = [p for p in tmp_path.iterdir()]
        assert re.fullmatch(
            rf"\.w\.safetensors\.linnet-tmp-{os.getpid()}-[0-9a-f]{{8}}", temporary.name
        )
        out.write(b"x")
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]


def test_versioned_names() -> None:
    assert versioned_name("m.onnx.data", "0123456789abcdef") == "m.onnx.0123456789abcdef.data"
    assert versioned_name("weights", "0123456789abcdef") == "weights.0123456789abcdef"
    assert versioned_name(".hidden", "0123456789abcdef") == ".hidden.0123456789abcdef"


def test_a_versioned_file_gets_a_new_name_each_time(tmp_path: Path) -> None:
    with versioned_write(tmp_path / "w.data") as out:
        out.write(b"some ")
        out.write(memoryview(b"bytes"))
    assert out.path is not None and re.fullmatch(r"w\.[0-9a-f]{16}\.data", out.path.name)
    assert out.path.read_bytes() == b"some bytes"
    with versioned_write(tmp_path / "w.data") as again:
        again.write(b"some bytes")
    assert again.path is not None and again.path != out.path  # never over a file
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.path.name, again.path.name])
    with pytest.raises(LinnetError, match="No space"), versioned_write(tmp_path / "w.data") as bad:
        bad.write(b"more")
        raise OSError(28, "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.path.name, again.path.name])


def test_only_data_files_nothing_refers_to_are_removed(tmp_path: Path) -> None:
    base = tmp_path / "w.data"
    legacy, used, unused = (
        base,
        tmp_path / "w.00000000000000aa.data",
        tmp_path / "w.00000000000000bb.data",
    )
    kept, fresh = tmp_path / "w.00000000000000cc.data", tmp_path / "w.00000000000000dd.data"
    stranger = tmp_path / "w.xyz.data"
    for path in (legacy, used, unused, kept, stranger):
        path.write_bytes(b"data")
    model = tmp_path / "a.onnx"
    model.write_bytes(b"...location\x12\x18w.00000000000000aa.data...")
    started = time.time() + 1
    fresh.write_bytes(b"data")
    os.utime(fresh, (started + 5, started + 5))  # a concurrent save's, written after we began
    removed = remove_unreferenced(base, [kept], [model], started)
    assert sorted(removed) == sorted([legacy, unused])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (used, kept, fresh, stranger, model)
    )


def test_folders_that_cannot_be_made_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(LinnetError, match=r"cannot create the output folder `.*file\.txt/sub`"):
        ensure_folder(tmp_path / "file.txt" / "sub", what="output folder")
    with pytest.raises(LinnetError, match="a file has that name"):
        ensure_folder(str(tmp_path / "file.txt"))
    assert ensure_folder(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_a_folder_without_permission_is_a_clear_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(LinnetError, match="Permission denied"):
            ensure_folder(locked / "out")
        with pytest.raises(LinnetError, match="Permission denied"):
            write_bytes(locked / "x", b"")
    finally:
        locked.chmod(0o700)


def test_an_exclusive_write_never_replaces(tmp_path: Path) -> None:
    target = tmp_path / "linnet.toml"
    with atomic_write(target, exclusive=True) as out:
        out.write(b"first")
    with pytest.raises(FileExistsError), atomic_write(target, exclusive=True) as out:
        out.write(b"second")
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["linnet.toml"]
