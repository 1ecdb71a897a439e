"""`linnet.native`'s kernels against NumPy f64 of the std functions, both compiled paths.

The vector library (`-march=native`: AVX-512 here), the AVX2 path
(`-mno-avx512f`) and the portable loops (`-DLINNET_SCALAR`) each run odd shapes: inputs that are no multiple of the
vector width, output rows that are no multiple of the block, 1, 2, 3 and 7
rows of x (the 4-row tile and its remainders), groups of 16 (no full vector),
32, 64 (16-byte steps), 128 and 256 (64-byte chunks), zero points 0..15, with
and without a bias, and products large enough to run on two threads. The
bound is the f32 rounding of the sums each kernel forms (a few ulps of the
sum of the magnitudes of its terms), far below any wrong weight, nibble or
group. Then the fallbacks: `LINNET_NATIVE=0` and a compiler that is not
there leave `natives_quant` on the dequantised path, with the reason in
`status()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from linnet import native
from linnet.native.activations import int8_block
from linnet.native.kernels import Kernels

Array = np.ndarray[Any, Any]
EPS = float(np.finfo(np.float32).eps)


def _tensor(a: Array) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def _bound(terms: Array, into: int) -> Array:
    """A few ulps of the magnitudes summed, per output (sqrt(n) growth, generous constant)."""
    return 8 * np.sqrt(into) * EPS * terms + 1e-30


@pytest.mark.parametrize(("out", "into"), [(13, 100), (6, 2096), (301, 512)])
@pytest.mark.parametrize("rows", [1, 2, 3, 7])
@pytest.mark.parametrize("with_bias", [False, True])
def test_int8_rows(library: Kernels, out: int, into: int, rows: int, with_bias: bool) -> None:
    rng = np.random.default_rng(out * into + rows)
    x = rng.standard_normal((rows, into)).astype(np.float32)
    q = rng.integers(-128, 128, (out, into)).astype(np.int8)
    scale = rng.uniform(0.001, 0.05, out).astype(np.float32)
    bias = rng.standard_normal(out).astype(np.float32) if with_bias else None
    y = torch.full((rows, out), float("nan"))
    xt, qt, st = _tensor(x), _tensor(q), _tensor(scale)
    bt = None if bias is None else _tensor(bias)
    library.int8_linear(
        xt.data_ptr(), rows, into, qt.data_ptr(), st.data_ptr(),
        None if bt is None else bt.data_ptr(), y.data_ptr(), out, 2,
    )  # fmt: skip
    weight = q.astype(np.float64) * scale[:, None].astype(np.float64)
    expected = x.astype(np.float64) @ weight.T + (0.0 if bias is None else bias)
    terms = np.abs(x).astype(np.float64) @ np.abs(weight).T + (0 if bias is None else np.abs(bias))
    assert (np.abs(y.numpy() - expected) <= _bound(terms, into)).all()


@pytest.mark.parametrize(
    ("out", "group", "groups"),
    [(13, 16, 3), (13, 32, 3), (5, 64, 3), (13, 128, 3), (6, 256, 2), (301, 128, 8)],
)
@pytest.mark.parametrize("rows", [1, 2, 3, 7])
@pytest.mark.parametrize("with_bias", [False, True])
def test_int4_groups(
    library: Kernels, out: int, group: int, groups: int, rows: int, with_bias: bool
) -> None:
    rng = np.random.default_rng(out * group + rows)
    into = group * groups
    x = rng.standard_normal((rows, into)).astype(np.float32)
    packed = rng.integers(0, 256, (out, groups, group // 2)).astype(np.uint8)
    scale = rng.uniform(0.001, 0.05, (out, groups)).astype(np.float32)
    zero = rng.integers(0, 16, (out, groups)).astype(np.uint8)
    zero.flat[:16] = np.arange(16)
    bias = rng.standard_normal(out).astype(np.float32) if with_bias else None
    y = torch.full((rows, out), float("nan"))
    xt, pt, st, zt = _tensor(x), _tensor(packed), _tensor(scale), _tensor(zero)
    bt = None if bias is None else _tensor(bias)
    library.int4_linear(
        xt.data_ptr(), rows, into, pt.data_ptr(), st.data_ptr(), zt.data_ptr(), group,
        None if bt is None else bt.data_ptr(), y.data_ptr(), out, 2,
    )  # fmt: skip
    # the std body: low nibble first, (q - zero) * scale per group, in f64
    nibbles = np.stack([packed & 15, packed >> 4], axis=-1).reshape(out, groups, group)
    centred = nibbles.astype(np.float64) - zero[..., None].astype(np.float64)
    weight = (centred * scale[..., None].astype(np.float64)).reshape(out, into)
    expected = x.astype(np.float64) @ weight.T + (0.0 if bias is None else bias)
    # the kernels sum x * nibble and zero * sum(x) per group: terms up to 15 |x| scale each
    wide = 30 * np.repeat(scale.astype(np.float64), group, axis=1)
    terms = np.abs(x).astype(np.float64) @ wide.T + (0 if bias is None else np.abs(bias))
    assert (np.abs(y.numpy() - expected) <= _bound(terms, into)).all()


@pytest.mark.parametrize(("out", "into"), [(13, 100), (301, 530)])
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 8, 13])
def test_f32_rows(library: Kernels, rows: int, out: int, into: int) -> None:
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, into)).astype(np.float32)
    w = rng.standard_normal((out, into)).astype(np.float32)
    bias = rng.standard_normal(out).astype(np.float32)
    y = torch.full((rows, out), float("nan"))
    xt, wt, bt = _tensor(x), _tensor(w), _tensor(bias)
    library.f32_linear(
        xt.data_ptr(), rows, into, wt.data_ptr(), bt.data_ptr(), y.data_ptr(), out, 1
    )
    expected = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    terms = np.abs(x).astype(np.float64) @ np.abs(w).T + np.abs(bias)
    assert (np.abs(y.numpy() - expected) <= _bound(terms, into)).all()


def test_f32_rows_are_the_same_alone_and_in_a_batch(library: Kernels) -> None:
    """The multi-row tiles sum each output in the one-row order: bitwise equal, so a
    request's tokens do not depend on the other rows of a batched decode step."""
    rng = np.random.default_rng(5)
    out, into, rows = 301, 530, 13
    x = _tensor(rng.standard_normal((rows, into)).astype(np.float32))
    w = _tensor(rng.standard_normal((out, into)).astype(np.float32))
    together = torch.empty(rows, out)
    library.f32_linear(x.data_ptr(), rows, into, w.data_ptr(), None, together.data_ptr(), out, 2)
    for row in range(rows):
        alone = torch.empty(1, out)
        library.f32_linear(x[row].data_ptr(), 1, into, w.data_ptr(), None, alone.data_ptr(), out, 1)
        assert torch.equal(alone[0], together[row]), row


