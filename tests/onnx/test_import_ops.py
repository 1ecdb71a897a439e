"""ONNX operator translators (`linnet.onnx.importer.ops`), end to end against independent references.

Every test imports an ONNX model with `import_onnx`, runs the generated source
on `linnet.torch` and compares with a reference that does not go through the
importer: the expected outputs stored in ONNX's own backend node test cases,
or ONNX Runtime on the original model. The fast tests run a representative
case or two of every operator family, graphs with symbolic extents, and the
refusals; the slow test runs the whole node suite (`bench/onnx_node_suite.py`)
and holds it to the issue's aims.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from linnet.errors import LinnetError  # noqa: E402
from linnet.onnx.importer.api import import_onnx  # noqa: E402
from linnet.onnx.importer.graph import REGISTRY  # noqa: E402
from linnet.onnx.importer.ops import OPERATORS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@cache
def suite() -> ModuleType:
    """`bench/onnx_node_suite.py`, which holds the case runner the tests share."""
    spec = importlib.util.spec_from_file_location(
        "onnx_node_suite", ROOT / "bench" / "onnx_node_suite.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["onnx_node_suite"] = module
    spec.loader.exec_module(module)
    return module


@cache
def node_cases() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {c.name: c for c in suite().load_cases(None)}


# One or two cases of every operator family, including attribute variants and
# opset versions that change an operator's inputs (axes as attribute vs input).
FAST_CASES = """
test_add_bcast test_sub_uint8 test_mul_int16 test_div_int32_trunc test_mod_mixed_sign_int8
test_mod_mixed_sign_float32 test_pow_types_float32_int64 test_pow_types_int64_int64 test_pow_bcast_array
test_and_bcast4v3d test_xor4d test_not_3d test_equal_bcast test_less_equal_bcast test_greater
test_where_long_example test_max_example test_min_uint8 test_sum_example test_mean_example
test_bitshift_right_int8_negative_input test_bitshift_left_int32_shift_ge_width test_bitwise_not_3d
test_prelu_broadcast test_abs test_neg test_exp test_log test_sqrt test_reciprocal test_sign
test_floor test_ceil test_round test_erf test_atan test_asin test_acos test_tan test_sinh
test_cosh test_asinh test_acosh test_atanh test_isnan test_isinf_negative test_relu test_sigmoid
test_gelu_default_2 test_gelu_tanh_2 test_leakyrelu test_elu test_selu test_celu test_softplus
test_softsign test_mish test_hardsigmoid test_hardswish test_thresholdedrelu test_shrink_soft
test_cast_FLOAT_to_FLOAT16 test_cast_DOUBLE_to_FLOAT test_castlike_FLOAT_to_DOUBLE test_clip
test_clip_default_int8_min test_identity test_dropout_default test_shape_start_1_end_negative_1
test_size test_reshape_negative_extended_dims test_reshape_allowzero_reordered test_flatten_negative_axis2
test_squeeze_negative_axes test_unsqueeze_unsorted_axes test_transpose_all_permutations_3
test_expand_dim_changed test_tile test_concat_3d_axis_negative_2 test_split_equal_parts_2d
test_split_variable_parts_1d_opset13 test_constantofshape_int_zeros test_range_float_type_positive_delta
test_range_int32_type_negative_delta test_slice_neg_steps test_slice_start_out_of_bounds
test_constant_pad_axes test_edge_pad test_reflect_pad test_wrap_pad test_depthtospace_crd_mode_example
test_spacetodepth test_tril_neg test_triu_one_row test_eyelike_with_dtype test_reversesequence_time
test_center_crop_pad_crop_and_pad test_gather_negative_indices test_gather_2d_indices test_gather_elements_negative_indices
test_gathernd_example_int32_batch_dim1 test_onehot_negative_indices test_scatter_elements_with_reduction_max
test_scatternd_add test_reduce_sum_keepdims_random test_reduce_mean_do_not_keepdims_example
test_reduce_max_bool_inputs test_reduce_log_sum_exp_negative_axes_keepdims_random test_reduce_l2_keep_dims_random
test_reduce_prod_do_not_keepdims_example test_argmax_negative_axis_keepdims_random_select_last_index
test_argmin_no_keepdims_example test_softmax_axis_0 test_softmax_axis_1_expanded_ver18
test_logsoftmax_axis_1 test_hardmax_one_hot test_cumsum_2d_negative_axis test_cumsum_1d_reverse_exclusive
test_lpnormalization_default test_mvn test_matmul_4d test_matmul_1d_1d test_gemm_all_attributes
test_einsum_batch_diagonal test_einsum_inner_prod test_matmulinteger test_conv_with_strides_and_asymmetric_padding
test_conv_with_autopad_same test_basic_conv_with_padding test_convtranspose_pads test_convtranspose_group_2
test_maxpool_2d_ceil test_maxpool_3d_dilations test_maxpool_2d_default test_averagepool_2d_pads_count_include_pad
test_averagepool_2d_ceil test_lppool_2d_pads test_globalaveragepool test_globalmaxpool
test_batchnorm_example test_layer_normalization_4d_axis1_expanded_ver18 test_layer_normalization_2d_axis_negative_1
test_rms_normalization_3d_axis_negative_2_epsilon test_group_normalization_epsilon test_instancenorm_example
test_lrn test_resize_upsample_scales_nearest test_resize_downsample_scales_linear_antialias
test_resize_upsample_scales_cubic_align_corners test_resize_tf_crop_and_resize_extrapolation_value
test_attention_4d_gqa_causal test_attention_3d_with_past_and_present_qk_matmul_softcap
test_attention_4d_diff_heads_mask4d_padded_kv test_rotary_embedding_interleaved
test_rotary_embedding_with_rotary_dim test_nllloss_NCd1d2d3_none_no_weight_negative_ii
test_sce_mean_weight_ii_4d_log_prob
""".split()


def test_the_table_covers_the_issue_and_more() -> None:
    ops = {op for domain, op in OPERATORS if domain == ""}
    issue = {
        "Shape", "Gather", "Concat", "Unsqueeze", "Add", "Sub", "Mul", "Div", "Equal", "Less",
        "Greater", "Where", "Cast", "Transpose", "Reshape", "Slice", "Expand", "Identity", "Pow",
        "Reciprocal", "MatMul", "Gemm", "Softmax", "LayerNormalization", "Gelu", "Sigmoid",
        "Relu", "ReduceSum", "ReduceMean", "ReduceMax", "Erf", "GatherElements", "Conv",
        "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization", "Resize", "Split",
        "Squeeze", "Tile", "Range", "ConstantOfShape", "Clip", "Min", "Max", "Abs", "Neg", "Exp",
        "Log", "Sqrt", "Tanh", "Sin", "Cos",
    }  # fmt: skip
    assert issue <= ops, sorted(issue - ops)
    assert len(OPERATORS) >= 120
    assert REGISTRY.operators() == OPERATORS


@pytest.mark.parametrize("name", FAST_CASES)
def test_node_case(name: str, tmp_path: Path) -> None:
    case = node_cases()[name]
    outcome, detail, _ = suite().run_linnet(case, tmp_path, True)
    assert outcome == "pass", detail


# ---------------------------------------------------------------- symbolic extents


def _model(
    nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] = (), opset: int = 18
) -> Any:  # type: ignore[assignment]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _ort(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def _linnet(
    model: Any, feeds: dict[str, np.ndarray], tmp_path: Path
) -> tuple[str, list[np.ndarray]]:
    import torch

    import linnet.torch as lt

    result = import_onnx(model, output=tmp_path / "m.linnet", weights=tmp_path / "w")
    weights = result.weights if result.weights is not None and result.weights.exists() else None
    bindings = tmp_path / "w" / "bindings.json"
    module = lt.load(
        result.source, weights=weights, bindings=bindings if bindings.exists() else None
    )
    with torch.no_grad():
        out = module.run_entry(result.entry, list(feeds.values()))
    outs = out if isinstance(out, tuple) else (out,)
    return result.source, [o.numpy() for o in outs]


def _same(model: Any, sizes: list[dict[str, np.ndarray]], tmp_path: Path) -> str:
    source = ""
    for n, feeds in enumerate(sizes):
        expected = _ort(model, feeds)
        source, actual = _linnet(model, feeds, tmp_path / str(n))
        for a, e in zip(actual, expected, strict=True):
            assert a.shape == e.shape
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)
    return source


def test_shape_subgraphs_reshape_and_attention_layout(tmp_path: Path) -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds to `[batch, seq, 4, 8]`;
    Softmax over a non-last axis, a broadcast MatMul with a weight, Slice with a
    negative start, ReduceMean and Where over symbolic extents."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32), "w"
    )
    consts = [
        numpy_helper.from_array(np.array(v, dtype=np.int64), n)
        for n, v in (("i0", 0), ("i1", 1), ("heads", [4]), ("hd", [8]), ("ax0", [0]),
                     ("start", [-3]), ("end", [1 << 62]), ("axis1", [1]), ("keep", [2]))
    ]  # fmt: skip
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["proj"]),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["shape", "i1"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Concat", ["b1", "s1", "heads", "hd"], ["target"], axis=0),
        helper.make_node("Reshape", ["proj", "target"], ["split"]),
        helper.make_node("Transpose", ["split"], ["heads_first"], perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["heads_first"], ["probs"], axis=1),
        helper.make_node("Slice", ["probs", "start", "end", "keep"], ["tail"]),
        helper.make_node("ReduceMean", ["tail", "axis1"], ["y"], keepdims=0),
        helper.make_node("Greater", ["proj", "x"], ["bigger"]),
        helper.make_node("Where", ["bigger", "proj", "x"], ["z"]),
    ]
    model = _model(nodes, [x], [y, z], [w, *consts])
    rng = np.random.default_rng(1)
    source = _same(
        model,
        [{"x": rng.standard_normal((2, 5, 32)).astype(np.float32)},
         {"x": rng.standard_normal((3, 4, 32)).astype(np.float32)}],
        tmp_path,
    )  # fmt: skip
    assert "forward<batch: Dim, seq: Dim>" in source
    assert "reshape(" in source and "[batch, seq, 4, 8]" in source
    assert "softmax(" in source and "permute(" in source
    assert "where" in source and "seq >= 3" in source  # the negative start needs 3 rows


def test_gather_split_expand_range_over_symbolic_extents(tmp_path: Path) -> None:
    """Embedding lookup (Gather axis 0 with runtime ids), positions from Range over a
    Shape, Expand to a symbolic shape, Split into equal halves and Concat back."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    table = numpy_helper.from_array(
        np.random.default_rng(2).standard_normal((10, 6)).astype(np.float32), "table"
    )
    pos_table = numpy_helper.from_array(
        np.random.default_rng(3).standard_normal((16, 6)).astype(np.float32), "pos_table"
    )
    consts = [
        numpy_helper.from_array(np.array(v, dtype=np.int64), n)
        for n, v in (("one", 1), ("zero", 0), ("i1", 1))
    ]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
        helper.make_node("Shape", ["ids"], ["shape"]),
        helper.make_node("Gather", ["shape", "i1"], ["seq_len"], axis=0),
        helper.make_node("Range", ["zero", "seq_len", "one"], ["positions"]),
        helper.make_node("Gather", ["pos_table", "positions"], ["pos"], axis=0),
        helper.make_node("Shape", ["emb"], ["emb_shape"]),
        helper.make_node("Expand", ["pos", "emb_shape"], ["pos_b"]),
        helper.make_node("Add", ["emb", "pos_b"], ["h"]),
        helper.make_node("Split", ["h"], ["left", "right"], axis=2, num_outputs=2),
        helper.make_node("Concat", ["right", "left"], ["out"], axis=2),
    ]
    model = _model(nodes, [ids], [out], [table, pos_table, *consts])
    rng = np.random.default_rng(4)
    source = _same(
        model,
        [{"ids": rng.integers(0, 10, (2, 7)).astype(np.int64)},
         {"ids": rng.integers(0, 10, (1, 3)).astype(np.int64)}],
        tmp_path,
    )  # fmt: skip
    assert "iota<i64>(seq)" in source
    assert "concat(" in source and "broadcast_to(" in source


