"""`linnet.triton.export`: repositories checked with Triton's own config schema and ONNX Runtime.

Every `config.pbtxt` is parsed with `tritonclient.grpc.model_config_pb2` (the
`ModelConfig` message Triton itself reads) through `google.protobuf.text_format`,
so a field Triton does not know, or a value of the wrong kind, fails here. The
ONNX repository's `model.onnx` runs in ONNX Runtime against `linnet.torch`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from triton_support import (
    LLAMA_GENERICS,
    LLAMA_SOURCE,
    TINY_SOURCE,
    llama_weights,
    tiny_generics,
    tiny_reference,
    tiny_weights,
)

import linnet.triton
from linnet.errors import LinnetError
from linnet.ir.core import DTYPES

pytest.importorskip("onnxruntime")
model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
text_format = pytest.importorskip("google.protobuf.text_format")


def parse(path: Path) -> Any:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def data_type(name: str) -> int:
    value: int = model_config_pb2.DataType.Value(name)
    return value


def test_every_linnet_dtype_has_a_triton_type() -> None:
    assert set(linnet.triton.TRITON_DTYPES) == set(DTYPES)
    for name in linnet.triton.TRITON_DTYPES.values():
        assert data_type(name) != data_type("TYPE_INVALID")


def test_onnx_repository_batches_and_matches_torch(tmp_path: Path) -> None:
    import onnxruntime as ort

    weights = tiny_weights(tmp_path)
    repo = linnet.triton.export(
        TINY_SOURCE,
        tmp_path / "repo",
        generics=tiny_generics(),
        weights=weights,
        dynamic=["B", "S"],
        max_batch_size=4,
    )
    assert repo.model_folder == tmp_path / "repo" / "03-tiny-transformer"
    config = parse(repo.config_path)
    assert config.name == "03-tiny-transformer"
    assert config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    [ids] = config.input
    assert (ids.name, ids.data_type, list(ids.dims)) == ("ids", data_type("TYPE_INT32"), [-1])
    [logits] = config.output
    assert (logits.data_type, list(logits.dims)) == (data_type("TYPE_FP32"), [-1, 48])
    assert [p.name for p in repo.files] == ["model.onnx"]

    session = ort.InferenceSession(str(repo.version_folder / "model.onnx"))
    for shape in [(2, 5), (3, 4)]:
        tokens = np.random.default_rng(sum(shape)).integers(0, 48, shape).astype(np.int32)
        [got] = session.run(None, {"ids": tokens})
        np.testing.assert_allclose(got, tiny_reference(weights, tokens), rtol=1e-5, atol=1e-5)


SCALAR_SOURCE = """module scaled
pub block Scale<N: Dim> {
    param gain: Tensor[N; f64]
    pub entry forward(x: Tensor[N; f64], k: f64, step: i64) -> (Tensor[N; f64], i64) {
        return (x * gain * k, step + 1)
    }
}
"""


def test_scalars_travel_as_one_element(tmp_path: Path) -> None:
    import onnxruntime as ort

    gain = np.array([1.0, 2.0, 3.0])
    repo = linnet.triton.export(
        SCALAR_SOURCE, tmp_path, name="scaled", generics={"N": 3}, weights={"gain": gain}
    )
    config = parse(repo.config_path)
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    x, k, step = config.input
    assert (list(x.dims), x.data_type, x.HasField("reshape")) == (
        [3],
        data_type("TYPE_FP64"),
        False,
    )
    for scalar, dtype in ((k, "TYPE_FP64"), (step, "TYPE_INT64")):
        assert list(scalar.dims) == [1]
        assert scalar.data_type == data_type(dtype)
        assert scalar.HasField("reshape") and list(scalar.reshape.shape) == []
    assert [list(o.dims) for o in config.output] == [[3], [1]]
    assert config.output[1].HasField("reshape")

    session = ort.InferenceSession(str(repo.version_folder / "model.onnx"))
    feeds = {"x": np.array([1.0, 1.0, 2.0]), "k": np.array(0.5), "step": np.array(4, np.int64)}
    scaled, stepped = session.run(None, feeds)
    np.testing.assert_array_equal(scaled, [0.5, 1.0, 3.0])
    assert int(stepped) == 5


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("onnx", "export it with backend='python'"),
        ("python", "keeps state per sequence for a decoder only"),
    ],
)
def test_stateful_entries_are_refused(tmp_path: Path, backend: str, message: str) -> None:
    with pytest.raises(LinnetError, match=message) as caught:
        linnet.triton.export(
            LLAMA_SOURCE,
            tmp_path,
            name="llama",
            entry="decode",
            generics=LLAMA_GENERICS,
            weights=llama_weights(),
            backend=backend,  # type: ignore[arg-type]
        )
    assert "entry `decode` reads or writes state (model.layers.0" in caught.value.message
    assert not (tmp_path / "llama").exists()


def test_decoder_on_python_uses_the_sequence_batcher(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    from linnet.triton import python_model

    weights = llama_weights()
    repo = linnet.triton.export(
        LLAMA_SOURCE,
        tmp_path,
        name="llama",
        generics=LLAMA_GENERICS,
        weights=weights,
        backend="python",
        idle_seconds=2.5,
    )
    config = parse(repo.config_path)
    assert config.backend == "python" and config.platform == ""
    assert config.max_batch_size == LLAMA_GENERICS["Batch"]
    batching = config.sequence_batching
    assert batching.max_sequence_idle_microseconds == 2_500_000
    assert batching.HasField("direct")
    kinds = {c.name: c.control[0] for c in batching.control_input}
    kind = model_config_pb2.ModelSequenceBatching.Control.Kind
    assert kinds["START"].kind == kind.Value("CONTROL_SEQUENCE_START")
    assert list(kinds["START"].int32_false_true) == [0, 1]
    assert kinds["END"].kind == kind.Value("CONTROL_SEQUENCE_END")
    assert kinds["CORRID"].kind == kind.Value("CONTROL_SEQUENCE_CORRID")
    assert kinds["CORRID"].data_type == data_type("TYPE_UINT64")
    assert [i.name for i in config.input] == ["INPUT_IDS"]
    assert [o.name for o in config.output] == ["LOGITS", "NEXT_TOKEN"]
    settings = json.loads(config.parameters["linnet"].string_value)
    assert settings["mode"] == "decoder" and settings["runtime"] == "torch"

    version = repo.version_folder
    assert (version / "model.py").read_text() == Path(python_model.__file__).read_text()
    assert (version / "linnet" / "lib.linnet").read_text() == LLAMA_SOURCE.read_text()
    stored = load_file(version / "weights.safetensors")
    assert stored.keys() == weights.keys()
    for path, array in weights.items():
        np.testing.assert_array_equal(stored[path], array)


def test_a_failed_export_leaves_the_earlier_version(tmp_path: Path) -> None:
    gain = {"gain": np.ones(3)}
    first = linnet.triton.export(
        SCALAR_SOURCE, tmp_path, name="scaled", generics={"N": 3}, weights=gain
    )
    before = {p: p.read_bytes() for p in (first.config_path, *first.files)}
    with pytest.raises(LinnetError, match="gain"):
        linnet.triton.export(
            SCALAR_SOURCE, tmp_path, name="scaled", generics={"N": 3}, weights={"gain": np.ones(4)}
        )
    assert {p: p.read_bytes() for p in before} == before
    again = linnet.triton.export(
        SCALAR_SOURCE, tmp_path, name="scaled", generics={"N": 3}, weights={"gain": np.ones(3) * 2}
    )
    assert again.files == first.files
    leftovers = [p.name for p in again.model_folder.iterdir() if p.name.startswith(".")]
    assert leftovers == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "../up"}, "model name"),
        ({"name": "m", "backend": "tensorrt"}, "backend must be"),
        ({"name": "m", "version": 0}, "version must be"),
        ({"name": "m", "backend": "python", "runtime": "jax"}, "runtime must be"),
    ],
)
def test_bad_options_are_linnet_errors(tmp_path: Path, options: Any, message: str) -> None:
    with pytest.raises(LinnetError, match=message):
        linnet.triton.export(
            SCALAR_SOURCE, tmp_path, generics={"N": 3}, weights={"gain": np.ones(3)}, **options
        )
    assert list(tmp_path.iterdir()) == []


def test_large_weights_go_to_a_data_file_beside_model_onnx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime as ort

    from linnet.triton import repository

    monkeypatch.setattr(repository, "EXTERNAL_DATA_BYTES", 1024)
    gain = np.arange(3.0)
    repo = linnet.triton.export(
        SCALAR_SOURCE, tmp_path, name="scaled", generics={"N": 3}, weights={"gain": gain}
    )
    names = sorted(p.name for p in repo.files)
    assert names[0] == "model.onnx" and names[1].startswith("model.onnx.")
    assert names[1].endswith(".data") and len(names) == 2
    session = ort.InferenceSession(str(repo.version_folder / "model.onnx"))
    feeds = {"x": np.ones(3), "k": np.array(2.0), "step": np.array(0, np.int64)}
    np.testing.assert_array_equal(session.run(None, feeds)[0], [0.0, 2.0, 4.0])
