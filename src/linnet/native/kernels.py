"""The typed ctypes binding of `kernels.c`: one-row linears on packed int8 / int4 / f32 weights.

Stage: run time, below a backend (`linnet.torch.natives_quant`). Input: raw
addresses of C-contiguous arrays and their sizes; output: the kernel's status
(0 when it ran). The callers own the arrays and check dtypes, shapes and
contiguity; this module only loads the library and declares each function's
C signature, so a wrong argument count or type is a Python error, not a crash.

`kernels()` builds or finds the library once per process (`build.build`) and
keeps it; on any failure it returns None and `status()` says why, so a model
load never raises here: the caller keeps its portable path. `LINNET_NATIVE=0`
turns the kernels off (`status()` then says so).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from linnet.native.build import VARIANTS, BuildFailed, build
from linnet.records import record

_P = ctypes.c_void_p
_I = ctypes.c_int64


@record(frozen=True)
class Status:
    """What `kernels()` found: `available`, and either the library or the reason it is not."""

    available: bool
    reason: str
    path: str = ""
    """The vector path compiled in: `avx512`, `avx2` or `scalar`."""
    library: Path | None = None
    compile_seconds: float = 0.0
    threads: int = 0
    """OpenMP threads a kernel call may use now (torch's `get_num_threads` once torch loaded)."""


class Kernels:
    """The loaded library, its functions declared."""

    def __init__(self, library: Path) -> None:
        self.library = library
        lib = ctypes.CDLL(str(library))
        self._int8 = lib.linnet_int8_linear
        self._int8.argtypes = [_P, _I, _I, _P, _P, _P, _P, _I, ctypes.c_int]
        self._int8.restype = ctypes.c_int
        self._int4 = lib.linnet_int4_linear
        self._int4.argtypes = [_P, _I, _I, _P, _P, _P, _I, _P, _P, _I, ctypes.c_int]
        self._int4.restype = ctypes.c_int
        self._f32 = lib.linnet_f32_linear
        self._f32.argtypes = [_P, _I, _I, _P, _P, _P, _I, ctypes.c_int]
        self._f32.restype = ctypes.c_int
        self._int8_a8 = lib.linnet_int8_linear_a8
        self._int8_a8.argtypes = [_P, _I, _I, _P, _P, _I, _P, _P, _I, ctypes.c_int]
        self._int8_a8.restype = ctypes.c_int
        self._int4_a8 = lib.linnet_int4_linear_a8
        self._int4_a8.argtypes = [_P, _I, _I, _P, _P, _P, _I, _P, _P, _I, ctypes.c_int]
        self._int4_a8.restype = ctypes.c_int
        self._quantise_a8 = lib.linnet_quantise_a8
        self._quantise_a8.argtypes = [_P, _I, _I, _I, _P, _P]
        self._quantise_a8.restype = ctypes.c_int
        a8_path = lib.linnet_native_a8_path
        a8_path.restype = ctypes.c_char_p
        self.a8_path = str(a8_path().decode())
        """The int8-activation kernels' path: `avx512-vnni`, `avx2`, or `plain` (C on the same
        integers)."""
        path = lib.linnet_native_path
        path.restype = ctypes.c_char_p
        self.path = str(path().decode())
        self._threads = lib.linnet_native_threads
        self._threads.restype = ctypes.c_int

    def threads(self) -> int:
        return int(self._threads())

    def int8_linear(
        self,
        x: int,
        rows: int,
        into: int,
        q: int,
        scale: int,
        bias: int | None,
        y: int,
        out: int,
        threads: int = 0,
    ) -> None:
        """`y[rows, out] = (x[rows, into] @ f32(q[out, into])^T) * scale[out] (+ bias)`.

        `threads`: at most this many OpenMP threads (0: OpenMP's default)."""
        self._int8(x, rows, into, q, scale, bias, y, out, threads)

    def int4_linear(
        self,
        x: int,
        rows: int,
        into: int,
        packed: int,
        scale: int,
        zero: int,
        group: int,
        bias: int | None,
        y: int,
        out: int,
        threads: int = 0,
    ) -> None:
        """`std.quant::linear_int4_groups` on `packed[out, into / group, group / 2]` (u8),
        `scale[out, into / group]` (f32), `zero[out, into / group]` (u8)."""
        code = self._int4(x, rows, into, packed, scale, zero, group, bias, y, out, threads)
        if code == 2:
            raise MemoryError("linnet.native: no memory for the rows of x")
        if code != 0:
            raise ValueError(f"linnet.native: group {group} does not divide {into} or is odd")

    def int8_linear_a8(
        self,
        x: int,
        rows: int,
        into: int,
        q: int,
        scale: int,
        block: int,
        bias: int | None,
        y: int,
        out: int,
        threads: int = 0,
    ) -> None:
        """`int8_linear` with x rounded to int8 per `block` inputs (kernels.c, "int8
        activations"): `y = scale[o] * sum_blocks scale_a * (q_a . q)` (+ bias)."""
        code = self._int8_a8(x, rows, into, q, scale, block, bias, y, out, threads)
        _check(code, f"block {block} does not divide {into} or is under 16")

    def int4_linear_a8(
        self,
        x: int,
        rows: int,
        into: int,
        packed: int,
        scale: int,
        zero: int,
        group: int,
        bias: int | None,
        y: int,
        out: int,
        threads: int = 0,
    ) -> None:
        """`int4_linear` with x rounded to int8 per group (kernels.c, "int8 activations"):
        `y = sum_g scale[o, g] * scale_a[g] * (q_a . n - zero[o, g] * sum q_a)` (+ bias)."""
        code = self._int4_a8(x, rows, into, packed, scale, zero, group, bias, y, out, threads)
        _check(code, f"group {group} does not divide {into} or is odd")

    def quantise_a8(self, x: int, rows: int, into: int, block: int, q: int, scale: int) -> None:
        """The int8 activations the `_a8` kernels multiply: `q[rows, into]` (i8) and
        `scale[rows, into / block]` (f32)."""
        _check(self._quantise_a8(x, rows, into, block, q, scale), f"block {block}")

    def f32_linear(
        self,
        x: int,
        rows: int,
        into: int,
        w: int,
        bias: int | None,
        y: int,
        out: int,
        threads: int = 0,
    ) -> None:
        """`y[rows, out] = x[rows, into] @ w[out, into]^T (+ bias)`."""
        self._f32(x, rows, into, w, bias, y, out, threads)


def _check(code: int, shape: str) -> None:
    if code == 2:
        raise MemoryError("linnet.native: no memory for the rows of x")
    if code != 0:
        raise ValueError(f"linnet.native: {shape}")


_loaded: dict[str, Kernels | None] = {}
_status: dict[str, Status] = {}


def enabled() -> bool:
    return os.environ.get("LINNET_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def kernels(variant: str = "native") -> Kernels | None:
    """The library (built on first use), or None when disabled or unbuildable (`status`).

    `variant`: `native` (what the models use), `avx2` or `scalar` (the other compiled paths,
    for tests on a CPU that has AVX-512)."""
    if variant in _loaded:
        return _loaded[variant]
    found: Kernels | None = None
    if not enabled():
        _status[variant] = Status(False, "disabled by LINNET_NATIVE=0")
    else:
        try:
            built = build(VARIANTS[variant])
            found = Kernels(built.path)
            _status[variant] = Status(
                True, "", found.path, built.path, built.seconds, found.threads()
            )
        except BuildFailed as exc:
            _status[variant] = Status(False, str(exc))
        except OSError as exc:  # the library would not load
            _status[variant] = Status(False, f"cannot load the compiled kernels: {exc}")
    _loaded[variant] = found
    return found


def status(variant: str = "native") -> Status:
    """Whether the kernels are available, and why not (builds them if not tried yet)."""
    found = kernels(variant)
    if found is not None:
        now = _status[variant]
        return Status(True, "", now.path, now.library, now.compile_seconds, found.threads())
    return _status[variant]


def forget() -> None:
    """Drop what `kernels()` found, so the next call looks again (tests)."""
    _loaded.clear()
    _status.clear()