def test_conv_pool_norm_resize_over_a_symbolic_batch(tmp_path: Path) -> None:
    """The standard library's conv2d, batch_norm, relu, max_pool2d and upsample_nearest2d;
    a linear Resize and a grouped, dilated Conv in index notation; a symbolic batch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "shift"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.random(4).astype(np.float32) + 0.5, "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Resize", ["p", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Resize", ["up", "", "scales"], ["smooth"], mode="linear"),
        helper.make_node(
            "Conv", ["smooth", "dw"], ["grouped"], group=4, kernel_shape=[3, 3], dilations=[2, 2]
        ),
        helper.make_node("GlobalAveragePool", ["grouped"], ["y"]),
    ]
    inits += [
        numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales"),
        numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "dw"),
    ]
    model = _model(nodes, [x], [y], inits)
    source = _same(
        model,
        [{"x": rng.standard_normal((n, 3, 8, 8)).astype(np.float32)} for n in (2, 3)],
        tmp_path,
    )
    for call in ("conv2d<", "batch_norm(", "relu(", "max_pool2d<", "upsample_nearest2d<"):
        assert call in source, call


# ---------------------------------------------------------------- refusals


def _refusal(model: Any, tmp_path: Path) -> str:
    out = tmp_path / "refused.linnet"
    with pytest.raises(LinnetError) as info:
        import_onnx(model, output=out, weights=tmp_path / "w")
    assert not out.exists() and not (tmp_path / "w").exists()
    return str(info.value)


def test_unsupported_attributes_refuse_with_a_reason(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("d", "p", "r", "y")]
    outs.append(helper.make_tensor_value_info("f8", TensorProto.FLOAT8E4M3FN, None))
    ratio = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "ratio")
    train = numpy_helper.from_array(np.array(True), "train")
    nodes = [
        helper.make_node("Dropout", ["x", "ratio", "train"], ["d"], name="drop"),
        helper.make_node("MaxPool", ["x"], ["p", "idx"], kernel_shape=[2, 2], name="pool"),
        helper.make_node("Cast", ["x"], ["f8"], to=TensorProto.FLOAT8E4M3FN, name="narrow"),
        helper.make_node(
            "Resize", ["x", "", "scales"], ["r"], mode="nearest", antialias=1, name="aa"
        ),
        helper.make_node("Relu", ["x"], ["y"]),
    ]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")
    text = _refusal(_model(nodes, [x], outs, [ratio, train, scales], opset=19), tmp_path)
    for label, reason in (
        ("drop", "random"),
        ("pool", "Indices"),
        ("narrow", "FLOAT8E4M3FN"),
        ("aa", "antialias"),
    ):
        assert f"`{label}`" in text and reason in text, (label, text)


def test_nodes_outside_the_table_are_all_named(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("b", "f", "y")]
    outs.append(helper.make_tensor_value_info("nz", TensorProto.INT64, None))
    nodes = [
        helper.make_node("Bernoulli", ["x"], ["b"], name="coin"),
        helper.make_node("NonZero", ["x"], ["nz"], name="where_nonzero"),
        helper.make_node("FancyOp", ["x"], ["f"], domain="com.example", name="custom"),
        helper.make_node("Relu", ["x"], ["y"]),
    ]
    model = _model(nodes, [x], outs)
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    text = _refusal(model, tmp_path)
    for label, op in (
        ("coin", "Bernoulli"),
        ("where_nonzero", "NonZero"),
        ("custom", "com.example::FancyOp"),
    ):
        assert f"`{label}` ({op})" in text, text


def test_unused_unmapped_nodes_refuse_before_dead_nodes_are_dropped(tmp_path: Path) -> None:
    """An unmapped node whose result nothing reads (at the top level or inside an
    `If` branch) still stops the import: one typed error, every node named."""
    from linnet.onnx import UnmappedOperatorsError

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    branch_out = helper.make_tensor_value_info("picked", TensorProto.FLOAT, [3, 4])
    then_g = helper.make_graph(
        [
            helper.make_node("Gizmo", ["x"], ["unused_inner"], domain="com.example", name="inner"),
            helper.make_node("Identity", ["x"], ["picked"]),
        ],
        "then",
        [],
        [branch_out],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["picked"])], "else", [], [branch_out]
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [
        helper.make_node("Bernoulli", ["x"], ["coin_out"], name="coin"),
        helper.make_node("FancyOp", ["x"], ["fancy_out"], domain="com.example", name="custom"),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    model = _model(nodes, [x], [y], [cond])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    out = tmp_path / "refused.linnet"
    with pytest.raises(UnmappedOperatorsError) as info:
        import_onnx(model, output=out, weights=tmp_path / "w")
    assert not out.exists() and not (tmp_path / "w").exists()
    got = {(r.name, r.domain, r.op, r.reason) for r in info.value.refusals}
    assert got == {
        ("coin", "", "Bernoulli", "no translation for this operator"),
        ("custom", "com.example", "FancyOp", "no translation for this operator"),
        ("inner", "com.example", "Gizmo", "no translation for this operator"),
    }
    text = str(info.value)
    assert "3 node(s) have no Linnet translation" in text
    for label, op in (("coin", "Bernoulli"), ("custom", "com.example::FancyOp")):
        assert f"`{label}` ({op})" in text, text
    # Without the unmapped nodes the same graph imports (the dead Relu is dropped).
    then_g.node.pop(0)
    plain_if = helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)
    kept = _model([nodes[2], plain_if], [x], [y], [cond])
    source = _same(kept, [{"x": np.ones((3, 4), np.float32)}], tmp_path / "ok")
    assert "relu" not in source, source


def test_refusals_are_recognised_by_type(tmp_path: Path) -> None:
    """A translator's refusal is an `UnmappedOperatorsError`; a graph input of a dtype
    Linnet lacks is its base `ImportRefusedError`; both are `LinnetError`s."""
    from linnet.onnx import ImportRefusedError, UnmappedOperatorsError

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    p = helper.make_tensor_value_info("p", TensorProto.FLOAT, None)
    pool = helper.make_node("MaxPool", ["x"], ["p", "idx"], kernel_shape=[2, 2], name="pool")
    with pytest.raises(UnmappedOperatorsError) as info:
        import_onnx(_model([pool], [x], [p]), output=tmp_path / "a.linnet")
    (refusal,) = info.value.refusals
    assert (refusal.name, refusal.op) == ("pool", "MaxPool") and "Indices" in refusal.reason
    f8 = helper.make_tensor_value_info("f8", TensorProto.FLOAT8E4M3FN, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    cast = helper.make_node("Cast", ["f8"], ["y"], to=TensorProto.FLOAT)
    with pytest.raises(ImportRefusedError) as refused:
        import_onnx(_model([cast], [f8], [y], opset=19), output=tmp_path / "b.linnet")
    assert not isinstance(refused.value, UnmappedOperatorsError)
    assert isinstance(refused.value, LinnetError) and "dtype Linnet lacks" in str(refused.value)


def test_a_rank_0_folded_constant_stays_a_scalar(tmp_path: Path) -> None:
    """Two rank-0 constants folded into one (NumPy gives a scalar, not an array)
    stay a scalar: adding it to a scalar input gives a scalar, as in ONNX Runtime."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Constant", [], ["a"], value_float=2.5),
        helper.make_node("Constant", [], ["b"], value_float=4.0),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    source = _same(_model(nodes, [x], [y]), [{"x": np.array(0.25, np.float32)}], tmp_path)
    assert "6.5" in source and "-> f32" in source, source


