"""A child process that saves exported models on command, to be killed or starved mid-write.

Run as `python save_worker.py FOLDER`; it exports two versions of a small
model once (`exported`, which the test imports too), then reads commands
from stdin, one a line, and answers on stdout:

- `loop MODE`: forks a worker that saves version 1, then 2, then 1 ... to
  `FOLDER/MODE/m.onnx` until it is killed; answers `pid <pid>`, then, once
  the worker is gone, `reaped <wait status>`.
- `fsize MODE VERSION LIMIT`: forks a worker that sets `RLIMIT_FSIZE` to
  LIMIT bytes (SIGXFSZ ignored, so a write past it fails with `EFBIG`) and
  saves VERSION once; answers `status <code>`: 0 saved, 3 a `LinnetError`
  naming a file in the folder and "File too large", 4 anything else.
- `save MODE VERSION`: saves VERSION itself; answers `saved`.

MODE is `inline` (one file), `external` (a data file beside the model) or
`together` (`save_together`: `m.onnx` and `n.onnx` sharing one data file).
Forking from this single-threaded process keeps each kill cheap, so the
test can afford hundreds of them.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.ir.core import Builder, TensorType
from linnet.onnx import export_ir, save_together
from linnet.onnx.export.result import ExportedModel

WIDTH = 384
"""Two f32 weights of WIDTH x WIDTH: about 1.2 MB to write per save."""


def weights(version: int) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(version)
    return {
        "w1": rng.normal(size=(WIDTH, WIDTH)).astype(np.float32),
        "w2": rng.normal(size=(WIDTH, WIDTH)).astype(np.float32),
    }


def exported(version: int, arrays: dict[str, np.ndarray[Any, Any]] | None = None) -> ExportedModel:
    """x @ w1 @ w2 with the weights of `version` (or `arrays`)."""
    b = Builder.for_function([("x", TensorType((2, WIDTH), "f32"))])
    w1 = b.param("w1", TensorType((WIDTH, WIDTH), "f32"))
    w2 = b.param("w2", TensorType((WIDTH, WIDTH), "f32"))
    h = b.contract(b.args[0], w1, lhs_contract=[1], rhs_contract=[0])
    out = b.contract(h, w2, lhs_contract=[1], rhs_contract=[0])
    return export_ir(b.finish_function("mm", [out]), weights=arrays or weights(version))


def _pair(version: int) -> dict[str, ExportedModel]:
    """Two entries exported from the same arrays: `save_together` writes them once."""
    arrays = weights(version)
    return {"m": exported(version, arrays), "n": exported(version, arrays)}


PAIRS = {1: _pair(1), 2: _pair(2)}
"""Never saved alone, so their weights stay pending (`save` inline would put them in)."""


def _save(models: dict[int, ExportedModel], folder: Path, mode: str, version: int) -> None:
    if mode == "together":  # m.onnx and n.onnx, one shared data file
        save_together(PAIRS[version], folder / mode)
        return
    target = folder / mode / "m.onnx"
    models[version].save(target, external_data=mode == "external")


def _fork(run: Callable[[], int]) -> int:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 4
        try:
            code = run()
        finally:
            os._exit(code)
    return pid


def _forever(models: dict[int, ExportedModel], folder: Path, mode: str) -> int:
    while True:
        for version in (1, 2):
            _save(models, folder, mode, version)


def _starved(
    models: dict[int, ExportedModel], folder: Path, mode: str, version: int, limit: int
) -> int:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        _save(models, folder, mode, version)
    except LinnetError as exc:
        named = f"`{folder / mode}/" in str(exc) and "File too large" in str(exc)
        return 3 if named else 4
    return 0


def main(folder: Path) -> None:
    models = {1: exported(1), 2: exported(2)}
    for line in sys.stdin:
        command, mode, *rest = line.split()
        if command == "loop":
            pid = _fork(partial(_forever, models, folder, mode))
            print(f"pid {pid}", flush=True)
            _, status = os.waitpid(pid, 0)
            print(f"reaped {status}", flush=True)
        elif command == "fsize":
            run = partial(_starved, models, folder, mode, int(rest[0]), int(rest[1]))
            _, status = os.waitpid(_fork(run), 0)
            print(f"status {os.waitstatus_to_exitcode(status)}", flush=True)
        elif command == "save":
            _save(models, folder, mode, int(rest[0]))
            print("saved", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
