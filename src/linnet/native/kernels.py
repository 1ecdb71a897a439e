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
from collections.abc import Sequence
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
        self._int8_many = lib.linnet_int8_linear_many
        self._int8_many.argtypes = [_P, _I, _I, _P, _I, ctypes.c_int]
        self._int8_many.restype = ctypes.c_int
        self._int4_many = lib.linnet_int4_linear_many
        self._int4_many.argtypes = [_P, _I, _I, _I, _P, _I, ctypes.c_int]
        self._int4_many.restype = ctypes.c_int
        self._int8_a8_many = lib.linnet_int8_linear_a8_many
        self._int8_a8_many.argtypes = [_P, _I, _I, _I, _P, _I, ctypes.c_int]
        self._int8_a8_many.restype = ctypes.c_int
        self._int4_a8_many = lib.linnet_int4_linear_a8_many
        self._int4_a8_many.argtypes = [_P, _I, _I, _I, _P, _I, ctypes.c_int]
        self._int4_a8_many.restype = ctypes.c_int
        self._f32_many = lib.linnet_f32_linear_many
        self._f32_many.argtypes = [_P, _I, _I, _P, _I, ctypes.c_int]
        self._f32_many.restype = ctypes.c_int
        self._rms_norm = lib.linnet_rms_norm
        self._rms_norm.argtypes = [_P, _I, _I, _P, ctypes.c_float, _P]
        self._rms_norm.restype = ctypes.c_int
        self._rope = lib.linnet_rope
        self._rope.argtypes = [_P, _I, _I, _I, _P, _P, _P]
        self._rope.restype = ctypes.c_int
        self._attention = lib.linnet_attention
        self._attention.argtypes = [_P, _P, _P, _P, _I, _I, _I, _I, _I, _I, ctypes.c_float, _P]
        self._attention.restype = ctypes.c_int
        self._write_span = lib.linnet_write_span
        self._write_span.argtypes = [_P, _P, _I, _I, _I, _I, _I, _I, _I]
        self._write_span.restype = ctypes.c_int
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

    def int8_linear_many(
        self, x: int, rows: int, into: int, members: Sequence[Member], threads: int = 0
    ) -> None:
        """`int8_linear` for each member (`q`, `scale`, bias or None, y, out) on the one `x`,
        in one parallel region; each y bitwise as its own `int8_linear` call gives."""
        table = _members(members)
        self._check(self._int8_many(x, rows, into, table, len(members), threads), into, 0)

    def int4_linear_many(
        self, x: int, rows: int, into: int, group: int, members: Sequence[Member],
        threads: int = 0,
    ) -> None:  # fmt: skip
        """`int4_linear` for each member (`packed`, `scale`, `zero`, bias or None, y, out), all
        with groups of `group`, on the one `x`, in one parallel region (bitwise as alone)."""
        code = self._int4_many(x, rows, into, group, _members(members), len(members), threads)
        self._check(code, into, group)

    def int8_linear_a8_many(
        self, x: int, rows: int, into: int, block: int, members: Sequence[Member],
        threads: int = 0,
    ) -> None:  # fmt: skip
        """`int8_linear_a8` for each member (`q`, `scale`, 0, bias or None, y, out) on the one
        `x`, rounded to int8 once, in one parallel region (each y bitwise as alone)."""
        code = self._int8_a8_many(x, rows, into, block, _members(members), len(members), threads)
        _check(code, f"1 to {MANY} members, and a block ({block}) of 16 or more dividing {into}")

    def int4_linear_a8_many(
        self, x: int, rows: int, into: int, group: int, members: Sequence[Member],
        threads: int = 0,
    ) -> None:  # fmt: skip
        """`int4_linear_a8` for each member (as `int4_linear_many`'s) on the one `x`, rounded
        to int8 once, in one parallel region (each y bitwise as alone)."""
        code = self._int4_a8_many(x, rows, into, group, _members(members), len(members), threads)
        self._check(code, into, group)

    def f32_linear_many(
        self, x: int, rows: int, into: int, members: Sequence[Member], threads: int = 0
    ) -> None:
        """`f32_linear` for each member (`w`, 0, 0, bias or None, y, out) on the one `x`, in
        one parallel region (bitwise as alone)."""
        table = _members(members)
        self._check(self._f32_many(x, rows, into, table, len(members), threads), into, 0)

    def rms_norm(self, x: int, rows: int, h: int, weight: int, eps: float, y: int) -> None:
        """`std.nn.norm::rms_norm` in f32 on `x[rows, h]`, `weight[h]` into `y[rows, h]`."""
        if self._rms_norm(x, rows, h, weight, eps, y) != 0:
            raise ValueError(f"linnet.native: rms_norm over {h} values")

    def rope(self, x: int, rows: int, positions: int, d: int, cos: int, sin: int, y: int) -> None:
        """`std.nn.rope::rope` on `x[rows, positions, d]`, tables `[positions, d]`, into `y`."""
        if self._rope(x, rows, positions, d, cos, sin, y) != 0:
            raise ValueError(f"linnet.native: rope over {d} values (must be even)")

    def attention(
        self, q: int, k: int, v: int, mask: int | None, batch: int, heads: int, kv_heads: int,
        queries: int, keys: int, d: int, scale: float, y: int,
    ) -> None:  # fmt: skip
        """`std.nn.attention::grouped_attention` on q `[batch, heads, queries, d]`, k and v
        `[batch, kv_heads, keys, d]`, a boolean mask `[queries, keys]` (None: none), into y."""
        code = self._attention(q, k, v, mask, batch, heads, kv_heads, queries, keys, d, scale, y)
        if code == 2:
            raise MemoryError("linnet.native: no memory for the attention weights")
        if code != 0:
            raise ValueError(f"linnet.native: {heads} heads over {kv_heads} key/value heads")

    def write_span(
        self, cache: int, value: int, rows: int, size: int, count: int, width: int, low: int,
        high: int, start: int,
    ) -> None:  # fmt: skip
        """Positions `[low, high)` of each row of `cache[rows, size]` take positions `[low -
        start, high - start)` of `value[rows, count]`, `width` bytes a position."""
        if self._write_span(cache, value, rows, size, count, width, low, high, start) != 0:
            raise ValueError(f"linnet.native: positions {low}..{high} from {start}")

    @staticmethod
    def _check(code: int, into: int, group: int) -> None:
        if code == 2:
            raise MemoryError("linnet.native: no memory for the rows of x")
        if code != 0:
            raise ValueError(
                f"linnet.native: 1 to {MANY} members, and a group ({group}) that divides "
                f"{into} and is even"
            )


MANY = 16
"""Most members of one `*_many` call (`MANY` in kernels.c)."""

Member = tuple[int, int, int, int | None, int, int]
"""Addresses of one linear of a `*_many` call: weight, scale (0 for f32), zero points (0 but
for int4), bias (None: none), y; then its output rows."""


def _members(members: Sequence[Member]) -> ctypes.Array[ctypes.c_int64]:
    """The C `linnet_member` array: six 8-byte slots per member, addresses and `out`."""
    slots = [0 if a is None else a for member in members for a in member]
    return (ctypes.c_int64 * len(slots))(*slots)


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
