"""Native-kernel substitutions equal the canonical bodies of the std ops they replace.

Each case lowers a module-level entry that calls one std op, then runs it three
ways: the NumPy interpreter (the canonical body, the oracle), the backend with
natives off (the body on torch) and with natives on (the kernel in
`linnet.torch.natives`), interpreted and generated. The test also checks that
the native really was chosen, so a silently declined substitution fails.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from torch_support import CPU, MODES
from torch_support import check as compare

from linnet.ir.core import Function, TensorType, numpy_dtype
from linnet.ir.lower import lower_function
from linnet.ir.passes import optimize
from linnet.pipeline import check_program
from linnet.torch.analysis import walk
from linnet.torch.natives import find_native
from linnet.torch.ops import Context

SOURCE = """module native_cases

use std.nn.activations::{gelu, relu, sigmoid, silu}
use std.nn.attention::{
    attention,
    causal_mask,
    grouped_attention,
    packed_mask,
}
use std.nn.cache::{write_at, write_rows, write_slots, write_span}
use std.nn.linear::{linear}
use std.nn.norm::{batch_norm, group_norm, layer_norm, rms_norm}
use std.nn.rope::{rope}
use std.nn.softmax::{softmax}
use std.quant::{linear_fp8, linear_int4_groups, linear_int8, linear_mxfp4}

pub entry dense<*S: Shape, I: Dim, O: Dim, T: Float>(x: Tensor[*S, I; T], w: Tensor[O, I; T]) -> Tensor[*S, O; T] {
    return linear(x, w)
}

pub entry dense_bias<*S: Shape, I: Dim, O: Dim, T: Float>(x: Tensor[*S, I; T], w: Tensor[O, I; T], b: Tensor[O; T]) -> Tensor[*S, O; T] {
    return linear(x, w, some(b))
}

pub entry norm<*S: Shape, H: Dim, T: Float>(x: Tensor[*S, H; T], w: Tensor[H; T]) -> Tensor[*S, H; T] {
    return rms_norm(x, w, 1e-6)
}

pub entry layer<*S: Shape, H: Dim, T: Float>(x: Tensor[*S, H; T], w: Tensor[H; T], b: Tensor[H; T]) -> (Tensor[*S, H; T], Tensor[*S, H; T]) {
    return (layer_norm(x, w, some(b), 1e-6), layer_norm(x, w))
}

pub entry batch<B: Dim, C: Dim, H: Dim, W: Dim, T: Float>(
    x: Tensor[B, C, H, W; T], m: Tensor[C; T], v: Tensor[C; T], w: Tensor[C; T], b: Tensor[C; T],
) -> Tensor[B, C, H, W; T] {
    return batch_norm(x, m, v, w, b, 1e-3)
}

pub entry groups<B: Dim, C: Dim, H: Dim, W: Dim, T: Float>(
    x: Tensor[B, C, H, W; T], w: Tensor[C; T], b: Tensor[C; T],
) -> Tensor[B, C, H, W; T]
where C % 3 == 0 {
    return group_norm<B, C, H, W, 3, T>(x, w, b, 1e-6)
}

pub entry curves<*S: Shape, T: Float>(x: Tensor[*S; T]) -> (Tensor[*S; T], Tensor[*S; T]) {
    return (gelu(x), relu(x))
}

pub entry soft<*S: Shape, N: Dim, T: Float>(x: Tensor[*S, N; T]) -> Tensor[*S, N; T] {
    return softmax(x)
}

pub entry gates<*S: Shape, T: Float>(x: Tensor[*S; T]) -> (Tensor[*S; T], Tensor[*S; T]) {
    return (silu(x), sigmoid(x))
}

pub entry plain<B: Dim, H: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T], k: Tensor[B, H, K, D; T], v: Tensor[B, H, K, D; T],
) -> Tensor[B, H, Q, D; T] {
    return attention(q, k, v, rsqrt(cast<f32>(D)))
}

