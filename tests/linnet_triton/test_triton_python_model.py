"""The Python-backend `model.py` driven in process, as Triton's stub drives it.

Triton's `triton_python_backend_utils` is only whole inside the backend stub:
`Tensor`, `InferenceRequest`, `InferenceResponse` and `TritonError` are C++
classes the stub injects, so the module cannot be imported here. `StubUtils`
below stands in with the same calls `model.py` makes (`Tensor(name, array)`,
`.as_numpy()`, `.name()`, `get_input_tensor_by_name`, `InferenceResponse(
output_tensors=..., error=...)`, `TritonError(message)`), and `initialize` gets
the `args` Triton passes (the config as JSON, with proto field names, made from
the exported `config.pbtxt` by protobuf's own `json_format`). The real server
runs the same model in `test_triton_server.py` (slow, when the server is
prepared); these tests cover the sequence logic on every run: several
sequences in one `execute`, rows running out, `END`, the idle timeout, and
requests that cannot run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from triton_support import LLAMA_GENERICS, LLAMA_SOURCE, ROOT, GreedyReference, llama_weights

import linnet.triton
from linnet.triton import python_model

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
text_format = pytest.importorskip("google.protobuf.text_format")
json_format = pytest.importorskip("google.protobuf.json_format")


class StubUtils:
    """The calls of `triton_python_backend_utils` that model.py uses (see the docstring)."""

    class Tensor:
        def __init__(self, name: str, array: Any) -> None:
            self._name, self._array = name, np.asarray(array)

        def name(self) -> str:
            return self._name

        def as_numpy(self) -> Any:
            return self._array

    class TritonError:
        def __init__(self, message: str) -> None:
            self._message = message

        def message(self) -> str:
            return self._message

    class InferenceResponse:
        def __init__(self, output_tensors: list[Any], error: Any = None) -> None:
            self.outputs = {t.name(): t.as_numpy() for t in output_tensors}
            self.error = error

    class InferenceRequest:
        def __init__(self, **arrays: Any) -> None:
            self.tensors = [StubUtils.Tensor(k, v) for k, v in arrays.items()]

    @staticmethod
    def get_input_tensor_by_name(request: Any, name: str) -> Any:
        for tensor in request.tensors:
            if tensor.name() == name:
                return tensor
        return None


@pytest.fixture(autouse=True)
def stub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(python_model, "pb_utils", StubUtils)


def initialized(folder: Path, version: int = 1) -> Any:
    """`TritonPythonModel.initialize` with the args Triton gives a model in `folder`."""
    config_text = (folder / "config.pbtxt").read_text()
    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
    model = python_model.TritonPythonModel()
    model.initialize(
        {
            "model_config": json.dumps(as_json),
            "model_repository": str(folder),
            "model_version": str(version),
            "model_name": folder.name,
        }
    )
    return model


def request(corrid: int, tokens: list[int], start: bool = False, end: bool = False) -> Any:
    return StubUtils.InferenceRequest(
        INPUT_IDS=np.array([tokens], np.int32),
        START=np.array([[int(start)]], np.int32),
        END=np.array([[int(end)]], np.int32),
        CORRID=np.array([[corrid]], np.uint64),
    )


@pytest.fixture(scope="module")
def weights() -> dict[str, Any]:
    return llama_weights()


def decoder_model(folder: Path, weights: dict[str, Any], runtime: str = "torch") -> Any:
    repo = linnet.triton.export(
        LLAMA_SOURCE,
        folder,
        name="llama",
        generics=LLAMA_GENERICS,
        weights=weights,
        backend="python",
        idle_seconds=30,
        runtime=runtime,
    )
    return initialized(repo.model_folder)


@pytest.fixture
def decoder(tmp_path: Path, weights: dict[str, Any]) -> Any:
    model = decoder_model(tmp_path, weights)
    yield model
    model.finalize()


def tokens_of(responses: list[Any]) -> list[int]:
    for r in responses:
        assert r.error is None, r.error.message()
    return [int(r.outputs["NEXT_TOKEN"][0, 0]) for r in responses]


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_sequences_batched_in_one_execute_decode_greedily(
    tmp_path: Path, weights: dict[str, Any], runtime: str
) -> None:
    decoder = decoder_model(tmp_path, weights, runtime)
    prompts = {7: [3, 14, 15, 9, 2, 6], 8: [27, 18]}
    reference = GreedyReference(weights)
    expected = {c: reference.tokens(p, 4) for c, p in prompts.items()}
    firsts = tokens_of(decoder.execute([request(c, p, start=True) for c, p in prompts.items()]))
    got = {c: [t] for c, t in zip(prompts, firsts, strict=True)}
    for _ in range(3):
        batch = [request(c, [got[c][-1]]) for c in prompts]
        for c, t in zip(prompts, tokens_of(decoder.execute(batch)), strict=True):
            got[c].append(t)
    assert got == expected


def test_end_frees_a_row_and_a_start_with_none_free_takes_the_oldest(
    decoder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [0.0]
    monkeypatch.setattr(python_model.time, "monotonic", lambda: clock[0])
    assert tokens_of(decoder.execute([request(1, [4, 5], start=True), request(2, [6], start=True)]))
    clock[0] += 1
    assert tokens_of(decoder.execute([request(1, [9], end=True)]))
    assert tokens_of(decoder.execute([request(3, [7], start=True)]))
    [gone] = decoder.execute([request(1, [9])])
    assert "sequence 1 has no START" in gone.error.message()
    assert {c: s.row for c, s in decoder.sequences.items()} == {2: 1, 3: 0}
    # both rows live: a new START means Triton dropped one; sequence 2 was seen longest ago
    clock[0] += 1
    assert tokens_of(decoder.execute([request(3, [1])]))
    assert tokens_of(decoder.execute([request(4, [2, 3], start=True)]))
    assert {c: s.row for c, s in decoder.sequences.items()} == {3: 0, 4: 1}


def test_idle_sequences_are_released(decoder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(python_model.time, "monotonic", lambda: clock[0])
    assert tokens_of(decoder.execute([request(5, [1, 2], start=True)]))
    clock[0] += 29.0
    assert tokens_of(decoder.execute([request(5, [3])]))
    clock[0] += 31.0
    [late] = decoder.execute([request(5, [4])])
    assert "no START" in late.error.message()
    assert decoder.sequences == {}


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ([request(4, [1] * 25, start=True)], "1 to 24 token ids"),
        ([request(4, [1, 2], start=True), request(4, [3, 4])], "one token id"),
        ([request(4, [1, 2], start=True), request(4, [500])], "500"),
    ],
)
def test_bad_requests_get_error_responses(decoder: Any, requests: list[Any], message: str) -> None:
    responses = decoder.execute(requests)
    assert responses[-1].error is not None
    assert message in responses[-1].error.message()


SCALAR_SOURCE = """module scaled
pub block Scale<N: Dim> {
    param gain: Tensor[N; f32]
    pub entry forward(x: Tensor[N; f32], k: f32) -> (Tensor[N; f32], f32) {
        return (x * gain * k, k + 1.0)
    }
}
"""


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_stateless_entry_with_scalars(tmp_path: Path, runtime: str) -> None:
    gain = np.array([1.0, 2.0, 3.0], np.float32)
    repo = linnet.triton.export(
        SCALAR_SOURCE,
        tmp_path,
        name="scaled",
        generics={"N": 3},
        weights={"gain": gain},
        backend="python",
        runtime=runtime,
        std_root=ROOT / "stdlib",
    )
    std = repo.version_folder / "std"
    assert (std / "nn").is_dir() and all(p.suffix == ".linnet" for p in std.rglob("*.*"))
    model = initialized(repo.model_folder)  # loads with the copied standard library
    x = np.array([1.0, 1.0, 2.0], np.float32)
    [response] = model.execute([StubUtils.InferenceRequest(x=x, k=np.array([0.5], np.float32))])
    assert response.error is None
    np.testing.assert_allclose(response.outputs["output0"], x * gain * 0.5)
    np.testing.assert_allclose(response.outputs["output1"], [1.5])


def test_cli_writes_a_decoder_repository(
    tmp_path: Path, weights: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from linnet.cli import main
    from linnet.weights import save_safetensors

    save_safetensors(weights, tmp_path / "llama.safetensors")
    binds = [f"--bind={k}={v}" for k, v in LLAMA_GENERICS.items()]
    argv = ["triton", "--weights", str(tmp_path / "llama.safetensors"), *binds]
    argv += ["--backend", "python", "--idle-seconds", "5", str(LLAMA_SOURCE), str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / '01-llama'} (version 1, backend python)" in out
    assert "sequence batching: CORRID, START, END" in out
    assert "input INPUT_IDS: TYPE_INT32 [-1]" in out
    model = initialized(tmp_path / "01-llama")
    reference = GreedyReference(weights).tokens([8, 9, 10], 1)
    assert tokens_of(model.execute([request(1, [8, 9, 10], start=True)])) == reference
