"""examples/gpt2 against transformers' `GPT2LMHeadModel` holding the same weights.

The weights come from the example's own `make_weights.py` (seeded, written as a
`save_pretrained`-style folder); transformers loads that folder with
`from_pretrained`, the Linnet model binds its `model.safetensors` by path through
`linnet.torch.load`. Both run in f32. Checked: logits within 1e-4 with identical
argmax, the KV-cache entries (`prefill`, `decode`) against full-sequence logits,
greedy decoding of 16 tokens against `generate(do_sample=False)` (the example's
`generate.py` loop over `decode`, and the `generate` entry's `while` loop), and a checkpoint written by
transformers itself (tied head, no `lm_head.weight`) binding unchanged.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import linnet.torch as lt  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpt2"
SOURCE = EXAMPLE / "src" / "lib.linnet"
BATCH = 2
NEW_TOKENS = 16


def example_script(name: str) -> ModuleType:
    """`examples/gpt2/<name>.py` as a module."""
    spec = importlib.util.spec_from_file_location(f"gpt2_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gpt2")
    example_script("make_weights").write(folder)
    return folder


@pytest.fixture(scope="module")
def generics(checkpoint: Path) -> dict[str, int]:
    values: dict[str, int] = json.loads((checkpoint / "generics.json").read_text())
    return values | {"Batch": BATCH}


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model, info = transformers.GPT2LMHeadModel.from_pretrained(
        checkpoint, attn_implementation="eager", output_loading_info=True
    )
    assert not any(info.values()), info  # every stored name is one transformers expects
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    return model.eval()


def linnet_model(checkpoint: Path, generics: dict[str, int], compile: bool) -> lt.LinnetModule:
    return lt.load(SOURCE, generics=generics, weights=checkpoint / "model.safetensors",
                   compile=compile)  # fmt: skip


def prompt(length: int, seed: int = 0) -> Any:
    ids = np.random.default_rng(seed).integers(0, 64, (BATCH, length))
    return torch.from_numpy(ids.astype(np.int32))


@pytest.mark.parametrize("compile", [False, True])
def test_logits_match_transformers(
    checkpoint: Path, generics: dict[str, int], reference: Any, compile: bool
) -> None:
    m = linnet_model(checkpoint, generics, compile)
    ids = prompt(11)
    with torch.no_grad():
        want = reference(ids.long()).logits
        got = m(ids)
        prefilled = m.run_entry("prefill", [ids, 0])
    assert got.shape == want.shape == (BATCH, 11, 64)
    assert want.std() > 1.0  # spread-out logits: argmax equality means something
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    assert torch.equal(got.argmax(-1), want.argmax(-1))
    torch.testing.assert_close(prefilled, got, rtol=0, atol=1e-5)


@pytest.mark.parametrize("compile", [False, True])
def test_cached_decode_matches_the_full_sequence(
    checkpoint: Path, generics: dict[str, int], reference: Any, compile: bool
) -> None:
    """A prefill of 4 tokens, a chunk of 3 from position 4, then 5 decode steps."""
    m = linnet_model(checkpoint, generics, compile)
    ids = prompt(12, seed=1)
    with torch.no_grad():
        want = reference(ids.long()).logits
        first = m.run_entry("prefill", [ids[:, :4], 0])
        chunk = m.run_entry("prefill", {"tokens": ids[:, 4:7], "start": 4})
        steps = [m.run_entry("decode", [ids[:, pos], pos]) for pos in range(7, 12)]
    torch.testing.assert_close(first, want[:, :4], rtol=0, atol=1e-4)
    torch.testing.assert_close(chunk, want[:, 4:7], rtol=0, atol=1e-4)
    torch.testing.assert_close(torch.stack(steps, 1), want[:, 7:], rtol=0, atol=1e-4)
    cache = m.tensor("transformer.h.1.attn.k_cache")
    assert cache[:, :, :12].abs().sum() > 0 and cache[:, :, 12:].abs().sum() == 0


@pytest.mark.parametrize("compile", [False, True])
def test_greedy_decoding_matches_generate(
    checkpoint: Path, generics: dict[str, int], reference: Any, compile: bool
) -> None:
    ids = prompt(6, seed=2)
    with torch.no_grad():
        out = reference.generate(ids.long(), attention_mask=torch.ones_like(ids.long()),
                                 max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)  # fmt: skip
    want = out[:, ids.shape[1] :].to(torch.int32)
    assert want.shape == (BATCH, NEW_TOKENS)
    assert all(len(set(row.tolist())) >= 4 for row in want)  # no degenerate repetition

    m = linnet_model(checkpoint, generics, compile)
    looped = example_script("generate").greedy(m, ids, NEW_TOKENS)  # prefill + decode steps
    assert torch.equal(looped, want)
    m.reset_state()
    with torch.no_grad():
        generated = m.run_entry("generate", [ids], generics={"Steps": NEW_TOKENS})
    assert generated.dtype == torch.int32
    assert torch.equal(generated, want)


def test_a_checkpoint_saved_by_transformers_binds(tmp_path: Path) -> None:
    """transformers' own initialisation and writer: tied head omitted, Conv1D `[In, Out]`."""
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=24, n_layer=3,
                                     n_head=3, n_inner=40, bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(tmp_path)
    generics = {"Batch": 1, "Vocab": 50, "Positions": 16, "H": 24, "Heads": 3, "Layers": 3,
                "Inner": 40}  # fmt: skip
    m = lt.load(SOURCE, generics=generics, weights=tmp_path / "model.safetensors")
    ids = torch.tensor([[3, 41, 7, 7, 19, 0, 28]], dtype=torch.int32)
    with torch.no_grad():
        want = model(ids.long()).logits
        got = m(ids)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