pub entry causal<B: Dim, H: Dim, Hk: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T], k: Tensor[B, Hk, K, D; T], v: Tensor[B, Hk, K, D; T],
) -> Tensor[B, H, Q, D; T]
where Hk > 0, H % Hk == 0 {
    return grouped_attention(q, k, v, 0.25, some(causal_mask<Q, K>()))
}

pub entry spans<B: Dim, H: Dim, S: Dim, N: Dim, D: Dim>(
    cache: Tensor[B, H, S, D; f32], value: Tensor[B, H, N, D; f32],
) -> (Tensor[B, H, S, D; f32], Tensor[B, H, S, D; f32], Tensor[B, H, S, D; f32], Tensor[B, H, S, D; f32])
where S > 0, N > 0 {
    return (write_span(cache, value, 0), write_span(cache, value, 3), write_span(cache, value, -2),
            write_span(cache, value, 9))
}

pub entry rotary<B: Dim, H: Dim, S: Dim, D: Dim, T: Float>(
    x: Tensor[B, H, S, D; T], cos_table: Tensor[S, D; T], sin_table: Tensor[S, D; T],
) -> Tensor[B, H, S, D; T]
where D % 2 == 0 {
    return rope(x, cos_table, sin_table)
}

pub entry span_at<B: Dim, H: Dim, S: Dim, N: Dim, D: Dim>(
    cache: Tensor[B, H, S, D; f32], value: Tensor[B, H, N, D; f32], at: i32,
) -> Tensor[B, H, S, D; f32]
where S > 0, N > 0 {
    return write_span(cache, value, at)
}

pub entry rows<B: Dim, H: Dim, S: Dim, D: Dim>(
    cache: Tensor[B, H, S, D; f32], value: Tensor[B, H, 1, D; f32], at: Tensor[B; i32],
) -> Tensor[B, H, S, D; f32]
where S > 0 {
    return write_rows(cache, value, at)
}

pub entry slotted<B: Dim, H: Dim, S: Dim, M: Dim, N: Dim, D: Dim>(
    cache: Tensor[B, H, S, D; f32], value: Tensor[M, H, N, D; f32], slots: Tensor[M; i32],
) -> (Tensor[B, H, S, D; f32], Tensor[B, H, S, D; f32], Tensor[B, H, S, D; f32])
where S > 0, N > 0, M > 0 {
    return (write_slots(cache, value, slots, 0), write_slots(cache, value, slots, 4),
            write_slots(cache, value, slots, -1))
}

pub entry write_one<B: Dim, H: Dim, S: Dim, D: Dim>(
    cache: Tensor[B, H, S, D; f32], value: Tensor[B, H, 1, D; f32], at: i32,
) -> Tensor[B, H, S, D; f32]
where S > 0 {
    return write_at(cache, value, at)
}

pub entry int8_linear<*S: Shape, In: Dim, Out: Dim, T: Float>(
    x: Tensor[*S, In; T], q: Tensor[Out, In; i8], scale: Tensor[Out; f32], bias: Tensor[Out; T],
) -> (Tensor[*S, Out; T], Tensor[*S, Out; T]) {
    return (linear_int8(x, q, scale, none), linear_int8(x, q, scale, some(bias)))
}

pub entry int4_linear<*S: Shape, Out: Dim, G: Dim, Half: Dim, T: Float>(
    x: Tensor[*S, G * (2 * Half); T], packed: Tensor[Out, G, Half; u8], scale: Tensor[Out, G; T],
    zero: Tensor[Out, G; u8], bias: Tensor[Out; T],
) -> (Tensor[*S, Out; T], Tensor[*S, Out; T]) {
    return (
        linear_int4_groups(x, packed, scale, zero, none),
        linear_int4_groups(x, packed, scale, zero, some(bias)),
    )
}

