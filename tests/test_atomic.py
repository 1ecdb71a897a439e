"""`linnet.atomic`: whole files or nothing, with the permissions a user expects.

Checked through the writers that use it (SafeTensors, `linnet fmt`'s helper)
and directly: a new file gets 0o666 less the umask (not mkstemp's 0o600), a
replaced file keeps its mode, a failure in the middle leaves the earlier
file and no temporary file, an `OSError` is a `LinnetError` naming the file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from linnet.atomic import atomic_write, write_bytes
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