def test_a_newer_opset_of_a_known_operator_still_translates(tmp_path: Path) -> None:
    """Translators key on the operator, not the opset version: ReduceSum at opset 11
    (axes attribute) and opset 21 (axes input) both import."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    old = _model(
        [helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)], [x], [y], opset=11
    )
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    new = _model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
        [x],
        [y],
        [axes],
        opset=21,
    )
    for n, model in enumerate((old, new)):
        _same(model, [feeds], tmp_path / f"v{n}")


# ---------------------------------------------------------------- the whole suite


@pytest.mark.slow
def test_node_suite_meets_the_aims(tmp_path: Path) -> None:
    """bench/onnx_node_suite.py over every node case: the issue's aims."""
    bench = suite()
    results: dict[str, Any] = {}
    cases = list(node_cases().values())
    operators = bench.case_operators(cases)
    for n, case in enumerate(cases):
        work = tmp_path / f"c{n}"
        work.mkdir()
        twin = node_cases().get(re.sub(r"_expanded(_ver\d+)?$", "", case.name))
        outcome, detail, _ = bench.run_linnet(case, work, True, twin)
        results[case.name] = (operators[case.name], outcome, detail, bench.linnet_dtypes_only(case))
    table = {op for _, op in OPERATORS}
    typed = [r for r in results.values() if r[0] in table and r[3]]
    passed = [r for r in typed if r[1] == "pass"]
    assert not [n for n, r in results.items() if r[1] == "error"]
    assert sum(r[1] == "pass" for r in results.values()) >= 1000
    assert len(passed) >= 0.97 * len(typed)
    transformer = {
        "MatMul", "Gemm", "Add", "Mul", "Sub", "Div", "Pow", "Sqrt", "Reciprocal", "Softmax",
        "LayerNormalization", "RMSNormalization", "Gelu", "Erf", "Tanh", "Sigmoid", "Gather",
        "Reshape", "Transpose", "Concat", "Slice", "Unsqueeze", "Squeeze", "Shape", "Cast",
        "Where", "Expand", "Range", "ReduceMean", "Neg", "Cos", "Sin", "Split", "Equal",
        "ConstantOfShape", "Trilu", "RotaryEmbedding",
    }  # fmt: skip
    failing = [n for n, r in results.items() if r[0] in transformer and r[3] and r[1] != "pass"]
    assert not failing, failing