pub entry fp8_linear<*S: Shape, In: Dim, Out: Dim, T: Float>(
    x: Tensor[*S, In; T], q: Tensor[Out, In; u8], scale: Tensor[Out, 1; f32], bias: Tensor[Out; T],
) -> (Tensor[*S, Out; T], Tensor[*S, Out; T]) {
    return (linear_fp8(x, q, scale, none), linear_fp8(x, q, scale, some(bias)))
}

pub entry mxfp4_linear<*S: Shape, Out: Dim, G: Dim, T: Float>(
    x: Tensor[*S, G * 32; T], blocks: Tensor[Out, G, 16; u8], scales: Tensor[Out, G; u8],
    bias: Tensor[Out; T],
) -> (Tensor[*S, Out; T], Tensor[*S, Out; T]) {
    return (linear_mxfp4(x, blocks, scales, none), linear_mxfp4(x, blocks, scales, some(bias)))
}

pub entry packed<B: Dim, H: Dim, Hk: Dim, P: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, P, D; T],
    k: Tensor[B, Hk, P, D; T],
    v: Tensor[B, Hk, P, D; T],
    segments: Tensor[P; i32],
) -> Tensor[B, H, P, D; T]
where
    Hk > 0,
    H % Hk == 0
{
    return grouped_attention(q, k, v, 0.25, some(packed_mask(segments)))
}

