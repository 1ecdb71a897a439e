"""Python-backend repositories served by a real Triton Inference Server, called with tritonclient.

The server is the `tritonserver` that `nvidia-pytriton` bundles (2.51.0, Python
backend only), unpacked by `python tools/triton_server.py prepare` outside the
project's venv (see that file for why); without it these tests skip, saying so.
The server listens on 127.0.0.1 only. Checked:

- a stateless entry (the tiny transformer, `runtime` torch and onnx): Triton's
  outputs equal `linnet.torch` in this process;
- a decoder (the Llama example, `runtime` torch and onnx) through the sequence
  batcher: two sequences with different correlation ids, their requests
  interleaved, each get the greedy tokens of the example's `prefill` + `decode`
  run in this process; after `END` the id starts afresh.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from triton_support import (
    LLAMA_GENERICS,
    LLAMA_SOURCE,
    ROOT,
    TINY_SOURCE,
    GreedyReference,
    llama_weights,
    tiny_generics,
    tiny_reference,
    tiny_weights,
)

import linnet.triton

pytestmark = pytest.mark.slow
httpclient = pytest.importorskip("tritonclient.http")
utils = pytest.importorskip("tritonclient.utils")
sys.path.insert(0, str(ROOT / "tools"))
import triton_server  # noqa: E402

NEW_TOKENS = 5


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path, Any]]:
    problem = triton_server.missing(triton_server.default_folder())
    if problem is not None:
        pytest.skip(problem)
    folder = tmp_path_factory.mktemp("triton")
    weights = tiny_weights(folder)
    for runtime in ("torch", "onnx"):
        linnet.triton.export(
            TINY_SOURCE,
            folder / "repo",
            name=f"tiny-{runtime}",
            generics=tiny_generics(),
            weights=weights,
            dynamic=["B", "S"],
            backend="python",
            runtime=runtime,
        )
    decoder_weights = llama_weights()
    for runtime in ("torch", "onnx"):
        linnet.triton.export(
            LLAMA_SOURCE,
            folder / "repo",
            name=f"llama-{runtime}",
            generics=LLAMA_GENERICS,
            weights=decoder_weights,
            backend="python",
            runtime=runtime,
        )
    with triton_server.start(folder / "repo") as address:
        client = httpclient.InferenceServerClient(address)
        yield client, weights, decoder_weights
        client.close()


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_stateless_entry_matches_torch(served: tuple[Any, Path, Any], runtime: str) -> None:
    client, weights, _ = served
    for shape in [(1, 6), (3, 4)]:
        ids = np.random.default_rng(sum(shape)).integers(0, 48, shape).astype(np.int32)
        tensor = httpclient.InferInput("ids", list(ids.shape), "INT32")
        tensor.set_data_from_numpy(ids)
        result = client.infer(f"tiny-{runtime}", [tensor])
        np.testing.assert_allclose(
            result.as_numpy("output0"), tiny_reference(weights, ids), rtol=1e-5, atol=1e-5
        )


def _sender(client: Any, model: str) -> Any:
    def send(corrid: int, tokens: list[int], start: bool = False, end: bool = False) -> Any:
        ids = np.array([tokens], np.int32)
        tensor = httpclient.InferInput("INPUT_IDS", list(ids.shape), "INT32")
        tensor.set_data_from_numpy(ids)
        return client.infer(
            model, [tensor], sequence_id=corrid, sequence_start=start, sequence_end=end
        )

    return send


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_interleaved_sequences_decode_like_prefill_and_decode(
    served: tuple[Any, Path, Any], runtime: str
) -> None:
    client, _, decoder_weights = served
    send = _sender(client, f"llama-{runtime}")
    prompts = {101: [5, 9, 2, 33, 7], 202: [40, 1, 12]}
    reference = GreedyReference(decoder_weights)
    expected = {corrid: reference.tokens(p, NEW_TOKENS) for corrid, p in prompts.items()}
    assert expected[101] != expected[202]

    got: dict[int, list[int]] = {corrid: [] for corrid in prompts}
    for corrid, prompt in prompts.items():
        result = send(corrid, prompt, start=True)
        logits = result.as_numpy("LOGITS")
        assert logits.shape == (1, LLAMA_GENERICS["Vocab"])
        token = int(result.as_numpy("NEXT_TOKEN")[0, 0])
        assert token == int(np.argmax(logits[0]))
        got[corrid].append(token)
    for step in range(1, NEW_TOKENS):
        for corrid in prompts:  # one request of each sequence in turn
            last = step == NEW_TOKENS - 1
            result = send(corrid, [got[corrid][-1]], end=last)
            got[corrid].append(int(result.as_numpy("NEXT_TOKEN")[0, 0]))
    assert got == expected

    # after END the sequence is gone: Triton itself wants a new START for the id
    with pytest.raises(utils.InferenceServerException, match="START"):
        send(101, [3])
    again = send(101, prompts[101], start=True, end=True)
    assert int(again.as_numpy("NEXT_TOKEN")[0, 0]) == expected[101][0]