def _members(
    kind: str, rng: np.random.Generator, outs: list[int], into: int, group: int
) -> list[tuple[torch.Tensor, ...]]:
    """Weights of `kind` for each output size, a bias on every other one."""
    made = []
    for index, out in enumerate(outs):
        bias = _tensor(rng.standard_normal(out).astype(np.float32)) if index % 2 else None
        if kind == "int8":
            q = rng.integers(-128, 128, (out, into)).astype(np.int8)
            scale = rng.uniform(0.001, 0.05, out).astype(np.float32)
            made.append((_tensor(q), _tensor(scale), None, bias))
        elif kind == "int4":
            groups = into // group
            packed = rng.integers(0, 256, (out, groups, group // 2)).astype(np.uint8)
            scale = rng.uniform(0.001, 0.05, (out, groups)).astype(np.float32)
            zero = rng.integers(0, 16, (out, groups)).astype(np.uint8)
            made.append((_tensor(packed), _tensor(scale), _tensor(zero), bias))
        else:
            w = rng.standard_normal((out, into)).astype(np.float32)
            made.append((_tensor(w), None, None, bias))
    return made


def _address(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


@pytest.mark.parametrize(
    ("kind", "group"),
    [("int8", 0), ("f32", 0), ("int4", 16), ("int4", 32), ("int4", 128), ("int8-a8", 0),
     ("int4-a8", 16), ("int4-a8", 128)],
)  # fmt: skip
@pytest.mark.parametrize("rows", [1, 3])
def test_many_gives_each_linear_bitwise_as_alone(
    library: Kernels, kind: str, group: int, rows: int
) -> None:
    """The `*_many` calls (one parallel region for linears on one x; `-a8`: x rounded to int8
    once for all) against each linear's own call: the same bits, for members of different
    sizes (pieces of several members in one region), with and without a bias, on two
    threads."""
    rng = np.random.default_rng(rows + group)
    into, outs = 512, [301, 13, 640, 6]
    block = int8_block(into)
    x = _tensor(rng.standard_normal((rows, into)).astype(np.float32))
    members = _members(kind.removesuffix("-a8"), rng, outs, into, group)
    alone, joined = [torch.full((rows, out), float("nan")) for out in outs], []
    table = []
    for (w, scale, zero, bias), y, out in zip(members, alone, outs, strict=True):
        b = _address(bias)
        if kind == "int8":
            library.int8_linear(x.data_ptr(), rows, into, w.data_ptr(), _address(scale), b,
                                y.data_ptr(), out, 2)  # fmt: skip
        elif kind == "int4":
            library.int4_linear(x.data_ptr(), rows, into, w.data_ptr(), _address(scale),
                                _address(zero), group, b, y.data_ptr(), out, 2)  # fmt: skip
        elif kind == "int8-a8":
            library.int8_linear_a8(x.data_ptr(), rows, into, w.data_ptr(), _address(scale),
                                   block, b, y.data_ptr(), out, 2)  # fmt: skip
        elif kind == "int4-a8":
            library.int4_linear_a8(x.data_ptr(), rows, into, w.data_ptr(), _address(scale),
                                   _address(zero), group, b, y.data_ptr(), out, 2)  # fmt: skip
        else:
            library.f32_linear(x.data_ptr(), rows, into, w.data_ptr(), b, y.data_ptr(), out, 2)
        joined.append(torch.full((rows, out), float("nan")))
        table.append(
            (w.data_ptr(), _address(scale) or 0, _address(zero) or 0, b,
             joined[-1].data_ptr(), out)
        )  # fmt: skip
    if kind == "int8":
        library.int8_linear_many(x.data_ptr(), rows, into, table, 2)
    elif kind == "int4":
        library.int4_linear_many(x.data_ptr(), rows, into, group, table, 2)
    elif kind == "int8-a8":
        library.int8_linear_a8_many(x.data_ptr(), rows, into, block, table, 2)
    elif kind == "int4-a8":
        library.int4_linear_a8_many(x.data_ptr(), rows, into, group, table, 2)
    else:
        library.f32_linear_many(x.data_ptr(), rows, into, table, 2)
    for one, many in zip(alone, joined, strict=True):
        assert not one.isnan().any() and torch.equal(one, many)


def test_many_rejects_no_members_and_a_bad_group(library: Kernels) -> None:
    x = torch.zeros(1, 96)
    with pytest.raises(ValueError, match="1 to 16 members"):
        library.int8_linear_many(x.data_ptr(), 1, 96, [], 1)
    y, packed, scale, zero = torch.zeros(1, 1), torch.zeros(96), torch.ones(3), torch.zeros(3)
    member = (packed.data_ptr(), scale.data_ptr(), zero.data_ptr(), None, y.data_ptr(), 1)
    with pytest.raises(ValueError, match=r"group \(40\)"):
        library.int4_linear_many(x.data_ptr(), 1, 96, 40, [member], 1)
    with pytest.raises(ValueError, match=r"group \(40\)"):
        library.int4_linear_a8_many(x.data_ptr(), 1, 96, 40, [member], 1)
    with pytest.raises(ValueError, match=r"block \(8\)"):
        library.int8_linear_a8_many(x.data_ptr(), 1, 96, 8, [member], 1)


@pytest.mark.parametrize("int8_activations", [False, True])
def test_natives_quant_many_equals_the_members_calls(int8_activations: bool) -> None:
    """`natives_quant`'s joined wrappers: bitwise each member's own call on the kernel path
    (with `int8_activations` too, x rounded once), and the members' own calls where the
    kernels do not apply (a gradient to record, more rows than the kernels take, int4
    members of different groups)."""
    from linnet.torch import natives, natives_quant

    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.standard_normal((1, 2, 256)).astype(np.float32))
    int4 = _members("int4", rng, [7, 40, 9], 256, 64)
    int8 = [(m[0], m[1], m[3]) for m in _members("int8", rng, [7, 40], 256, 0)]
    f32 = [(m[0], m[3]) for m in _members("f32", rng, [7, 40], 256, 0)]
    other = _members("int4", rng, [5], 256, 128)[0]  # groups of 128, not 64
    mixed = [*int4[:2], other]
    cases = [
        (natives_quant.linear_int4_groups_many, natives_quant.linear_int4_groups, int4),
        (natives_quant.linear_int4_groups_many, natives_quant.linear_int4_groups, mixed),
        (natives_quant.linear_int8_many, natives_quant.linear_int8, int8),
        (natives.linear_cpu_many, natives.linear_cpu, f32),
    ]
    token = natives_quant.INT8_ACTIVATIONS.set(int8_activations)
    try:
        for rows in (x, x.repeat(1, 20, 1)):  # 2 rows: kernels; 40: past NATIVE_ROWS
            for many, alone, members in cases:
                with torch.no_grad():
                    got = many(rows, *members)
                    expected = [alone(rows, *member) for member in members]
                assert len(got) == len(expected)
                for a, b in zip(got, expected, strict=True):
                    assert torch.equal(a, b)
    finally:
        natives_quant.INT8_ACTIVATIONS.reset(token)
    trained = torch.from_numpy(f32[0][0].numpy().copy()).requires_grad_(True)
    got = natives.linear_cpu_many(x, (trained, None), f32[1])
    assert got[0].requires_grad and torch.equal(got[0], torch.nn.functional.linear(x, trained))


@pytest.mark.parametrize(("rows", "h"), [(1, 2048), (3, 100), (2, 7)])
def test_rms_norm_rows(library: Kernels, rows: int, h: int) -> None:
    """stdlib.md 6 in NumPy f64: `x * rsqrt(mean(x^2) + eps) * weight`, within the f32
    rounding of a sum of `h` squares and three products."""
    rng = np.random.default_rng(h + rows)
    x = (rng.standard_normal((rows, h)) * rng.uniform(0.01, 30, (rows, 1))).astype(np.float32)
    w = rng.standard_normal(h).astype(np.float32)
    y = torch.full((rows, h), float("nan"))
    xt, wt = _tensor(x), _tensor(w)
    library.rms_norm(xt.data_ptr(), rows, h, wt.data_ptr(), 1e-5, y.data_ptr())
    x64 = x.astype(np.float64)
    mean = (x64 * x64).mean(axis=1, keepdims=True)
    expected = x64 / np.sqrt(mean + np.float64(np.float32(1e-5))) * w
    bound = (2 * np.sqrt(h) + 8) * EPS * np.abs(expected) + 1e-30
    assert (np.abs(y.numpy() - expected) <= bound).all()


def test_natives_rms_norm_takes_the_kernel_for_decode_rows_only() -> None:
    """`natives.rms_norm`: f32 rows of a decode step on the kernel, F.rms_norm's function
    within f32 rounding; more rows, bf16 or a gradient to record keep the aten ops."""
    from linnet.torch import natives, natives_cpu, natives_quant

    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(1, 2, 300, generator=g) * 7, torch.randn(300, generator=g)
    aten = torch.nn.functional.rms_norm(x, (300,), eps=1e-6) * w
    with torch.no_grad():
        got = natives_cpu.native_rms_norm(x, w, 1e-6)
        assert got is not None and got.shape == x.shape
        torch.testing.assert_close(got, aten)
        assert torch.equal(natives.rms_norm(x, w, 1e-6, torch.float32), got)
        many = x.repeat(1, natives_quant.NATIVE_ROWS, 1)
        assert natives_cpu.native_rms_norm(many, w, 1e-6) is None
        assert natives_cpu.native_rms_norm(x.bfloat16(), w.bfloat16(), 1e-6) is None
    w.requires_grad_(True)
    assert natives_cpu.native_rms_norm(x, w, 1e-6) is None
    assert natives.rms_norm(x, w, 1e-6, torch.float32).requires_grad


@pytest.mark.parametrize(("rows", "positions", "d"), [(32, 1, 64), (3, 5, 10), (1, 2, 2)])
def test_rope_is_the_aten_form_bitwise(library: Kernels, rows: int, positions: int, d: int) -> None:
    """`x * cos + roll(x) * sin'` (`sin'`: the first half negated), each product and sum
    rounded to f32 as aten rounds them: the same bits."""
    g = torch.Generator().manual_seed(rows * d + positions)
    x = torch.randn(rows, positions, d, generator=g) * 5
    cos, sin = torch.randn(positions, d, generator=g), torch.randn(positions, d, generator=g)
    y = torch.full_like(x, float("nan"))
    library.rope(x.data_ptr(), rows, positions, d, cos.data_ptr(), sin.data_ptr(), y.data_ptr())
    half = d // 2
    signed = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
    assert torch.equal(y, x * cos + torch.roll(x, half, -1) * signed)


def test_natives_rope_takes_the_kernel_for_contiguous_decode_rows() -> None:
    """`natives.rope` on the kernel for a decode step's contiguous `[B, H, 1, D]` queries, the
    aten ops for a prefill's permuted view or under autograd: the same bits either way."""
    from linnet.torch import natives, natives_cpu

    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    g = torch.Generator().manual_seed(11)
    natives.begin_call()
    for seq in (1, 6):
        x = torch.randn(1, seq, 8, 16, generator=g).permute(0, 2, 1, 3)
        cos, sin = torch.randn(seq, 16, generator=g), torch.randn(seq, 16, generator=g)
        with torch.no_grad():
            found = natives_cpu.native_rope(x, cos, sin)
            assert (found is not None) == (seq == 1)
            got = natives.rope(x, cos, sin)
        assert torch.equal(got, x * cos + torch.roll(x, 8, -1) * natives.signed_sin(sin))
    trained = torch.randn(1, 8, 1, 16, generator=g).requires_grad_(True)
    cos, sin = torch.randn(1, 16, generator=g), torch.randn(1, 16, generator=g)
    with torch.no_grad():
        assert natives_cpu.native_rope(trained, cos, sin) is not None
    assert natives_cpu.native_rope(trained, cos, sin) is None


@pytest.mark.parametrize("start", [0, 3, -1, 4, 6, -2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_write_span_in_place_copies_the_span(start: int, dtype: torch.dtype) -> None:
    """`natives.write_span_in_place` on the C copy: the cache a slice assignment gives, for
    spans inside, over either end of, and past the cache (nothing written)."""
    from linnet.torch import natives, natives_cpu

    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    g = torch.Generator().manual_seed(start + 7)
    cache = torch.randn(2, 3, 6, 4, generator=g).to(dtype)
    value = torch.randn(2, 3, 2, 4, generator=g).to(dtype)
    expected = cache.clone()
    low, high = max(start, 0), min(start + 2, 6)
    if low < high:
        expected[:, :, low:high] = value[:, :, low - start : high - start]
        assert natives_cpu.native_write_span(cache.clone(), value, low, high, start)
    with torch.no_grad():
        got = natives.write_span_in_place(cache, value, start)
    assert got is cache and torch.equal(cache, expected)
    view = value.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)  # not contiguous
    assert not natives_cpu.native_write_span(cache, view, 0, 2, 0)


def _attention_body(q: Array, k: Array, v: Array, mask: Array | None, scale: float) -> Array:
    """stdlib.md 9 in NumPy f64: masked scores -1e30 (an empty row averages the values)."""
    group = q.shape[1] // k.shape[1]
    k64, v64 = (np.repeat(t.astype(np.float64), group, axis=1) for t in (k, v))
    scores = q.astype(np.float64) @ k64.transpose(0, 1, 3, 2) * scale
    if mask is not None:
        scores = np.where(mask, scores, -1e30)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v64


@pytest.mark.parametrize(
    ("batch", "heads", "kv_heads", "queries", "keys", "d"),
    [(1, 32, 4, 1, 40, 64), (2, 4, 2, 3, 9, 8), (1, 2, 2, 2, 5, 20)],
)
@pytest.mark.parametrize("masked", [False, True])
def test_attention_rows(
    library: Kernels, batch: int, heads: int, kv_heads: int, queries: int, keys: int, d: int,
    masked: bool,
) -> None:  # fmt: skip
    """Grouped heads, masked keys, a row that keeps no key (the mean of the values), against
    the canonical body in f64: within the f32 rounding of dot products, exp and sums."""
    rng = np.random.default_rng(heads * keys + queries)
    q = rng.standard_normal((batch, heads, queries, d)).astype(np.float32)
    k = rng.standard_normal((batch, kv_heads, keys, d)).astype(np.float32)
    v = rng.standard_normal((batch, kv_heads, keys, d)).astype(np.float32)
    mask = rng.random((queries, keys)) < 0.6 if masked else None
    if mask is not None:
        mask[0] = False
    scale = 1 / np.sqrt(d)
    y = torch.full((batch, heads, queries, d), float("nan"))
    tensors = [_tensor(a) for a in (q, k, v)]
    mt = None if mask is None else _tensor(mask)
    library.attention(
        *(t.data_ptr() for t in tensors), None if mt is None else mt.data_ptr(),
        batch, heads, kv_heads, queries, keys, d, float(scale), y.data_ptr(),
    )  # fmt: skip
    expected = _attention_body(q, k, v, mask, float(np.float32(scale)))
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=2e-6)


def test_natives_attention_takes_the_kernel_for_decode_rows() -> None:
    """`natives.attention` for a decode step's query row (grouped heads, a mask with an empty
    row, a runtime scale) runs the kernel, within f32 rounding of SDPA's result; a causal
    call, many scores or a gradient to record keep SDPA."""
    from linnet.torch import natives, natives_cpu

    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, h, n, 16, generator=g) for h, n in ((8, 2), (2, 12), (2, 12)))
    mask = torch.rand(2, 12, generator=g) < 0.5
    mask[1] = False
    scale = torch.tensor(0.25)
    natives.begin_call()
    with torch.no_grad():
        got = natives_cpu.native_attention(q, k, v, scale, mask, False)
        assert got is not None
        torch.testing.assert_close(
            natives.attention(q, k, v, scale, mask, False, torch.float32), got
        )
        sdpa = natives.attention(q, k, v, scale, mask, False, torch.float64)  # SDPA, then cast
        torch.testing.assert_close(got.double(), sdpa, rtol=1e-5, atol=1e-6)
        assert natives_cpu.native_attention(q, k, v, 0.25, None, True) is None
        long = torch.randn(1, 2, natives_cpu.NATIVE_SCORES, 16)
        assert natives_cpu.native_attention(q, long, long, 0.25, None, False) is None
    assert natives_cpu.native_attention(q.requires_grad_(True), k, v, 0.25, None, False) is None


