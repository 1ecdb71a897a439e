"""examples/gpt2 on the JAX backend against transformers' `GPT2LMHeadModel` (f32).

The checkpoint is the example's own `make_weights.py` folder, loaded by
transformers with `from_pretrained` and bound by path by `linnet.jax`, as in
test_gpt2.py. Logits through `load` and `load_source` within 1e-4 with
identical argmax; a prefill and 8 decode steps through `load_model` and
`load_source` equal `generate(do_sample=False, max_new_tokens=9)`, and so does
the model's own `generate` entry, whose `while` loop runs inside XLA.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
jax = pytest.importorskip("jax")

from jax_backends import JaxModelBackend, JaxSourceBackend  # noqa: E402
from test_gpt2 import BATCH, SOURCE, example_script  # noqa: E402
from test_llama import demo  # noqa: E402

import linnet.jax as lj  # noqa: E402

NEW_TOKENS = 9


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], Any]:
    """The example's checkpoint, its generics, and transformers holding it."""
    folder = tmp_path_factory.mktemp("gpt2")
    example_script("make_weights").write(folder)
    generics = json.loads((folder / "generics.json").read_text()) | {"Batch": BATCH}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager")
    return folder / "model.safetensors", generics, model.eval()


def prompt(length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 64, (BATCH, length)).astype(np.int32)


@pytest.mark.parametrize("loader", ["load", "load_source"])
def test_logits_match_transformers(gpt2: Any, loader: str) -> None:
    weights, generics, reference = gpt2
    f = getattr(lj, loader)(SOURCE, generics=generics, weights=weights)
    ids = prompt(11, seed=0)
    with torch.no_grad():
        want = reference(torch.from_numpy(ids).long()).logits.numpy()
    got = np.asarray(f(ids))
    assert got.shape == want.shape == (BATCH, 11, 64)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize(
    "backend", ["load_model", pytest.param("load_source", marks=pytest.mark.slow)]
)
def test_prefill_and_decode_equal_generate(gpt2: Any, backend: str) -> None:
    weights, generics, reference = gpt2
    ids = prompt(6, seed=2)
    with torch.no_grad():
        long = torch.from_numpy(ids).long()
        out = reference.generate(long, attention_mask=torch.ones_like(long),
                                 max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)  # fmt: skip
    want = out[:, 6:].numpy()
    runner = (
        JaxModelBackend(SOURCE, generics, weights)
        if backend == "load_model"
        else JaxSourceBackend(SOURCE, generics, weights, entries=("prefill", "decode"))
    )
    run = demo.greedy(runner, ids, NEW_TOKENS, warm=False)
    np.testing.assert_array_equal(run.generated, want)
    assert len(set(want.ravel().tolist())) >= 4, "a degenerate reference proves little"
    if backend == "load_model":
        assert isinstance(runner, JaxModelBackend)
        runner.reset()
        looped = runner.model.run_entry("generate", [ids], generics={"Steps": NEW_TOKENS})
        assert np.asarray(looped).dtype == np.int32
        np.testing.assert_array_equal(np.asarray(looped), want)
        assert "stablehlo.while" in runner.model.stablehlo_text("generate")