pub entry masked<B: Dim, H: Dim, Hk: Dim, Q: Dim, K: Dim, D: Dim, T: Float>(
    q: Tensor[B, H, Q, D; T], k: Tensor[B, Hk, K, D; T], v: Tensor[B, Hk, K, D; T],
    mask: Tensor[Q, K; bool], scale: f32,
) -> Tensor[B, H, Q, D; T]
where Hk > 0, H % Hk == 0 {
    return grouped_attention(q, k, v, scale, some(mask))
}
"""


@pytest.fixture(scope="module")
def program():  # type: ignore[no-untyped-def]
    return check_program(SOURCE)


def lowered(program, name: str, arrays: list[np.ndarray], dtypes: list[str]) -> Function:  # type: ignore[no-untyped-def]
    types = [TensorType(a.shape, d) for a, d in zip(arrays, dtypes, strict=True)]
    return optimize(lower_function(program, "native_cases", name, types))


def natives_in(fn: Function) -> list[str]:
    context = Context.of(walk(fn.body), CPU)
    return [
        str(op.attrs["callee"])
        for op in walk(fn.body)
        if op.kind == "call" and find_native(op, context) is not None
    ]


def data(key: object, dtype: str, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(repr(key).encode()))
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    return (scale * rng.standard_normal(shape)).astype(numpy_dtype(dtype))


def run_case(program, name: str, arrays: list[np.ndarray], dtypes: list[str],  # type: ignore[no-untyped-def]
             expect: str, scale: float = 1.0) -> None:  # fmt: skip
    fn = lowered(program, name, arrays, dtypes)
    assert expect in natives_in(fn), f"{expect} was not substituted in {name}"
    for mode in MODES:
        native = compare(fn, arrays, mode, scale=scale)
        body = compare(fn, arrays, mode, scale=scale, natives=False)
        for a, b, v in zip(native, body, fn.results, strict=True):
            tol = {"f32": 2e-5, "f64": 1e-12, "bf16": 2e-2, "f16": 4e-3}[v.type.dtype] * scale
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64),
                                       rtol=tol, atol=tol)  # fmt: skip


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f64"])
def test_linear(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    x, w, b = data(1, dtype, (2, 3, 8)), data(2, dtype, (5, 8)), data(3, dtype, (5,))
    scale = 4.0 if dtype == "bf16" else 1.0
    run_case(program, "dense", [x, w], [dtype] * 2, "std.nn.linear::linear", scale)
    run_case(program, "dense_bias", [x, w, b], [dtype] * 3, "std.nn.linear::linear", scale)
    run_case(program, "dense", [x[0, 0], w], [dtype] * 2, "std.nn.linear::linear", scale)


def test_cpu_linear_keeps_autograd() -> None:
    """`linear_cpu` (oneDNN, f32/bf16 on the CPU) equals `F.linear` within f32 rounding
    under no_grad; with gradients on it is `F.linear` bit for bit (a training run computes
    what PyTorch eager does, recorded or not), so gradients still flow."""
    import torch
    import torch.nn.functional as F

    from linnet.torch import natives

    if not natives.onednn_linear_available():
        pytest.skip("this torch build has no oneDNN linear")
    x, w, b = torch.randn(3, 1, 16), torch.randn(8, 16), torch.randn(8)
    with torch.no_grad():
        torch.testing.assert_close(natives.linear_cpu(x, w, b), F.linear(x, w, b))
    assert torch.equal(natives.linear_cpu(x, w, b), F.linear(x, w, b))
    leaf = x.clone().requires_grad_()
    natives.linear_cpu(leaf, w, b).sum().backward()
    assert leaf.grad is not None
    torch.testing.assert_close(leaf.grad, w.sum(0).expand_as(x))


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f64"])
def test_rms_norm(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    x, w = data(4, dtype, (3, 4, 16), 3.0), data(5, dtype, (16,))
    # f64 inputs are normalised in f32 by the canonical body, so f32 accuracy applies.
    run_case(program, "norm", [x, w], [dtype] * 2, "std.nn.norm::rms_norm",
             1e7 if dtype == "f64" else 1.0)  # fmt: skip


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_softmax_silu_sigmoid(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    x = data(6, dtype, (4, 7), 3.0)
    run_case(program, "soft", [x], [dtype], "std.nn.softmax::softmax")
    run_case(program, "gates", [x], [dtype], "std.nn.activations::silu")
    run_case(program, "gates", [x], [dtype], "std.nn.activations::sigmoid")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_attention_without_mask(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    q, k, v = (
        data(7, dtype, (2, 3, 5, 8)),
        data(8, dtype, (2, 3, 6, 8)),
        data(9, dtype, (2, 3, 6, 8)),
    )
    run_case(program, "plain", [q, k, v], [dtype] * 3, "std.nn.attention::attention")


@pytest.mark.parametrize("shape", [(5, 5), (3, 7), (1, 6)])
def test_grouped_causal_attention(program, shape: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    """causal_mask<Q, Q> becomes is_causal; a bottom-right mask with Q < K stays a mask."""
    q_len, k_len = shape
    q = data(10, "f32", (1, 4, q_len, 8))
    k, v = data(11, "f32", (1, 2, k_len, 8)), data(12, "f32", (1, 2, k_len, 8))
    run_case(program, "causal", [q, k, v], ["f32"] * 3, "std.nn.attention::grouped_attention")


@pytest.mark.parametrize("length", [5, 1])
def test_masked_attention_with_empty_rows_and_runtime_scale(program, length: int) -> None:  # type: ignore[no-untyped-def]
    """A fully masked row averages the values (-1e30 scores), as the canonical body does;
    grouped heads are folded into the query axis (one query: a decode step)."""
    q = data(13, "f32", (2, 4, length, 8))
    k, v = data(14, "f32", (2, 2, 6, 8)), data(15, "f32", (2, 2, 6, 8))
    mask = data(16, "bool", (length, 6))
    mask[length // 2] = False  # one query with no key at all
    if length > 1:
        mask[-1, 0] = True
    scale = np.array(0.3, np.float32)
    arrays = [q, k, v, mask, scale]
    dtypes = ["f32", "f32", "f32", "bool", "f32"]
    run_case(program, "masked", arrays, dtypes, "std.nn.attention::grouped_attention")


PACKINGS = {
    "unequal": [0, 0, 0, 1, 1, 2, 2, 2, 2],  # three runs batched through the causal path
    "equal": [0, 0, 1, 1, 2, 2],
    "scattered": [0, 1, 0, 1, 1],  # not contiguous: the mask as it is
    "one": [4, 4, 4, 4],  # plain causal
    "lopsided": [0, 0, 0, 0, 0, 0, 0, 1],  # 2 runs x 7^2 > 8^2: the mask as it is
}


@pytest.mark.parametrize("packing", sorted(PACKINGS))
def test_packed_attention(program, packing: str) -> None:  # type: ignore[no-untyped-def]
    """Each packed sequence attends alone (natives.packed_attention) or, where that is
    no cheaper, under the mask; either way equal to the canonical body."""
    segments = np.array(PACKINGS[packing], np.int32)
    length = len(segments)
    q = data(40, "f32", (2, 4, length, 8))
    k, v = data(41, "f32", (2, 2, length, 8)), data(42, "f32", (2, 2, length, 8))
    arrays, dtypes = [q, k, v, segments], ["f32"] * 3 + ["i32"]
    run_case(program, "packed", arrays, dtypes, "std.nn.attention::grouped_attention")


def test_packed_attention_gradients() -> None:
    import torch

    from linnet.torch import natives

    g = torch.Generator().manual_seed(0)
    segments = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    index = torch.arange(9)
    mask = (index[None, :] <= index[:, None]) & (segments[None, :] == segments[:, None])
    q = torch.randn(1, 4, 9, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 2, 9, 8, generator=g, dtype=torch.float64, requires_grad=True)
            for _ in range(2))  # fmt: skip
    upstream = torch.randn(1, 4, 9, 8, generator=g, dtype=torch.float64)
    ours = natives.packed_attention(q, k, v, 0.25, mask, torch.float64)
    plain = natives.attention(q, k, v, 0.25, mask, False, torch.float64)
    torch.testing.assert_close(ours, plain, rtol=1e-6, atol=1e-6)  # both compute in f32
    mine = torch.autograd.grad((ours * upstream).sum(), (q, k, v))
    theirs = torch.autograd.grad((plain * upstream).sum(), (q, k, v))
    for a, b in zip(mine, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("at", [0, 3, 5, -1, 6, 100])
def test_write_at(program, at: int) -> None:  # type: ignore[no-untyped-def]
    """One row replaced; a position outside the cache writes nothing."""
    cache, value = data(19, "f32", (2, 3, 6, 4)), data(20, "f32", (2, 3, 1, 4))
    arrays = [cache, value, np.array(at, np.int32)]
    run_case(program, "write_one", arrays, ["f32", "f32", "i32"], "std.nn.cache::write_at")


def test_write_rows(program) -> None:  # type: ignore[no-untyped-def]
    """Each row at its own position; positions outside the cache write nothing."""
    cache, value = data(21, "f32", (4, 3, 6, 4)), data(22, "f32", (4, 3, 1, 4))
    at = np.array([0, 5, -1, 6], np.int32)
    run_case(program, "rows", [cache, value, at], ["f32", "f32", "i32"], "std.nn.cache::write_rows")


@pytest.mark.parametrize("slots", [[2, 0], [3, -1], [-2, 4], [1]])
def test_write_slots_at_constant_positions(program, slots: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Listed rows written from 0, from inside, and from before the cache; slots outside
    the rows write nothing."""
    cache, value = data(23, "f32", (4, 3, 6, 4)), data(24, "f32", (len(slots), 3, 3, 4))
    arrays = [cache, value, np.array(slots, np.int32)]
    run_case(program, "slotted", arrays, ["f32", "f32", "i32"], "std.nn.cache::write_slots")