def test_int4_rejects_a_group_that_does_not_divide(library: Kernels) -> None:
    x, y = torch.zeros(1, 96), torch.zeros(1, 1)
    packed, scale, zero = torch.zeros(1, 96, dtype=torch.uint8), torch.ones(3), torch.zeros(3)
    with pytest.raises(ValueError, match="group 40"):
        library.int4_linear(
            x.data_ptr(), 1, 96, packed.data_ptr(), scale.data_ptr(), zero.data_ptr(), 40,
            None, y.data_ptr(), 1,
        )  # fmt: skip


# -- fallbacks -----------------------------------------------------------------------------


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """`kernels()` looks again under the test's environment, and again after it."""
    native.forget()
    yield monkeypatch
    monkeypatch.undo()
    native.forget()


def _int4_case() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 256, generator=g)
    packed = torch.randint(0, 256, (7, 2, 64), dtype=torch.uint8, generator=g)
    scale = torch.rand(7, 2, generator=g) * 0.1
    zero = torch.randint(0, 16, (7, 2), dtype=torch.uint8, generator=g)
    return x, packed, scale, zero


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [("LINNET_NATIVE", "0", "disabled by LINNET_NATIVE=0"), ("CC", "/no/such/cc", "no C compiler")],
)
def test_without_kernels_the_dequantised_path_runs(
    fresh: pytest.MonkeyPatch, tmp_path: Any, variable: str, value: str, reason: str
) -> None:
    from linnet.torch import natives_quant

    fresh.setenv("LINNET_NATIVE_CACHE", str(tmp_path))  # nothing cached: a build is tried
    fresh.setenv(variable, value)
    status = native.status()
    assert not status.available and reason in status.reason
    x, packed, scale, zero = _int4_case()
    with torch.no_grad():
        got = natives_quant.linear_int4_groups(x, packed, scale, zero)
    dense = natives_quant.dequantize_int4_groups(packed, scale, zero, torch.float32)
    assert got.equal(torch.nn.functional.linear(x, dense))


