"""`std.quant` linears on ONNX Runtime (`MatMulNBits`, folded int8 / FP8 / MXFP4), against the body.

`fused=True` turns `linear_int4_groups` (what `Int4GroupLinear` calls) into
ONNX Runtime's weight-only kernel, and `linear_int8` (`Int8Linear`) into a
`MatMul` on its dequantised weight marked for folding at load; the graph
that inlines the std body (both run in ONNX Runtime) and the NumPy reference
interpreter must agree with it. Sizes the kernel cannot take (a block that is
not a power of two of at least 16) inline the body. FP8 and MXFP4 weights are
decoded by lookup tables and folded like int8 ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases import assert_close
from export_support import checked, run_onnx, validate

from linnet.ir.core import Function, TensorType, dtype_of_numpy
from linnet.ir.interp import run_function
from linnet.ir.lower import lower_function
from linnet.ir.passes import optimize
from linnet.onnx import export_ir
from linnet.onnx.export.fused_quant import FOLD_MARK

OPS = """
module t

use std.quant::{linear_fp8, linear_int4_groups, linear_int8, linear_mxfp4}

pub entry four<*S: Shape, Out: Dim, G: Dim, Half: Dim>(
    x: Tensor[*S, G * (2 * Half); f32],
    packed: Tensor[Out, G, Half; u8],
    scale: Tensor[Out, G; f32],
    zero: Tensor[Out, G; u8],
    bias: Tensor[Out; f32],
) -> (Tensor[*S, Out; f32], Tensor[*S, Out; f32]) {
    return (
        linear_int4_groups(x, packed, scale, zero, none),
        linear_int4_groups(x, packed, scale, zero, some(bias)),
    )
}

pub entry eight<*S: Shape, In: Dim, Out: Dim>(
    x: Tensor[*S, In; f32],
    weight: Tensor[Out, In; i8],
    scale: Tensor[Out; f32],
    bias: Tensor[Out; f32],
) -> (Tensor[*S, Out; f32], Tensor[*S, Out; f32]) {
    return (linear_int8(x, weight, scale, none), linear_int8(x, weight, scale, some(bias)))
}

pub entry fp8<*S: Shape, In: Dim, Out: Dim>(
    x: Tensor[*S, In; f32],
    weight: Tensor[Out, In; u8],
    scale: Tensor[Out, 1; f32],
    bias: Tensor[Out; f32],
) -> (Tensor[*S, Out; f32], Tensor[*S, Out; f32]) {
    return (linear_fp8(x, weight, scale, none), linear_fp8(x, weight, scale, some(bias)))
}

pub entry mxfp4<*S: Shape, Out: Dim, G: Dim>(
    x: Tensor[*S, G * 32; f32],
    blocks: Tensor[Out, G, 16; u8],
    scales: Tensor[Out, G; u8],
    bias: Tensor[Out; f32],
) -> (Tensor[*S, Out; f32], Tensor[*S, Out; f32]) {
    return (linear_mxfp4(x, blocks, scales, none), linear_mxfp4(x, blocks, scales, some(bias)))
}
"""


def _function(name: str, inputs: list[np.ndarray]) -> Function:
    program = checked(OPS)
    types = [TensorType(a.shape, dtype_of_numpy(a.dtype)) for a in inputs]
    return optimize(lower_function(program, program.graph.roots[0], name, types, generics={}))


def _kernels(fn: Function, inputs: list[np.ndarray]) -> list[str]:
    """Run fused and plain exports; both must match the reference. The fused node types."""
    expected, _ = run_function(fn, {}, {}, inputs)
    fused = export_ir(fn, fused=True)
    plain = export_ir(fn, fused=False)
    validate(fused, contrib=True)
    got, _ = run_onnx(fused, inputs)
    baseline, _ = run_onnx(plain, inputs)
    for a, b, e in zip(got, baseline, expected, strict=True):
        assert_close(a, e, "f32", scale=2.0)
        assert_close(b, e, "f32", scale=2.0)
    assert "MatMulNBits" not in {n.op_type for n in plain.model.graph.node}
    return ["fold" if n.name.startswith(FOLD_MARK) else n.op_type for n in fused.model.graph.node]


def _int4(rng: np.random.Generator, out: int, groups: int, half: int) -> list[np.ndarray]:
    return [
        rng.integers(0, 256, (out, groups, half)).astype(np.uint8),
        rng.uniform(0.01, 0.2, (out, groups)).astype(np.float32),
        rng.integers(0, 16, (out, groups)).astype(np.uint8),
        rng.normal(size=out).astype(np.float32),
    ]


@pytest.mark.parametrize(
    ("lead", "groups", "half"), [((3,), 2, 16), ((2, 5), 3, 8), ((), 1, 64), ((1,), 5, 32)]
)
def test_int4_groups_as_matmul_nbits(lead: tuple[int, ...], groups: int, half: int) -> None:
    """Odd group counts exercise the padded zero-point byte; a vector input gets a leading 1."""
    rng = np.random.default_rng(groups * 10 + half)
    x = rng.normal(size=(*lead, groups * 2 * half)).astype(np.float32)
    inputs = [x, *_int4(rng, 7, groups, half)]
    kinds = _kernels(_function("four", inputs), inputs)
    assert kinds.count("MatMulNBits") == 2


def test_int4_groups_of_an_unsupported_block_inline_the_body() -> None:
    rng = np.random.default_rng(3)
    inputs = [rng.normal(size=(2, 24)).astype(np.float32), *_int4(rng, 4, 2, 6)]
    assert "MatMulNBits" not in _kernels(_function("four", inputs), inputs)


@pytest.mark.parametrize(("lead", "width"), [((3,), 64), ((2, 2), 48), ((), 256), ((2,), 24)])
def test_int8_is_a_matmul_on_a_weight_marked_for_folding(lead: tuple[int, ...], width: int) -> None:
    rng = np.random.default_rng(width)
    x = rng.normal(size=(*lead, width)).astype(np.float32)
    weight = rng.integers(-128, 128, (6, width)).astype(np.int8)
    weight[0, :4] = [-128, 127, 0, -1]
    scale = rng.uniform(0.001, 0.05, 6).astype(np.float32)
    inputs = [x, weight, scale, rng.normal(size=6).astype(np.float32)]
    kinds = _kernels(_function("eight", inputs), inputs)
    assert kinds.count("fold") == 2 and kinds.count("MatMul") == 2


def test_int8_activations_round_the_activations_in_both_kernels() -> None:
    """`int8_activations=True`: MatMulNBits at accuracy_level 4 for int4 and int8 weights,
    close to the f32 function (the activations lose ~1/255 per block), not equal to it."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(3, 64)).astype(np.float32)
    four = [x, *_int4(rng, 7, 2, 16)]
    q = rng.integers(-127, 128, (6, 64)).astype(np.int8)
    eight = [x, q, rng.uniform(0.001, 0.05, 6).astype(np.float32), np.zeros(6, np.float32)]
    for name, inputs, bits in (("four", four, 4), ("eight", eight, 8)):
        fn = _function(name, inputs)
        expected, _ = run_function(fn, {}, {}, inputs)
        exported = export_ir(fn, fused=True, int8_activations=True)
        nodes = [n for n in exported.model.graph.node if n.op_type == "MatMulNBits"]
        assert len(nodes) == 2
        for node in nodes:
            attrs = {a.name: a.i for a in node.attribute if a.name in ("bits", "accuracy_level")}
            assert attrs == {"bits": bits, "accuracy_level": 4}
        got, _ = run_onnx(exported, inputs)
        for a, e in zip(got, expected, strict=True):
            error = np.abs(a - e).max() / np.abs(e).max()
            assert 0 < error < 0.02, (name, error)


