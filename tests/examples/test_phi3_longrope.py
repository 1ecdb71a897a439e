"""examples/phi3 with Phi-3's longrope rope scaling, against transformers' `Phi3ForCausalLM`.

A random-initialised transformers model of a small config with longrope
(`short_factor`/`long_factor` of head_dim / 2 factors each, an
`original_max_position_embeddings` of 16 below `max_position_embeddings` 64, so
the attention factor sqrt(1 + ln 4 / ln 16) scales cos and sin) is the
reference. transformers picks the factors per call: the long ones when the
call's last position + 1 exceeds 16, the short ones otherwise; sequences on
both sides of that length are checked, and greedy decoding through the cache
crosses it (generate recomputes the whole sequence at the crossing, and so
does the test's loop). The folder then goes through `linnet.convert` (the
factors become the card's `rope_factors.safetensors`; the card runs on
linnet.torch and ONNX Runtime) and back out through `linnet.hf.export` (the
factors return to config.json), each loaded and compared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import family_support as fs  # noqa: E402

import linnet.hf  # noqa: E402
import linnet.onnx  # noqa: E402
import linnet.torch as linnet_torch  # noqa: E402
from linnet.convert import ROPE_FACTORS_FILE, convert  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.weights import read_safetensors  # noqa: E402

Array = np.ndarray[Any, Any]
SHORT = fs.LONGROPE_SHORT
LONG = fs.LONGROPE_LONG
ORIGINAL = fs.LONGROPE_ORIGINAL
POSITIONS = fs.LONGROPE_POSITIONS
GENERICS: dict[str, object] = {
    **fs.generics("phi3", batch=2),
    "MaxSeq": 40,
    "RopeOriginalMaxSeq": ORIGINAL,
    "RopeMaxPositions": POSITIONS,
}


def reference_model(seed: int = 0) -> Any:
    return fs.phi3_longrope_model(seed)


def factors() -> Array:
    return np.asarray([SHORT, LONG], dtype=np.float32)


def assert_logits(actual: Array, expected: Array, tolerance: float = 1e-4) -> None:
    assert actual.shape == expected.shape
    gap = float(np.abs(actual - expected).max())
    assert gap <= tolerance, f"max |logit difference| {gap:.2e}"
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))


def run(module: Any, entry: str, *inputs: object) -> Array:
    args = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in inputs]
    with torch.no_grad():
        out: Array = module.run_entry(entry, args).numpy()
    return out


def greedy(module: Any, prompt: Array, steps: int) -> Array:
    """Prefill, then decode; as `Phi3ForCausalLM.prepare_inputs_for_generation` does, the
    step whose sequence first exceeds the original length recomputes the whole sequence
    (one `prefill` from 0, so every cached key is rotated with the long factors)."""
    module.reset_state()
    sequence = prompt
    token = run(module, "prefill", prompt, 0)[:, -1].argmax(-1).astype(np.int32)
    chosen = [token]
    for _ in range(1, steps):
        sequence = np.concatenate([sequence, token[:, None]], axis=1)
        if sequence.shape[1] == ORIGINAL + 1:
            logits = run(module, "prefill", sequence, 0)[:, -1]
        else:
            logits = run(module, "decode", token, sequence.shape[1] - 1)
        token = logits.argmax(-1).astype(np.int32)
        chosen.append(token)
    return np.stack(chosen, axis=1)


@pytest.fixture(scope="module")
def reference() -> Any:
    return reference_model()


@pytest.fixture(scope="module")
def module(reference: Any) -> Any:
    weights = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    return linnet_torch.load(
        fs.source("phi3"),
        generics=GENERICS,
        weights={**weights, "rope_factors": torch.from_numpy(factors())},
        compile=True,
    )


def test_reference_uses_the_attention_factor(reference: Any) -> None:
    scaling = reference.model.rotary_emb.attention_scaling
    assert scaling == pytest.approx(np.sqrt(1 + np.log(4) / np.log(16)))


@pytest.mark.parametrize("length", [12, ORIGINAL, ORIGINAL + 1, 30])
def test_forward_matches_on_both_sides_of_the_original_length(
    module: Any, reference: Any, length: int
) -> None:
    tokens = fs.tokens_of((2, length), seed=length)
    assert_logits(run(module, "forward", tokens), fs.hf_logits(reference, tokens))


def test_the_factors_matter(reference: Any) -> None:
    """Without the buffer the same weights give other logits: the test above can fail."""
    weights = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    plain = linnet_torch.load(fs.source("phi3"), generics=GENERICS, weights=weights)
    for length in (12, 30):
        tokens = fs.tokens_of((1, length), seed=length)
        gap = np.abs(run(plain, "forward", tokens) - fs.hf_logits(reference, tokens)).max()
        assert gap > 1e-2


def test_prefill_and_decode_switch_factors_as_transformers_does(
    module: Any, reference: Any
) -> None:
    """Prefill 10 tokens, then decode one at a time past position 16: each step's call
    reaches `position + 1`, so from position 16 on the long factors rotate the new
    query and key while the cached keys keep the short ones, as in transformers."""
    tokens = fs.tokens_of((2, 24), seed=5)
    ids = torch.from_numpy(tokens.astype(np.int64))
    cache = transformers.DynamicCache(config=reference.config)
    with torch.no_grad():
        first = reference(ids[:, :10], cache=cache, use_cache=True).logits.numpy()
        expected = [first[:, -1]]
        for position in range(10, 24):
            step = reference(ids[:, position : position + 1], cache=cache, use_cache=True)
            expected.append(step.logits[:, -1].numpy())
    module.reset_state()
    assert_logits(run(module, "prefill", tokens[:, :10], 0), first)
    for position in range(10, 24):
        logits = run(module, "decode", tokens[:, position], position)
        assert_logits(logits, expected[position - 9])


def cached_steps(reference: Any, sequence: Array, prompt: int) -> list[Array]:
    """transformers' logits `[Vocab]` of one sequence alone: after its first `prompt`
    tokens (one call), then after each later token fed one at a time through the cache."""
    ids = torch.from_numpy(sequence.astype(np.int64)[None])
    cache = transformers.DynamicCache(config=reference.config)
    with torch.no_grad():
        first = reference(ids[:, :prompt], cache=cache, use_cache=True).logits[0, -1]
        out = [first.numpy()]
        for position in range(prompt, ids.shape[1]):
            step = reference(ids[:, position : position + 1], cache=cache, use_cache=True)
            out.append(step.logits[0, -1].numpy())
    return out


def test_slotted_entries_pick_the_factors_per_sequence(module: Any, reference: Any) -> None:
    """Two sequences on either side of the original length share each `prefill_slots` and
    `decode_slots` call (cache rows 1 and 0): each is rotated with the factors its own
    length picks, so its logits equal transformers' steps of it alone; the shorter one
    crosses position 16 while decoding."""
    lengths, steps = [20, 6], 12
    sequences = [fs.tokens_of((n + steps,), seed=10 + n) for n in lengths]
    expected = [cached_steps(reference, s, n) for s, n in zip(sequences, lengths, strict=True)]
    tokens = np.zeros((2, max(lengths)), np.int32)
    for m, (sequence, n) in enumerate(zip(sequences, lengths, strict=True)):
        tokens[m, :n] = sequence[:n]
    slots = np.array([1, 0], np.int32)
    module.reset_state()
    first = run(module, "prefill_slots", tokens, slots, np.array(lengths, np.int32))
    for m in range(2):
        assert_logits(first[m], expected[m][0])
    for step in range(steps):
        positions = np.array([n + step for n in lengths], np.int32)
        current = np.array([[s[p]] for s, p in zip(sequences, positions, strict=True)], np.int32)
        logits = run(module, "decode_slots", current, slots, positions)
        for m in range(2):
            assert_logits(logits[m], expected[m][step + 1])


def test_greedy_decoding_past_the_original_length_equals_generate(
    module: Any, reference: Any
) -> None:
    prompt = fs.tokens_of((2, 6), seed=4)
    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        out = reference.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24
        )
    expected = out[:, 6:].numpy()
    np.testing.assert_array_equal(greedy(module, prompt, 24), expected)
    assert len(set(expected.ravel().tolist())) >= 4, "a degenerate reference proves little"


def test_convert_writes_the_factors_and_export_returns_them(reference: Any, tmp_path: Path) -> None:
    folder = tmp_path / "phi3"
    reference.save_pretrained(folder)
    card = convert(folder, output=tmp_path / "card", context=40)
    assert isinstance(card.weights, tuple)
    assert card.weights == (folder.resolve(), (tmp_path / "card" / ROPE_FACTORS_FILE).resolve())
    assert card.generics["RopeOriginalMaxSeq"] == ORIGINAL
    assert card.generics["RopeMaxPositions"] == POSITIONS
    loaded = linnet_torch.load(tmp_path / "card")
    on_onnx = linnet.onnx.load_model(tmp_path / "card")
    for length in (12, 30, 14):  # ONNX Runtime's one graph for every length picks at run time
        tokens = fs.tokens_of((1, length), seed=length + 1)
        expected = fs.hf_logits(reference, tokens)
        assert_logits(run(loaded, "forward", tokens), expected)
        assert_logits(np.asarray(on_onnx.run_entry("forward", [tokens])), expected)

    out = tmp_path / "exported"
    linnet.hf.export(
        card.source,
        out,
        generics=card.generics,
        weights=list(card.weights),
    )
    config = json.loads((out / "config.json").read_text())
    assert config["rope_scaling"] == {
        "type": "longrope",
        "short_factor": SHORT,
        "long_factor": LONG,
    }
    assert config["max_position_embeddings"] == POSITIONS
    assert config["original_max_position_embeddings"] == ORIGINAL
    assert "rope_factors" not in read_safetensors(out / "model.safetensors")
    again = transformers.AutoModelForCausalLM.from_pretrained(
        out, attn_implementation="eager"
    ).eval()
    for length in (12, 30):
        tokens = fs.tokens_of((1, length), seed=length + 2)
        assert_logits(fs.hf_logits(again, tokens), fs.hf_logits(reference, tokens), 1e-5)


def test_convert_refuses_longrope_it_cannot_reproduce(reference: Any, tmp_path: Path) -> None:
    folder = tmp_path / "phi3"
    reference.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"]["short_factor"] = [1.0, 2.0]
    config["rope_parameters"]["attention_factor"] = 1.5
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(LinnetError) as error:
        convert(folder, output=tmp_path / "card")
    assert "short_factor` has 2 factors, not head_dim / 2 = 4" in error.value.message
    assert "attention_factor` 1.5" in error.value.message