def test_a_failed_compile_is_a_reason(fresh: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A compiler that runs and fails: its message is in `status().reason`."""
    script = tmp_path / "cc"
    script.write_text("#!/bin/sh\necho 'cc: fatal error: out of luck' >&2\nexit 1\n")
    script.chmod(0o755)
    fresh.setenv("LINNET_NATIVE_CACHE", str(tmp_path / "cache"))
    fresh.setenv("CC", str(script))
    status = native.status()
    assert not status.available and "out of luck" in status.reason


def test_natives_quant_runs_the_kernel_without_a_dense_copy() -> None:
    """On the native path no dequantised f32 weight is cached, and the result is the body's."""
    from linnet.torch import natives_quant

    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    x, packed, scale, zero = _int4_case()
    with torch.no_grad():
        got = natives_quant.linear_int4_groups(x, packed, scale, zero)
    assert id(packed) not in natives_quant._cache
    dense = natives_quant.dequantize_int4_groups(packed, scale, zero, torch.float64)
    torch.testing.assert_close(got.double(), x.double() @ dense.T, rtol=1e-5, atol=1e-5)


def test_a_compiler_without_openmp_gives_a_one_thread_library(
    fresh: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import shutil

    real = shutil.which("cc")
    if real is None:
        pytest.skip("no `cc` here")
    script = tmp_path / "cc"
    script.write_text(
        f'#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && exit 1; done\nexec {real} "$@"\n'
    )
    script.chmod(0o755)
    fresh.setenv("LINNET_NATIVE_CACHE", str(tmp_path / "cache"))
    fresh.setenv("CC", str(script))
    found = native.kernels()
    assert found is not None and found.threads() == 1
    x, q, scale = (
        torch.randn(2, 40),
        torch.randint(-128, 128, (3, 40), dtype=torch.int8),
        torch.rand(3),
    )
    y = torch.empty(2, 3)
    found.int8_linear(x.data_ptr(), 2, 40, q.data_ptr(), scale.data_ptr(), None, y.data_ptr(), 3, 2)
    torch.testing.assert_close(y, x @ (q.float() * scale[:, None]).T, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc (Linux)")
def test_one_openmp_runtime_is_mapped() -> None:
    """The kernels' OpenMP runtime is the libgomp torch loaded: one thread pool, not two.

    The library links `libgomp.so.1` by that soname, so every mapped file of that name
    must be torch's. Other packages may map their own renamed copy (sentencepiece's
    `libgomp-<hash>.so.1.0.0`, imported by other tests in the same worker), which only
    they use."""
    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    maps = Path("/proc/self/maps").read_text().splitlines()
    runtimes = {
        line.split()[-1] for line in maps if Path(line.split()[-1]).name.startswith("libgomp.so")
    }
    assert len(runtimes) == 1, runtimes
    assert Path(next(iter(runtimes))).parent == Path(torch.__file__).parent / "lib", runtimes


def test_linear_cpu_runs_f32_rows_on_the_kernel() -> None:
    """`natives.linear_cpu`: up to F32_NATIVE_ROWS rows of a contiguous f32 weight on the kernel
    (the F.linear function within f32 rounding); a transposed weight, more rows, or a
    gradient to record keep the other paths."""
    from linnet.torch import natives, natives_quant

    if native.kernels() is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    g = torch.Generator().manual_seed(9)
    x, w, b = torch.randn(1, 3, 70, generator=g), torch.randn(11, 70, generator=g), torch.randn(11)
    with torch.no_grad():
        got = natives_quant.native_linear_f32(x, w, b)
        assert got is not None and got.shape == (1, 3, 11)
        torch.testing.assert_close(got, torch.nn.functional.linear(x, w, b))
        torch.testing.assert_close(natives.linear_cpu(x, w, b), got)
        assert natives_quant.native_linear_f32(x, w.T.contiguous().T) is None
        many = torch.randn(natives_quant.F32_NATIVE_ROWS + 1, 70)
        assert natives_quant.native_linear_f32(many, w) is None
    w.requires_grad_(True)
    assert natives_quant.native_linear_f32(x, w, b) is None
