"""The `std.quant` layouts against the library that defines them: ONNX Runtime.

- `rtn.int4_groups` gives the very bytes, scales and (packed) zero points of
  ONNX Runtime's own block quantiser (`MatMulNBitsQuantizer`'s
  `DefaultWeightOnlyQuantizer`, asymmetric RTN), odd group counts and
  all-zero or one-signed groups included.
- The std body `dequantize_int4_groups` (run by the NumPy reference
  interpreter) on that quantiser's output equals ONNX Runtime's own
  dequantisation exactly: `MatMulNBits` times the identity, which adds only
  zeros to each dequantised weight.
- `Int4GroupLinear` and `Int8Linear` (interpreter) equal a `MatMulNBits` node
  built and run by ONNX Runtime on the same bytes, within f32 rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from stdlib.stdlib_support import StdBlock, StdCases

from linnet.quant import int4_groups, int8_rows, pack_zero_points

ort = pytest.importorskip("onnxruntime")
nbits = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")

Array = np.ndarray[Any, Any]

DEQUANTIZE = """module cases

use std.quant::{dequantize_int4_groups}

pub entry groups<Out: Dim, G: Dim, Half: Dim>(
    packed: Tensor[Out, G, Half; u8],
    scale: Tensor[Out, G; f32],
    zero: Tensor[Out, G; u8],
) -> Tensor[Out, G * (2 * Half); f32] {
    return dequantize_int4_groups(packed, scale, zero)
}
"""

BLOCKS = """module cases

use std.quant::{Int4GroupLinear, Int8Linear}

pub block Model<In: Dim, Out: Dim>
where In % 32 == 0 {
    sub four: Int4GroupLinear<In, Out, 32, f32>
    sub eight: Int8Linear<In, Out, f32>

    pub entry forward<*S: Shape>(x: Tensor[*S, In; f32]) -> (Tensor[*S, Out; f32], Tensor[*S, Out; f32]) {
        return (four.forward(x), eight.forward(x))
    }
}
"""


def ort_quantise(weight: Array, group: int) -> tuple[Array, Array, Array]:
    """ONNX Runtime's quantiser on a linear weight `[Out, In]` (it takes MatMul's `[In, Out]`)."""
    config = nbits.DefaultWeightOnlyQuantConfig(block_size=group, is_symmetric=False)
    quantizer = nbits.DefaultWeightOnlyQuantizer(config)
    packed, scales, zeros = quantizer.qbits_block_quant(np.ascontiguousarray(weight.T))
    return packed, scales, zeros


def unpack_zero_points(packed: Array, groups: int) -> Array:
    nibbles = np.stack([packed & 15, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    return nibbles[:, :groups].astype(np.uint8)


def matmul_nbits(
    x: Array, b: Array, scales: Array, zeros: Array, *, bits: int, block: int
) -> Array:
    """One `MatMulNBits` node (B, scales and zero points as initializers) run by ONNX Runtime."""
    rows = b.shape[0]
    width = x.shape[-1]
    inits = [
        helper.make_tensor("B", TensorProto.UINT8, b.shape, b.tobytes(), raw=True),
        helper.make_tensor("S", TensorProto.FLOAT, [scales.size], scales.tobytes(), raw=True),
        helper.make_tensor("Z", TensorProto.UINT8, [zeros.size], zeros.tobytes(), raw=True),
    ]
    node = helper.make_node(
        "MatMulNBits", ["x", "B", "S", "Z"], ["y"], domain="com.microsoft",
        K=width, N=rows, bits=bits, block_size=block, accuracy_level=1,
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*x.shape[:-1], rows])],
        inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x})
    return np.asarray(y)


def weights(rng: np.random.Generator, out: int, width: int, group: int) -> Array:
    w = (rng.standard_normal((out, width)) * 0.05).astype(np.float32)
    w[0, :group] = np.abs(w[0, :group])  # a group with no negative weight
    w[1, :group] = 0.0  # an all-zero group (scale 0)
    w[2, :group] = -np.abs(w[2, :group])
    return w


@pytest.mark.parametrize(("out", "width", "group"), [(40, 256, 128), (24, 384, 128), (9, 96, 16)])
def test_rtn_int4_is_onnxruntimes_quantiser(out: int, width: int, group: int) -> None:
    w = weights(np.random.default_rng(width + group), out, width, group)
    packed, scales, zeros = ort_quantise(w, group)
    ours, our_scales, our_zeros = int4_groups(w, group)
    assert ours.shape == packed.shape == (out, width // group, group // 2)
    np.testing.assert_array_equal(ours, packed)
    np.testing.assert_array_equal(our_scales, scales)
    np.testing.assert_array_equal(pack_zero_points(our_zeros), zeros)
    np.testing.assert_array_equal(our_zeros, unpack_zero_points(zeros, width // group))


@pytest.mark.parametrize(("width", "group"), [(256, 128), (384, 128), (96, 32)])
def test_std_dequantisation_equals_onnxruntimes(width: int, group: int) -> None:
    rng = np.random.default_rng(width)
    w = weights(rng, 12, width, group)
    packed, scales, zeros = ort_quantise(w, group)
    groups = width // group
    std = StdCases(DEQUANTIZE)
    ours = std.run("groups", [packed, scales, unpack_zero_points(zeros, groups)])["numpy"][0]
    theirs = matmul_nbits(
        np.eye(width, dtype=np.float32), packed, scales, zeros, bits=4, block=group
    )
    np.testing.assert_array_equal(ours, theirs.T)


def test_quantised_blocks_equal_matmul_nbits() -> None:
    rng = np.random.default_rng(7)
    n_in, n_out = 64, 10
    w = weights(rng, n_out, n_in, 32)
    packed, scales, zeros = int4_groups(w, 32)
    q8, s8 = int8_rows(w)
    x = rng.standard_normal((2, 3, n_in)).astype(np.float32)
    model = StdBlock(BLOCKS, "Model")
    bound = {
        "four.weight": packed, "four.scale": scales, "four.zero": zeros,
        "eight.weight": q8, "eight.scale": s8,
    }  # fmt: skip
    four = matmul_nbits(x, packed, scales, pack_zero_points(zeros), bits=4, block=32)
    unsigned = (q8.astype(np.int32) + 128).astype(np.uint8).reshape(n_out, 2, 32)
    eight = matmul_nbits(
        x, unsigned, np.repeat(s8, 2), np.full(n_out * 2, 128, np.uint8), bits=8, block=32
    )
    model.expect({"In": n_in, "Out": n_out}, bound, [x], [four, eight], atol=1e-5)


def test_int8_rows_round_half_away_and_reconstruct() -> None:
    w = np.array([[1.0, -0.5, 127.0, 0.25], [0.0, 0.0, 0.0, 0.0], [-2.54, 1.27, 0.0, 0.005]])
    q, scale = int8_rows(w.astype(np.float32))
    assert q.dtype == np.int8 and scale.dtype == np.float32
    assert q[0].tolist() == [1, -1, 127, 0] and scale[0] == 1.0  # -0.5 rounds away from zero
    assert q[1].tolist() == [0, 0, 0, 0] and scale[1] == 0.0
    assert q[2].tolist() == [-127, 64, 0, 0]
    step = scale[:, None] / 2
    assert np.all(np.abs(q * scale[:, None] - w) <= step + 1e-6)
