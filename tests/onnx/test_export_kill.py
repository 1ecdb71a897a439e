"""Saving an exported model survives `kill -9` and a file-size limit at any point.

A child process (`save_worker.py`) saves two versions of a small model over
one another, inline, with a data file, and as two models sharing one data
file (`save_together`). The test SIGKILLs it at a random
moment, or starves its writes with `RLIMIT_FSIZE` at a random size, and then
checks the destination: each model always version 1 or version 2, complete (`onnx.load`
with its data, and a checksum of the weights equal to the one the test
computes from the arrays themselves). After the next save no temporary file
and no data file of another save is left. The default suite runs
`ROUNDS` of each; `-m slow` runs `SLOW_ROUNDS`. The counts of kills that
landed mid-write (debris left behind) are printed (`pytest -s`).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import numpy_helper
from save_worker import exported, weights

import linnet

ROUNDS = 15
SLOW_ROUNDS = 400
MODES = ("inline", "external", "together")
_HERE = Path(__file__).parent


class Worker:
    """The child process of `save_worker.py`, driven line by line."""

    def __init__(self, folder: Path) -> None:
        source = str(Path(linnet.__file__).parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([source, str(_HERE)])}
        self.process = subprocess.Popen(
            [sys.executable, str(_HERE / "save_worker.py"), str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def answer(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the save worker ended (exit {self.process.poll()})"
        return line.strip()

    def ask(self, line: str) -> str:
        self.send(line)
        return self.answer()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Worker, Path]]:
    folder = tmp_path_factory.mktemp("saves")
    for mode in MODES:
        (folder / mode).mkdir()
    started = Worker(folder)
    try:
        yield started, folder
    finally:
        started.close()


def _checksum(arrays: dict[str, Any]) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        digest.update(name.encode())
        digest.update(arrays[name].tobytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def expected() -> dict[str, int]:
    """The checksum of each version's weights, by ONNX initializer name, from the arrays."""
    params = exported(1).by_role("param")
    found = {}
    for version in (1, 2):
        arrays = weights(version)
        found[_checksum({io.name: arrays[io.path or ""] for io in params})] = version
    return found


def _version_on_disk(target: Path, expected: dict[str, int]) -> int:
    model = onnx.load(str(target))  # its external data too
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    checksum = _checksum(arrays)
    assert checksum in expected, f"{target} holds neither version: {sorted(arrays)}"
    return expected[checksum]


def _models(folder: Path, mode: str) -> list[Path]:
    return [folder / "m.onnx", folder / "n.onnx"] if mode == "together" else [folder / "m.onnx"]


def _debris(folder: Path, mode: str) -> list[str]:
    """Everything beside the models and the data files they point at."""
    used = set()
    for model in _models(folder, mode):
        used.add(model.name)
        stored = onnx.load(str(model), load_external_data=False)
        for tensor in stored.graph.initializer:
            used.update(e.value for e in tensor.external_data if e.key == "location")
    return sorted(p.name for p in folder.iterdir() if p.name not in used)


def _assert_clean(folder: Path, mode: str) -> None:
    names = sorted(p.name for p in folder.iterdir())
    if mode == "inline":
        assert names == ["m.onnx"]
    elif mode == "external":
        assert len(names) == 2 and names[0] == "m.onnx", names
        assert re.fullmatch(r"m\.onnx\.[0-9a-f]{16}\.data", names[1])
    else:
        assert len(names) == 3 and names[:2] == ["m.onnx", "n.onnx"], names
        assert re.fullmatch(r"weights\.[0-9a-f]{16}\.data", names[2])
    assert _debris(folder, mode) == []


def _versions_on_disk(folder: Path, mode: str, expected: dict[str, int]) -> set[int]:
    return {_version_on_disk(model, expected) for model in _models(folder, mode)}


def _kill_rounds(
    worker: tuple[Worker, Path], expected: dict[str, int], mode: str, rounds: int
) -> Counter[str]:
    child, root = worker
    folder = root / mode
    rng = random.Random(f"kill-{mode}-{rounds}")
    assert child.ask(f"save {mode} 1") == "saved"
    seen: Counter[str] = Counter()
    for turn in range(rounds):
        answer = child.ask(f"loop {mode}")
        pid = int(answer.removeprefix("pid "))
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(pid, signal.SIGKILL)
        reaped = int(child.answer().removeprefix("reaped "))
        assert os.WIFSIGNALED(reaped) and os.WTERMSIG(reaped) == signal.SIGKILL
        for version in _versions_on_disk(folder, mode, expected):
            seen[f"version {version}"] += 1
        debris = _debris(folder, mode)
        if any(".linnet-tmp-" in name for name in debris):
            seen["temporary left"] += 1
        if any(name.endswith(".data") for name in debris):
            seen["unreferenced data file left"] += 1
        assert all(".linnet-tmp-" in n or n.endswith(".data") for n in debris), debris
        next_version = 1 + turn % 2
        assert child.ask(f"save {mode} {next_version}") == "saved"
        assert _versions_on_disk(folder, mode, expected) == {next_version}
        _assert_clean(folder, mode)
    print(f"\nSIGKILL {mode}, {rounds} rounds: {dict(sorted(seen.items()))}")
    # the kills landed mid-write, not only between saves
    assert seen["temporary left"] + seen["unreferenced data file left"] > 0
    return seen


def _fsize_rounds(
    worker: tuple[Worker, Path], expected: dict[str, int], mode: str, rounds: int
) -> Counter[str]:
    child, root = worker
    folder = root / mode
    rng = random.Random(f"fsize-{mode}-{rounds}")
    assert child.ask(f"save {mode} 1") == "saved"
    biggest = max(p.stat().st_size for p in folder.iterdir())
    seen: Counter[str] = Counter()
    for turn in range(rounds):
        (old,) = _versions_on_disk(folder, mode, expected)
        before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
        new = 3 - old
        limit = rng.randrange(0, biggest * 5 // 4)
        status = int(child.ask(f"fsize {mode} {new} {limit}").removeprefix("status "))
        assert status in (0, 3), f"limit {limit}: status {status}"
        if status == 3:  # refused by name; everything as it was, no temporary left
            seen["refused"] += 1
            assert _versions_on_disk(folder, mode, expected) == {old}
            assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
        else:
            seen["saved"] += 1
            assert _versions_on_disk(folder, mode, expected) == {new}
            _assert_clean(folder, mode)
        if turn % 5 == 4:
            assert child.ask(f"save {mode} {1 + turn % 2}") == "saved"
            _assert_clean(folder, mode)
    print(f"\nRLIMIT_FSIZE {mode}, {rounds} rounds: {dict(sorted(seen.items()))}")
    assert seen["refused"] > 0 and seen["saved"] > 0
    return seen


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_save_leaves_the_old_or_the_new_model(
    worker: tuple[Worker, Path], expected: dict[str, int], mode: str
) -> None:
    _kill_rounds(worker, expected, mode, ROUNDS)


@pytest.mark.parametrize("mode", MODES)
def test_a_save_past_the_file_size_limit_is_refused_and_leaves_the_old_model(
    worker: tuple[Worker, Path], expected: dict[str, int], mode: str
) -> None:
    _fsize_rounds(worker, expected, mode, ROUNDS)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_many_killed_saves(
    worker: tuple[Worker, Path], expected: dict[str, int], mode: str
) -> None:
    _kill_rounds(worker, expected, mode, SLOW_ROUNDS)
    _fsize_rounds(worker, expected, mode, SLOW_ROUNDS)
