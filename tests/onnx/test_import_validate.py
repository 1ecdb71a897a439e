"""Broken model files are refused by name before anything is translated or written.

`linnet.onnx.importer.validate`: an empty file, a file that is no model,
two nodes writing one tensor, a cycle, a graph output listed twice, a read
of a tensor nothing defines, and what only onnx's checker sees (nodes out
of order, an unknown opset version) each raise a `LinnetError` that names
the tensor and the nodes, and leave the output folder empty.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from linnet.errors import LinnetError
from linnet.onnx import import_onnx


def _model(
    nodes: Sequence[onnx.NodeProto],
    outputs: Sequence[str],
    initializers: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2]) for o in outputs],
        initializer=list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _refused(tmp_path: Path, model: onnx.ModelProto | Path, pattern: str) -> None:
    source = model
    if isinstance(model, onnx.ModelProto):
        source = tmp_path / "m.onnx"
        onnx.save(model, source)
    out = tmp_path / "out"
    with pytest.raises(LinnetError, match=pattern):
        import_onnx(source, output=out / "m.linnet", weights=out / "w")
    assert not out.exists()


def test_an_empty_file_is_not_an_empty_model(tmp_path: Path) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    _refused(tmp_path, empty, r"cannot import .*empty\.onnx: the file is empty \(0 bytes\)")


def test_a_file_that_decodes_to_no_model(tmp_path: Path) -> None:
    other = tmp_path / "other.onnx"
    other.write_bytes(b"\x08\x00")  # a valid protobuf: ir_version 0, nothing else
    _refused(tmp_path, other, "not an ONNX model")


def test_two_nodes_writing_one_tensor(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="first"),
        helper.make_node("Neg", ["x"], ["y"], name="second"),
    ]
    _refused(
        tmp_path,
        _model(nodes, ["y"]),
        r"tensor `y` is written by two nodes, `first` \(Relu\) "
        r"and `second` \(Neg\)",
    )


def test_a_node_overwriting_an_initializer(tmp_path: Path) -> None:
    bias = numpy_helper.from_array(np.zeros(2, np.float32), "bias")
    nodes = [helper.make_node("Relu", ["x"], ["bias"], name="clobber")]
    _refused(
        tmp_path,
        _model(nodes, ["bias"], [bias]),
        r"`clobber` \(Relu\) writes `bias`, "
        "which is already an initializer",
    )


def test_a_cycle_is_named_with_its_nodes(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"], name="n1"),
        helper.make_node("Relu", ["a"], ["b"], name="n2"),
        helper.make_node("Neg", ["b"], ["c"], name="n3"),
    ]
    _refused(
        tmp_path,
        _model(nodes, ["b"]),
        r"the graph has a cycle: `n1` \(Add\) writes `a` -> `n2` \(Relu\) writes `b` -> "
        r"`n3` \(Neg\) writes `c`, which the first node reads",
    )


def test_a_cycle_at_the_end_of_a_long_chain(tmp_path: Path) -> None:
    """The search is iterative: a chain longer than Python's recursion limit is fine."""
    length = 5000
    nodes = [helper.make_node("Relu", ["loop"], ["t0"], name="head")]
    nodes += [
        helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(length)
    ]
    nodes.append(helper.make_node("Add", ["x", f"t{length}"], ["loop"], name="back"))
    _refused(tmp_path, _model(nodes, ["loop"]), r"the graph has a cycle: `head` \(Relu\) writes")


def test_a_graph_output_listed_twice(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a")]
    _refused(tmp_path, _model(nodes, ["y", "y"]), "graph output `y` is listed twice")


def test_a_read_of_a_tensor_nothing_defines(tmp_path: Path) -> None:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="a")]
    _refused(
        tmp_path,
        _model(nodes, ["y"]),
        r"node `a` \(Add\) reads `ghost`, which no graph input, initializer or node defines",
    )
    _refused(tmp_path, _model([], ["nowhere"]), "graph output `nowhere` is defined by nothing")


def test_what_only_the_checker_sees(tmp_path: Path) -> None:
    out_of_order = [
        helper.make_node("Neg", ["a"], ["y"], name="late"),
        helper.make_node("Relu", ["x"], ["a"], name="early"),
    ]
    _refused(tmp_path, _model(out_of_order, ["y"]), "ONNX checker refuses it: .*topologically")
    concat = [helper.make_node("Concat", ["x", "x"], ["y"], name="join")]  # no `axis`
    _refused(tmp_path, _model(concat, ["y"]), "ONNX checker refuses it: .*axis")


def test_a_valid_model_with_big_weights_still_imports(tmp_path: Path) -> None:
    """Stored tensors over 4 KiB are left out of the checker's copy, not checked by reading."""
    table = np.arange(4096, dtype=np.float32).reshape(2048, 2)
    weight = numpy_helper.from_array(table, "table")
    nodes = [helper.make_node("Add", ["x", "row"], ["y"], name="add")]
    row = numpy_helper.from_array(np.ones(2, np.float32), "row")
    model = _model(nodes, ["y"], [weight, row])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data")
    result = import_onnx(tmp_path / "m.onnx", output=tmp_path / "m.linnet", weights=tmp_path / "w")
    assert "pub entry forward" in result.source


def _relu_file(tmp_path: Path) -> Path:
    path = tmp_path / "relu.onnx"
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"], name="a")], ["y"]), path)
    return path


def test_folders_it_may_not_create_are_clear_errors(tmp_path: Path) -> None:
    model = _relu_file(tmp_path)
    (tmp_path / "file.txt").write_text("a file, not a folder")
    blocked = tmp_path / "file.txt" / "sub"
    with pytest.raises(LinnetError, match=r"cannot create the output folder `.*file\.txt/sub`"):
        import_onnx(model, output=blocked / "m.linnet", weights=tmp_path / "w")
    assert not (tmp_path / "w").exists()  # nothing written before the refusal
    with pytest.raises(LinnetError, match=r"cannot create the weights folder `.*file\.txt/sub`"):
        import_onnx(model, output=tmp_path / "m.linnet", weights=blocked)
    with pytest.raises(LinnetError, match="a file has that name"):
        import_onnx(model, output=tmp_path / "m.linnet", weights=tmp_path / "file.txt")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_a_read_only_parent_is_a_clear_error(tmp_path: Path) -> None:
    model = _relu_file(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(LinnetError, match="Permission denied"):
            import_onnx(model, output=locked / "out" / "m.linnet")
    finally:
        locked.chmod(0o700)