@pytest.mark.parametrize("span", [2, 4, 7])
def test_write_span_at_constant_positions(program, span: int) -> None:  # type: ignore[no-untyped-def]
    """Spans inside, overlapping either end of, and past the cache (nothing written)."""
    cache, value = data(17, "f32", (2, 3, 6, 4)), data(18, "f32", (2, 3, span, 4))
    run_case(program, "spans", [cache, value], ["f32", "f32"], "std.nn.cache::write_span")


@pytest.mark.parametrize("length", [1, 3])
def test_attention_skips_the_keys_no_row_keeps(program, length: int) -> None:  # type: ignore[no-untyped-def]
    """A decode step's mask keeps the positions written so far: the keys after the last
    kept one are left out of SDPA (on the CPU), the fix-up still averages all values."""
    q = data(53, "f32", (1, 4, length, 8))
    k, v = data(54, "f32", (1, 2, 9, 8)), data(55, "f32", (1, 2, 9, 8))
    mask = np.zeros((length, 9), bool)
    mask[:, :4] = data(56, "bool", (length, 4))
    mask[0, 3] = True
    if length > 1:
        mask[-1] = False  # an empty row as well
    arrays = [q, k, v, mask, np.array(0.3, np.float32)]
    dtypes = ["f32", "f32", "f32", "bool", "f32"]
    run_case(program, "masked", arrays, dtypes, "std.nn.attention::grouped_attention")


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f64"])
def test_rope_is_the_body_bit_for_bit(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    """`roll(x) * sin'` (the sign moved into the table) gives the body's products exactly."""
    arrays = [data(38, dtype, (2, 3, 5, 8)), data(39, dtype, (5, 8)), data(40, dtype, (5, 8))]
    run_case(program, "rotary", arrays, [dtype] * 3, "std.nn.rope::rope")
    fn = lowered(program, "rotary", arrays, [dtype] * 3)
    for mode in MODES:
        native = compare(fn, arrays, mode)
        body = compare(fn, arrays, mode, natives=False)
        assert all(np.array_equal(a, b) for a, b in zip(native, body, strict=True))


@pytest.mark.parametrize("c_loops", [False, True])
def test_tables_derived_once_follow_in_place_changes(
    c_loops: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mask, sin table or positions changed in place after a call are derived again
    (`Derived`), on the aten paths and on `linnet.native`'s C loops for decode rows
    (`natives_cpu`, which derive nothing; their mean of the values sums in another order)."""
    import torch

    from linnet.torch import natives

    if not c_loops:
        monkeypatch.setattr(natives, "native_attention", lambda *_: None)
        monkeypatch.setattr(natives, "native_rope", lambda *_: None)

    q = torch.from_numpy(data(41, "f32", (1, 4, 1, 8)))
    k, v = (torch.from_numpy(data(key, "f32", (1, 2, 6, 8))) for key in (42, 43))
    mask = torch.ones(1, 6, dtype=torch.bool)
    natives.attention(q, k, v, 0.5, mask, False, torch.float32)
    mask[0, 2:] = False
    fresh = natives.attention(q, k, v, 0.5, mask.clone(), False, torch.float32)
    assert torch.equal(natives.attention(q, k, v, 0.5, mask, False, torch.float32), fresh)
    mask[0] = False  # no key left: the mean of the values, as the body gives
    empty = natives.attention(q, k, v, 0.5, mask, False, torch.float32)
    mean = v.mean(dim=2, keepdim=True).repeat_interleave(2, dim=1)
    assert torch.equal(empty, mean) if not c_loops else torch.allclose(empty, mean, atol=1e-7)
    x = torch.from_numpy(data(44, "f32", (1, 2, 1, 8)))
    cos, sin = (torch.from_numpy(data(key, "f32", (1, 8))) for key in (45, 46))
    natives.rope(x, cos, sin)
    sin.mul_(2.0)
    assert torch.equal(natives.rope(x, cos, sin), natives.rope(x, cos, sin.clone()))
    cache = torch.from_numpy(data(51, "f32", (3, 2, 5, 4)))
    value = torch.from_numpy(data(52, "f32", (3, 2, 1, 4)))
    at = torch.tensor([0, 9, 2], dtype=torch.int32)
    with torch.no_grad():
        natives.write_rows_in_place(cache.clone(), value, at)
        at[1] = 4
        expected = natives.write_rows(cache, value, at)
        assert torch.equal(natives.write_rows_in_place(cache, value, at), expected)


def test_derived_tables_last_one_entry_call() -> None:
    """A mask written through a NumPy view changes without a version bump: within one
    entry call the derived mask is reused, but the next call (`begin_call`) derives it
    again, so a caller updating a mask buffer in place between steps gets the new one."""
    import torch

    from linnet.torch import natives

    q = torch.from_numpy(data(61, "f32", (1, 4, 1, 8)))
    k, v = (torch.from_numpy(data(key, "f32", (1, 2, 6, 8))) for key in (62, 63))
    buffer = np.ones((1, 6), dtype=np.bool_)
    mask = torch.from_numpy(buffer)
    natives.begin_call()
    natives.attention(q, k, v, 0.5, mask, False, torch.float32)
    version = mask._version
    buffer[0, 3:] = False
    assert mask._version == version  # nothing a version counter could see
    natives.begin_call()
    got = natives.attention(q, k, v, 0.5, mask, False, torch.float32)
    fresh = natives.attention(q, k, v, 0.5, mask.clone(), False, torch.float32)
    assert torch.equal(got, fresh)


@pytest.mark.parametrize("at", [0, 4, -2, 5, 9])
def test_write_span_at_runtime_positions(program, at: int) -> None:  # type: ignore[no-untyped-def]
    """A position only known at run time (a decode step's): inside, overlapping either
    end of, and past the cache."""
    cache, value = data(34, "f32", (2, 3, 6, 4)), data(35, "f32", (2, 3, 2, 4))
    arrays = [cache, value, np.array(at, np.int32)]
    run_case(program, "span_at", arrays, ["f32", "f32", "i32"], "std.nn.cache::write_span")


@pytest.mark.parametrize("at", [0, 4, -2, 5, 9])
def test_write_span_in_place_equals_the_copy(at: int) -> None:
    """The donated-cache `write_span` writes the same positions into the cache itself."""
    import torch

    from linnet.torch import natives

    cache = torch.from_numpy(data(36, "f32", (2, 3, 6, 4)))
    value = torch.from_numpy(data(37, "f32", (2, 3, 2, 4)))
    expected = natives.write_span(cache, value, at)
    with torch.no_grad():
        written = natives.write_span_at_in_place(cache, value, torch.tensor(at, dtype=torch.int32))
    assert written is cache and torch.equal(cache, expected)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f64"])
def test_layer_norm_with_and_without_bias(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    x, w, b = data(21, dtype, (3, 4, 16), 3.0), data(22, dtype, (16,)), data(23, dtype, (16,))
    run_case(program, "layer", [x, w, b], [dtype] * 3, "std.nn.norm::layer_norm",
             1e7 if dtype == "f64" else 1.0)  # fmt: skip


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_batch_and_group_norm(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    x = data(24, dtype, (2, 6, 3, 5), 2.0)
    m, w, b = data(25, dtype, (6,)), data(26, dtype, (6,)), data(27, dtype, (6,))
    v = np.abs(data(28, dtype, (6,))) + np.array(0.5, dtype=x.dtype)
    run_case(program, "batch", [x, m, v, w, b], [dtype] * 5, "std.nn.norm::batch_norm")
    run_case(program, "groups", [x, w, b], [dtype] * 3, "std.nn.norm::group_norm")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_relu(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    x = data(29, dtype, (4, 9), 3.0)
    run_case(program, "curves", [x], [dtype], "std.nn.activations::relu")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_quantised_linears_dequantise_once(program, dtype: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The natives (f32: `linnet.native`'s kernels; bf16: the weight dequantised once and
    cached) equal the std body; the cache follows the packed weight when it changes in place
    (the kernels, which read the packed bytes, are turned off for that part)."""
    import torch

    from linnet.torch import natives_quant

    rng = np.random.default_rng(31)
    scale = 4.0 if dtype == "bf16" else 1.0
    x, bias = data(40, dtype, (2, 3, 32)), data(41, dtype, (5,))
    q = rng.integers(-128, 128, (5, 32)).astype(np.int8)
    rows = rng.uniform(0.01, 0.05, 5).astype(np.float32)
    run_case(program, "int8_linear", [x, q, rows, bias], [dtype, "i8", "f32", dtype],
             "std.quant::linear_int8", scale)  # fmt: skip
    packed = rng.integers(0, 256, (5, 2, 8)).astype(np.uint8)
    groups = rng.uniform(0.01, 0.2, (5, 2)).astype(numpy_dtype(dtype))
    zero = rng.integers(0, 16, (5, 2)).astype(np.uint8)
    arrays = [x, packed, groups, zero, bias]
    run_case(program, "int4_linear", arrays, [dtype, "u8", dtype, "u8", dtype],
             "std.quant::linear_int4_groups", scale)  # fmt: skip
    xt, pt, st, zt = (torch.from_numpy(a.astype(np.float32)) for a in (x, packed, groups, zero))
    pt, zt = pt.to(torch.uint8), zt.to(torch.uint8)
    monkeypatch.setattr(natives_quant, "NATIVE_ROWS", 0)
    first = natives_quant.linear_int4_groups(xt, pt, st, zt)
    assert natives_quant.linear_int4_groups(xt, pt, st, zt).equal(first)
    pt[0, 0, 0] ^= 0xFF
    changed = natives_quant.linear_int4_groups(xt, pt, st, zt)
    body = natives_quant.dequantize_int4_groups(pt, st, zt, torch.float32)
    assert changed.equal(torch.nn.functional.linear(xt, body))
    assert not changed.equal(first)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_fp8_and_mxfp4_linears_dequantise_once(program, dtype: str) -> None:  # type: ignore[no-untyped-def]
    """The FP8 / MXFP4 natives equal the std bodies, E4M3's NaN bytes (+-480) included."""
    import torch

    from linnet.torch import natives_quant

    rng = np.random.default_rng(32)
    scale = 4.0 if dtype == "bf16" else 1.0
    x, bias = data(42, dtype, (2, 3, 64)), data(43, dtype, (5,))
    q = rng.integers(0, 256, (5, 64)).astype(np.uint8)
    q[0, :2] = [0x7F, 0xFF]
    rows = rng.uniform(0.0001, 0.001, (5, 1)).astype(np.float32)
    run_case(program, "fp8_linear", [x, q, rows, bias], [dtype, "u8", "f32", dtype],
             "std.quant::linear_fp8", scale)  # fmt: skip
    blocks = rng.integers(0, 256, (5, 2, 16)).astype(np.uint8)
    scales = rng.integers(118, 130, (5, 2)).astype(np.uint8)
    run_case(program, "mxfp4_linear", [x, blocks, scales, bias], [dtype, "u8", "u8", dtype],
             "std.quant::linear_mxfp4", scale)  # fmt: skip
    decoded = natives_quant.decode_fp8(torch.from_numpy(q))
    assert decoded[0, 0] == 480 and decoded[0, 1] == -480


@pytest.mark.parametrize("at", [[0, 5, -1, 6], [9, 9, -3, 6], [1, 2, 3, 4], [5, 6, 6, 0]])
def test_write_rows_in_place_writes_the_rows_inside(at: list[int]) -> None:
    """The donated-cache `write_rows` (on the CPU it writes only the rows whose position is
    inside) equals the copying one: some rows outside, all outside, all inside."""
    import torch

    from linnet.torch import natives

    cache = torch.from_numpy(data(32, "f32", (4, 3, 6, 4)))
    value = torch.from_numpy(data(33, "f32", (4, 3, 1, 4)))
    positions = torch.tensor(at, dtype=torch.int32)
    expected = natives.write_rows(cache, value, positions)
    with torch.no_grad():
        written = natives.write_rows_in_place(cache, value, positions)
    assert written is cache and torch.equal(cache, expected)