@pytest.mark.parametrize("stop", [1_000_000_000, 2**31 - 1, 2**63 - 1])
def test_open_slice_sentinels_leave_no_vacuous_where(stop: int, tmp_path: Path) -> None:
    """tf2onnx/jax2tf write 1e9 (others INT32_MAX, INT64_MAX) for "to the end": on a
    symbolic axis that is the whole axis, with no `where n == min(1000000000, n)`."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    bounds = [
        numpy_helper.from_array(np.array([v], dtype=np.int64), k)
        for k, v in (("start", 1), ("stop", stop), ("axis", 0))
    ]
    nodes = [
        helper.make_node("Slice", ["x", "start", "stop", "axis"], ["tail"]),
        helper.make_node("Slice", ["x", "start", "stop", "axis"], ["tail2"]),
        helper.make_node("Add", ["tail", "tail2"], ["out"]),
    ]
    rng = np.random.default_rng(5)
    model = _model(nodes, [x], [out], bounds)
    feeds = [{"x": rng.standard_normal((n, 4)).astype(np.float32)} for n in (3, 6)]
    source = _same(model, feeds, tmp_path)
    assert "where" not in source and "min(" not in source, source


@pytest.mark.parametrize(
    ("op", "auto", "kernel"),
    [("Conv", "SAME_UPPER", 3), ("Conv", "SAME_LOWER", 2), ("MaxPool", "SAME_UPPER", 3),
     ("AveragePool", "SAME_LOWER", 2), ("AveragePool", "SAME_UPPER", 2)],
)  # fmt: skip
def test_same_padding_over_symbolic_extents(
    op: str, auto: str, kernel: int, tmp_path: Path
) -> None:
    """`auto_pad` SAME at stride 1 on symbolic height and width (OCR and detection
    models): the padding is the window less one whatever the extent."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "h", "w"])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    rng = np.random.default_rng(6)
    inits = []
    inputs = ["x"]
    attrs: dict[str, Any] = {"auto_pad": auto, "kernel_shape": [kernel, kernel]}
    if op == "Conv":
        w = rng.standard_normal((3, 2, kernel, kernel)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "weight"))
        inputs.append("weight")
    node = helper.make_node(op, inputs, ["out"], **attrs)
    model = _model([node], [x], [out], inits)
    feeds = [{"x": rng.standard_normal(s).astype(np.float32)} for s in ((1, 2, 5, 7), (2, 2, 4, 4))]
    source = _same(model, feeds, tmp_path)
    assert "forward<batch: Dim, h: Dim, w: Dim>" in source, source