@pytest.mark.parametrize("lead", [(3,), (2, 2), ()])
def test_fp8_and_mxfp4_are_matmuls_on_weights_marked_for_folding(lead: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(lead))
    x = rng.normal(size=(*lead, 64)).astype(np.float32)
    # exponents 5..9 (values 0.25..3.75, no cancellation far below f32's tolerance), signed
    q = (rng.integers(5, 10, (6, 64)) << 3 | rng.integers(0, 8, (6, 64))).astype(np.uint8)
    q |= (rng.integers(0, 2, (6, 64)) << 7).astype(np.uint8)
    q[0, :4] = [0x7F, 0x80, 0x01, 0x02]  # a NaN byte reads 480; -0; subnormals
    q[1, 0] = 0xFF  # and -480
    scale = rng.uniform(0.0001, 0.001, (6, 1)).astype(np.float32)
    bias = rng.normal(size=6).astype(np.float32)
    blocks = rng.integers(0, 256, (6, 2, 16)).astype(np.uint8)
    scales = rng.integers(118, 132, (6, 2)).astype(np.uint8)
    scales[0, 0] = 100  # 2^-27: the table holds every E8M0 power the body computes
    for name, inputs in (("fp8", [x, q, scale, bias]), ("mxfp4", [x, blocks, scales, bias])):
        kinds = _kernels(_function(name, inputs), inputs)
        assert kinds.count("fold") == 2 and kinds.count("MatMul") == 2, name


@pytest.mark.parametrize(("width", "block"), [(256, 128), (192, 64), (96, 32), (48, 16)])
def test_int8_activations_blocks_are_the_first_of_int8_blocks_dividing_in(
    width: int, block: int
) -> None:
    """The int8 kernel's block (how many activations share an int8 scale) is the first of
    `INT8_BLOCKS` dividing `In`; whatever it is, the row's scale makes the weight exact
    and only the activations are rounded (close to the f32 function, not equal)."""
    rng = np.random.default_rng(width)
    x = rng.normal(size=(2, width)).astype(np.float32)
    q = rng.integers(-127, 128, (5, width)).astype(np.int8)
    q[0, :4] = [-128, 127, 0, -1]  # the ends of the byte: B = q + 128 wraps nothing
    inputs = [x, q, rng.uniform(0.001, 0.05, 5).astype(np.float32), np.zeros(5, np.float32)]
    fn = _function("eight", inputs)
    expected, _ = run_function(fn, {}, {}, inputs)
    exported = export_ir(fn, fused=True, int8_activations=True)
    for node in (n for n in exported.model.graph.node if n.op_type == "MatMulNBits"):
        attrs = {a.name: a.i for a in node.attribute}
        assert (attrs["bits"], attrs["block_size"], attrs["accuracy_level"]) == (8, block, 4)
    got, _ = run_onnx(exported, inputs)
    for a, e in zip(got, expected, strict=True):
        error = np.abs(a - e).max() / np.abs(e).max()
        assert 0 < error < 0.02, (width, error)
