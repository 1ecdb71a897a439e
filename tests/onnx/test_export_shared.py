"""Several entries saved side by side with one data file (`linnet.onnx.save_together`).

Checked: the Llama example's `prefill` and `decode`, exported from one set of
arrays (a SafeTensors file opened once), write their weights once: the data
file holds each weight's bytes a single time and both models point into it;
both run from disk in ONNX Runtime and equal the same entries run by
`load_model` (prefill then a decode step); a weight only one entry reads and
tied weights (one array under two paths) are handled; no temporary file is
left behind, a failed write leaves the earlier files as they were, and the
files get the permissions of any other new file. `SavingTogether` (entry by
entry, the weights written in a thread while the next entry is exported)
writes the same files byte for byte, and a failure of its writer or of the
caller's export leaves the earlier files as they were.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_model_llama import CONFIG, EXAMPLE, example_module

from linnet.errors import LinnetError
from linnet.ir.core import Builder, Function, TensorType
from linnet.ir.interp import run_function
from linnet.onnx import SavingTogether, export_ir, export_model, load_model, save_together
from linnet.onnx.export import payload as payload_module
from linnet.weights.safetensors import read_safetensors, save_safetensors

Array = np.ndarray[Any, Any]
SOURCE = EXAMPLE / "src" / "lib.linnet"


def _external(path: Path) -> dict[str, tuple[str, int, int]]:
    """Each initializer stored outside the model: (location, offset, length)."""
    stored = onnx.load(str(path), load_external_data=False)
    found = {}
    for tensor in stored.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            found[tensor.name] = (info["location"], int(info["offset"]), int(info["length"]))
    return found


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file in `folder` by name, the data file's random version (in names and bytes) masked."""
    version = r"(weights|shared)\.[0-9a-f]{16}\.(data|bin)"
    return {
        re.sub(version, r"\1.V.\2", p.name): re.sub(version.encode(), rb"\1.V.\2", p.read_bytes())
        for p in folder.iterdir()
    }


def _session(path: Path) -> Any:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_llama_prefill_and_decode_share_one_data_file(tmp_path: Path) -> None:
    arrays = example_module().make_weights(CONFIG, seed=3)
    save_safetensors(arrays, tmp_path / "w.safetensors")
    opened = read_safetensors(tmp_path / "w.safetensors")  # memory-mapped, opened once
    out = tmp_path / "out"
    out.mkdir()
    exports = {
        "prefill": export_model(
            SOURCE, generics={**CONFIG, "S": 5}, weights=opened, entry="prefill"
        ),
        "decode": export_model(SOURCE, generics=CONFIG, weights=opened, entry="decode"),
    }
    paths = save_together(exports, out)
    # entry by entry, decode exported while prefill's weights are written: the same files
    overlapped = tmp_path / "overlapped"
    overlapped.mkdir()
    with SavingTogether(overlapped) as saving:
        saving.add("prefill", exports["prefill"])
        saving.add("decode", export_model(SOURCE, generics=CONFIG, weights=opened, entry="decode"))
    assert saving.paths == {name: overlapped / f"{name}.onnx" for name in exports}
    assert _contents(overlapped) == _contents(out)
    names = sorted(p.name for p in out.iterdir())
    assert names[:2] == ["decode.onnx", "prefill.onnx"] and len(names) == 3
    data_name = names[2]
    assert re.fullmatch(r"weights\.[0-9a-f]{16}\.data", data_name)
    weight_bytes = sum(a.nbytes for a in arrays.values())
    data_size = (out / data_name).stat().st_size
    assert weight_bytes * 0.95 < data_size < weight_bytes * 1.6, (data_size, weight_bytes)

    # both models point into the one file, at the same place for the same path
    by_path: dict[str, set[tuple[int, int]]] = {}
    for name, path in paths.items():
        places = _external(path)
        assert {location for location, _, _ in places.values()} == {data_name}
        for io in exports[name].by_role("param"):
            if io.name in places:
                by_path.setdefault(io.path or "", set()).add(places[io.name][1:])
    assert by_path and all(len(spots) == 1 for spots in by_path.values())

    # both run from disk and equal load_model running the same entries
    model = load_model(SOURCE, generics=CONFIG, weights=arrays)
    tokens = np.random.default_rng(2).integers(0, CONFIG["Vocab"], (1, 5)).astype(np.int32)
    expected_prefill = model.run_entry("prefill", [tokens, 0])
    expected_decode = model.run_entry("decode", [tokens[:, :1].reshape(1), 5])
    prefill, decode = _session(paths["prefill"]), _session(paths["decode"])
    feeds = {"tokens": tokens, "start": np.array(0, np.int32)}
    state_names = [i.name for i in prefill.get_inputs() if i.name.startswith("state")]
    for name in state_names:
        shape = next(i.shape for i in prefill.get_inputs() if i.name == name)
        feeds[name] = np.zeros(shape, np.float32)
    outs = prefill.run(None, feeds)
    np.testing.assert_allclose(outs[0], expected_prefill, rtol=1e-5, atol=1e-6)
    after = dict(zip([o.name for o in prefill.get_outputs()], outs, strict=True))
    state_of = _state_paths(paths["prefill"], "linnet.next_state.")
    decode_state = _state_paths(paths["decode"], "linnet.state.")
    feeds = {"token": tokens[:, :1].reshape(1), "position": np.array(5, np.int32)}
    by_state_path = {path: after[name] for name, path in state_of.items()}
    feeds.update({name: by_state_path[path] for name, path in decode_state.items()})
    decoded = decode.run(None, feeds)
    np.testing.assert_allclose(decoded[0], expected_decode, rtol=1e-5, atol=1e-6)