def test_constant_node_weights_are_named_after_their_reader(tmp_path: Path) -> None:
    """Weights written as `Constant` nodes (tf2onnx-style names, no module scopes)
    become members named after the node that reads them, not `constant_N`."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 6, 6])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, None)
    rng = np.random.default_rng(7)
    kernel = numpy_helper.from_array(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "k")
    bias = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [
        helper.make_node("Constant", [], ["kernel_value"], value=kernel),
        helper.make_node("Constant", [], ["bias_value"], value=bias),
        helper.make_node("Conv", ["x", "kernel_value", "bias_value"], ["y"],
                         name="model/conv1/Conv2D", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["y"], ["out"], name="model/relu/Relu"),
    ]  # fmt: skip
    model = _model(nodes, [x], [out])
    feeds = [{"x": rng.standard_normal((2, 2, 6, 6)).astype(np.float32)}]
    source = _same(model, feeds, tmp_path)
    assert "model.conv1.weight" in source and "model.conv1.bias" in source, source
    assert "constant" not in source, source


def test_jax2tf_and_tf2onnx_wrapper_prefixes_are_cleaned(tmp_path: Path) -> None:
    """jax2tf/tf2onnx wrap every name (`jax2tf_f_/pjit_f_/dense/MatMul`,
    `serving_default_x:0`); the import names things after what is left."""
    prefix = "jax2tf_infer_fn_/pjit_infer_fn_/"
    x = helper.make_tensor_value_info("serving_default_x:0", TensorProto.FLOAT, ["batch", 4])
    out = helper.make_tensor_value_info("Identity:0", TensorProto.FLOAT, None)
    rng = np.random.default_rng(8)
    kernel = rng.standard_normal((4, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(kernel, prefix + "dense/ReadVariableOp:0")]
    nodes = [
        helper.make_node("MatMul", ["serving_default_x:0", prefix + "dense/ReadVariableOp:0"],
                         [prefix + "dense/MatMul:0"], name=prefix + "dense/MatMul"),
        helper.make_node("Relu", [prefix + "dense/MatMul:0"], ["Identity:0"],
                         name=prefix + "relu/Relu"),
    ]  # fmt: skip
    model = _model(nodes, [x], [out], inits)
    feeds = [{"serving_default_x:0": rng.standard_normal((2, 4)).astype(np.float32)}]
    source = _same(model, feeds, tmp_path)
    assert "jax2tf" not in source and "pjit" not in source and "serving" not in source, source
    assert "dense.weight_t" in source and "(x: Tensor[batch, 4; f32])" in source, source
