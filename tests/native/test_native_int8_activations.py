"""`linnet.native`'s int8-activation kernels against NumPy and ONNX Runtime.

The declared function (kernels.c, "int8 activations"): each row of x rounded
to int8 per block (`q = rint(x * (127 / amax))`, scale `amax / 127`), then
integer dot products with the int4 nibbles (minus zero point times the
block's sum) or the int8 rows, combined with the scales in f32. The NumPy
reference rounds in f32 as declared and sums in int64, combining in f64: the
rounded activations must be equal bit for bit, the outputs within the f32
rounding of the combination. Every compiled path runs (AVX-512 VNNI, AVX2's
`vpmaddubsw`, the scalar build's plain C, on the same integers), on odd shapes: inputs
that are no multiple of 64 bytes, groups of 6 (plain C on every path), 8,
16, 32, 64, 128 and 256, 1, 2, 3 and 7 rows of x, zero points 0..15, a
block of zeros in x, with and without a bias. ONNX Runtime's `MatMulNBits`
at `accuracy_level=4` computes the same function: a single node on the same
bytes gives the same outputs within f32 rounding.
"""

from __future__ import annotations

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


def _rounded(x: Array, block: int) -> tuple[Array, Array]:
    """The declared rounding in NumPy f32: q [rows, In] (int64) and scale [rows, In / block]."""
    rows, width = x.shape
    blocks = x.reshape(rows, width // block, block)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    safe = np.where(amax > 0, amax, np.float32(1))
    inv = np.where(amax > 0, np.float32(127) / safe, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(blocks * inv), -127, 127).astype(np.int64).reshape(rows, width)
    return q, (amax[..., 0] / np.float32(127)).astype(np.float32)


def _bound(terms: Array, into: int) -> Array:
    """A few ulps of the magnitudes summed, per output (sqrt(n) growth, generous constant)."""
    return 8 * np.sqrt(into) * EPS * terms + 1e-30


def _x(rng: np.random.Generator, rows: int, into: int, block: int) -> Array:
    x = rng.standard_normal((rows, into)).astype(np.float32)
    x[0, :block] = 0.0  # a block of zeros: scale 0, all q 0
    # exact ties of x * 127 / amax (amax 127 / 64, so 127 / amax is 64): halves to even
    x[-1, block : 2 * block] = np.clip(x[-1, block : 2 * block], -1, 1)
    x[-1, block : block + 4] = np.array([127, 0.5, 1.5, -2.5], np.float32) / 64
    return x


@pytest.mark.parametrize("block", [16, 128])
def test_rounding_is_the_declared_one_bit_for_bit(library: Kernels, block: int) -> None:
    x = _x(np.random.default_rng(block), 3, 4 * block, block)
    q, scale = torch.empty(x.shape, dtype=torch.int8), torch.empty(3, 4)
    library.quantise_a8(_tensor(x).data_ptr(), 3, 4 * block, block, q.data_ptr(), scale.data_ptr())
    expected_q, expected_scale = _rounded(x, block)
    assert (q.numpy() == expected_q).all() and (scale.numpy() == expected_scale).all()
    assert (expected_q[0, :block] == 0).all() and expected_scale[0, 0] == 0
    assert list(expected_q[-1, block : block + 4]) == [127, 0, 2, -2]  # halves to even


def test_near_ties_round_as_x_times_127_over_amax(library: Kernels) -> None:
    """Values near k + 1/2 after scaling tell `x * (127 / amax)` (MLAS, declared) from
    `x / (amax / 127)`: the two differ on about one in six of these."""
    rng = np.random.default_rng(5)
    amax = rng.uniform(0.5, 3, (64, 1)).astype(np.float32)
    halves = rng.integers(-127, 127, (64, 128)) + 0.5
    x = (halves * (amax / np.float32(127))).astype(np.float32)
    x[:, 0] = amax[:, 0]
    q, scales = torch.empty(x.shape, dtype=torch.int8), torch.empty(64)
    library.quantise_a8(_tensor(x).data_ptr(), 64, 128, 128, q.data_ptr(), scales.data_ptr())
    expected, scale = _rounded(x, 128)
    assert (q.numpy() == expected).all()
    divided = np.clip(np.rint(x / scale), -127, 127)
    assert (divided != expected).mean() > 0.05  # the test tells the two apart


@pytest.mark.parametrize(
    ("out", "group", "groups"),
    [(13, 6, 4), (7, 8, 5), (13, 16, 3), (13, 32, 3), (5, 64, 3), (13, 128, 3), (6, 256, 2),
     (301, 128, 8)],
)  # fmt: skip
@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_int4_groups(library: Kernels, out: int, group: int, groups: int, rows: int) -> None:
    rng = np.random.default_rng(out * group + rows)
    into = group * groups
    x = _x(rng, rows, into, group)
    packed = rng.integers(0, 256, (out, groups, group // 2)).astype(np.uint8)
    scale = rng.uniform(0.001, 0.05, (out, groups)).astype(np.float32)
    zero = rng.integers(0, 16, (out, groups)).astype(np.uint8)
    zero.flat[:16] = np.arange(min(16, zero.size))
    bias = rng.standard_normal(out).astype(np.float32) if rows % 2 else None
    y = torch.full((rows, out), float("nan"))
    xt, pt, st, zt = _tensor(x), _tensor(packed), _tensor(scale), _tensor(zero)
    bt = None if bias is None else _tensor(bias)
    library.int4_linear_a8(
        xt.data_ptr(), rows, into, pt.data_ptr(), st.data_ptr(), zt.data_ptr(), group,
        None if bt is None else bt.data_ptr(), y.data_ptr(), out, 2,
    )  # fmt: skip
    q, sa = _rounded(x, group)
    nibbles = np.stack([packed & 15, packed >> 4], axis=-1).reshape(out, groups, group)
    qg = q.reshape(rows, groups, group)
    products = np.einsum("ogi,mgi->mog", nibbles.astype(np.int64), qg)
    corrections = zero.astype(np.int64)[None] * qg.sum(axis=-1)[:, None, :]
    scales = scale.astype(np.float64)[None] * sa.astype(np.float64)[:, None, :]
    expected = ((products - corrections) * scales).sum(-1) + (0.0 if bias is None else bias)
    magnitudes = np.einsum("ogi,mgi->mog", nibbles.astype(np.int64), np.abs(qg))
    terms = ((magnitudes + np.abs(corrections)) * scales).sum(-1)
    terms = terms + (0.0 if bias is None else np.abs(bias))
    assert (np.abs(y.numpy() - expected) <= _bound(terms, into)).all()


@pytest.mark.parametrize(("out", "into"), [(13, 48), (13, 80), (5, 96), (6, 192), (301, 2048)])
@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_int8_rows(library: Kernels, out: int, into: int, rows: int) -> None:
    rng = np.random.default_rng(out * into + rows)
    block = int8_block(into)
    x = _x(rng, rows, into, block)
    q = rng.integers(-128, 128, (out, into)).astype(np.int8)
    q[0, :2] = [-128, 127]
    scale = rng.uniform(0.001, 0.05, out).astype(np.float32)
    bias = rng.standard_normal(out).astype(np.float32) if rows % 2 else None
    y = torch.full((rows, out), float("nan"))
    xt, qt, st = _tensor(x), _tensor(q), _tensor(scale)
    bt = None if bias is None else _tensor(bias)
    library.int8_linear_a8(
        xt.data_ptr(), rows, into, qt.data_ptr(), st.data_ptr(), block,
        None if bt is None else bt.data_ptr(), y.data_ptr(), out, 2,
    )  # fmt: skip
    qa, sa = _rounded(x, block)
    w = q.reshape(out, into // block, block).astype(np.int64)
    xq = qa.reshape(rows, into // block, block)
    sums = np.einsum("obi,mbi->mob", w, xq) * sa.astype(np.float64)[:, None, :]
    expected = sums.sum(-1) * scale.astype(np.float64) + (0.0 if bias is None else bias)
    magnitudes = np.einsum("obi,mbi->mob", np.abs(w), np.abs(xq)) * sa[:, None, :]
    terms = magnitudes.sum(-1) * scale + (0.0 if bias is None else np.abs(bias))
    assert (np.abs(y.numpy() - expected) <= _bound(terms, into)).all()


def test_bad_blocks_are_refused(library: Kernels) -> None:
    x, y, w = torch.zeros(1, 96), torch.zeros(1, 1), torch.zeros(1, 96, dtype=torch.int8)
    scale = torch.ones(3)
    with pytest.raises(ValueError, match="block 8"):
        library.int8_linear_a8(
            x.data_ptr(), 1, 96, w.data_ptr(), scale.data_ptr(), 8, None, y.data_ptr(), 1
        )
    with pytest.raises(ValueError, match="group 40"):
        library.int4_linear_a8(
            x.data_ptr(), 1, 96, w.data_ptr(), scale.data_ptr(), w.data_ptr(), 40,
            None, y.data_ptr(), 1,
        )  # fmt: skip


# -- ONNX Runtime's MatMulNBits at accuracy_level=4 ----------------------------------------


def _matmul_nbits(
    into: int, out: int, bits: int, block: int, weights: tuple[Array, Array, Array]
) -> Any:
    """A session of one `MatMulNBits` node, its weights initializers (pre-packed)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node(
        "MatMulNBits", ["A", "B", "S", "Z"], ["Y"], domain="com.microsoft",
        K=into, N=out, bits=bits, block_size=block, accuracy_level=4,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", into])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", out])],
        initializer=[numpy_helper.from_array(a, n) for a, n in zip(weights, "BSZ", strict=True)],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    model = helper.make_model(graph, opset_imports=opsets)
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


@pytest.mark.parametrize(("bits", "block"), [(4, 32), (4, 128), (8, 128)])
def test_onnx_runtime_accuracy_level_4_is_the_same_function(bits: int, block: int) -> None:
    found = native.kernels()
    if found is None:
        pytest.skip(f"no native kernels: {native.status().reason}")
    rng = np.random.default_rng(bits * block)
    out, into, rows = 40, 4 * block, 3
    x = _x(rng, rows, into, block)
    y = torch.empty(rows, out)
    if bits == 4:
        packed = rng.integers(0, 256, (out, 4, block // 2)).astype(np.uint8)
        scale = rng.uniform(0.001, 0.05, (out, 4)).astype(np.float32)
        zero = rng.integers(0, 16, (out, 4)).astype(np.uint8)
        pairs = (zero[:, 0::2] | (zero[:, 1::2] << 4)).reshape(-1)
        session = _matmul_nbits(into, out, 4, block, (packed, scale.reshape(-1), pairs))
        found.int4_linear_a8(
            _tensor(x).data_ptr(), rows, into, _tensor(packed).data_ptr(),
            _tensor(scale).data_ptr(), _tensor(zero).data_ptr(), block, None, y.data_ptr(), out,
        )  # fmt: skip
        magnitude = np.abs(x).sum(1).max() * 15 * scale.max()
    else:
        q = rng.integers(-127, 128, (out, into)).astype(np.int8)
        rows_scale = rng.uniform(0.001, 0.05, out).astype(np.float32)
        shifted = (q.astype(np.int16) + 128).astype(np.uint8).reshape(out, 4, block)
        weights = (shifted, np.repeat(rows_scale, 4), np.full(out * 4, 128, np.uint8))
        session = _matmul_nbits(into, out, 8, block, weights)
        found.int8_linear_a8(
            _tensor(x).data_ptr(), rows, into, _tensor(q).data_ptr(),
            _tensor(rows_scale).data_ptr(), block, None, y.data_ptr(), out,
        )  # fmt: skip
        magnitude = np.abs(x).sum(1).max() * 128 * rows_scale.max()
    (expected,) = session.run(None, {"A": x})
    # both sum exact integers and differ only in how f32 combines them with the scales
    assert np.abs(y.numpy() - expected).max() <= 8 * np.sqrt(into) * EPS * magnitude