def _state_paths(path: Path, prefix: str) -> dict[str, str]:
    stored = onnx.load(str(path), load_external_data=False)
    return {
        p.key.removeprefix(prefix): p.value
        for p in stored.metadata_props
        if p.key.startswith(prefix)
    }


def _scaled(width: int, weights: tuple[str, ...]) -> Function:
    """x @ w for each weight name, summed: the entries below read different weights."""
    b = Builder.for_function([("x", TensorType((2, width), "f32"))])
    total = None
    for name in weights:
        w = b.param(name, TensorType((width, width), "f32"))
        product = b.contract(b.args[0], w, lhs_contract=[1], rhs_contract=[0])
        total = product if total is None else b.binary("add", total, product)
    assert total is not None
    return b.finish_function("scaled", [total])


def _arrays(width: int) -> dict[str, Array]:
    rng = np.random.default_rng(0)
    w1 = (rng.normal(size=(width, width)) / width).astype(np.float32)
    w2 = (rng.normal(size=(width, width)) / width).astype(np.float32)
    return {"w1": w1, "w2": w2, "tied": w1}


def test_weights_one_entry_reads_and_tied_weights(tmp_path: Path) -> None:
    width = 48
    arrays = _arrays(width)
    both = export_ir(_scaled(width, ("w1", "w2")), weights=arrays)
    tied = export_ir(_scaled(width, ("tied", "w1")), weights=arrays)
    paths = save_together({"both": both, "tied": tied}, tmp_path, data_file="shared.bin")
    (data,) = [p for p in tmp_path.iterdir() if re.fullmatch(r"shared\.[0-9a-f]{16}\.bin", p.name)]
    size = data.stat().st_size
    one = width * width * 4
    assert 2 * one <= size < 3 * one  # w1 (= tied) and w2, each once
    x = np.random.default_rng(1).normal(size=(2, width)).astype(np.float32)
    for name, fn in (("both", ("w1", "w2")), ("tied", ("tied", "w1"))):
        expected, _ = run_function(_scaled(width, fn), arrays, {}, [x])
        (actual,) = _session(paths[name]).run(None, {"x": x})
        np.testing.assert_allclose(actual, expected[0], rtol=1e-5, atol=1e-6)
    # the exported models are unchanged: still complete in memory, saved again alone
    again = both.save(tmp_path / "alone.onnx", external_data=True)
    (actual,) = _session(again).run(None, {"x": x})
    expected, _ = run_function(_scaled(width, ("w1", "w2")), arrays, {}, [x])
    np.testing.assert_allclose(actual, expected[0], rtol=1e-5, atol=1e-6)


def _entry_by_entry(models: dict[str, Any], folder: Path) -> None:
    with SavingTogether(folder) as saving:
        for name, exported in models.items():
            saving.add(name, exported)


@pytest.mark.parametrize("save", [save_together, _entry_by_entry])
def test_a_failed_write_leaves_the_earlier_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, save: Any
) -> None:
    arrays = _arrays(40)
    first = export_ir(_scaled(40, ("w1",)), weights=arrays)
    save_together({"m": first}, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    calls = 0
    real = payload_module.raw_view

    def failing(array: Array) -> Array:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(28, "No space left on device")
        return real(array)

    monkeypatch.setattr(payload_module, "raw_view", failing)
    second = export_ir(_scaled(40, ("w1", "w2")), weights=_arrays(40))
    with pytest.raises(LinnetError, match="No space left on device"):
        save({"m": second}, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_failed_export_while_saving_leaves_the_earlier_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_together({"m": export_ir(_scaled(40, ("w1",)), weights=_arrays(40))}, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    writing = threading.Event()
    real = payload_module.raw_view

    def noted(array: Array) -> Array:
        writing.set()
        return real(array)

    monkeypatch.setattr(payload_module, "raw_view", noted)
    with pytest.raises(LinnetError, match="the export failed"), SavingTogether(tmp_path) as saving:
        saving.add("m", export_ir(_scaled(40, ("w1", "w2")), weights=_arrays(40)))
        assert writing.wait(30)  # the data file is being written when the next export fails
        raise LinnetError("the export failed")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_files_get_the_usual_permissions(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        save_together({"m": export_ir(_scaled(40, ("w1",)), weights=_arrays(40))}, tmp_path)
    finally:
        os.umask(mask)
    assert {p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == {0o644}


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    exported = export_ir(_scaled(40, ("w1",)), weights=_arrays(40))
    with pytest.raises(LinnetError, match="not a folder"):
        save_together({"m": exported}, tmp_path / "missing")
    with pytest.raises(LinnetError, match="must be a file name"):
        save_together({"m": exported}, tmp_path, data_file="sub/w.data")
    with pytest.raises(LinnetError, match="at least one"):
        save_together({}, tmp_path)


def test_one_entry_saved_under_two_names(tmp_path: Path) -> None:
    exported = export_ir(_scaled(40, ("w1",)), weights=_arrays(40))
    paths = save_together({"a": exported, "b": exported}, tmp_path)
    x = np.random.default_rng(1).normal(size=(2, 40)).astype(np.float32)
    expected, _ = run_function(_scaled(40, ("w1",)), _arrays(40), {}, [x])
    for path in paths.values():
        stored = onnx.load(str(path), load_external_data=False)
        keys = [e.key for e in stored.graph.initializer[0].external_data]
        assert sorted(keys) == ["length", "location", "offset"]  # pointed once, not twice
        (actual,) = _session(path).run(None, {"x": x})
        np.testing.assert_allclose(actual, expected[0], rtol=1e-5, atol=1e-6)
