"""`linnet.hf.export` folders loaded by transformers 4.x, the line vLLM and SGLang pinned.

The project's venv holds transformers 5; `python tools/hf4x.py prepare`
unpacks transformers 4.57.1 (SGLang 0.5.5-0.5.9's exact pin, inside vLLM
0.12-0.19's `>=4.56,<5`) with its `tokenizers` and `huggingface_hub` outside
it. Without that folder these tests skip, saying so.

Every family's example (llama, qwen2, qwen3, phi3, plus phi3 with longrope
factors, llama with llama3 rope scaling and a tied head, qwen3 in shards, gpt2)
is exported with seeded random weights and a tokenizer; one child process with
transformers 4.x loads each folder with `AutoModelForCausalLM.from_pretrained`.
Checked per folder: the class, the config values vLLM and SGLang read from a
4.x config (`rope_theta` at the top level, `rope_scaling`, `torch_dtype`, the
context lengths, the tied head), forward logits equal linnet.torch's within
1e-5 with the same argmax, 16 greedy tokens through 4.x's KV cache equal
linnet.torch's `prefill` + `decode`, and the tokenizer encoding text as the
venv's tokenizers does.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import family_support as fs  # noqa: E402

import linnet.hf  # noqa: E402
import linnet.torch as linnet_torch  # noqa: E402

pytestmark = pytest.mark.slow
sys.path.insert(0, str(fs.ROOT / "tools"))
import hf4x  # noqa: E402

Array = np.ndarray[Any, Any]
STEPS = 16
TEXT = "the quick brown fox jumps over a lazy dog"
LLAMA3 = {
    "RopeFactor": 8,
    "RopeLowFreqFactor": 1,
    "RopeHighFreqFactor": 4,
    "RopeOriginalMaxSeq": 16,
}
LONGROPE = {
    "RopeOriginalMaxSeq": fs.LONGROPE_ORIGINAL,
    "RopeMaxPositions": fs.LONGROPE_POSITIONS,
}


def cases() -> dict[str, dict[str, Any]]:
    """Case name -> family, generics, weights, bindings, export keyword arguments."""
    out: dict[str, dict[str, Any]] = {
        family: {"family": family, "generics": fs.generics(family), "seed": 1}
        for family in fs.FAMILIES
    }
    out["llama-llama3-tied"] = {
        "family": "llama",
        "generics": {**fs.generics("llama"), **LLAMA3},
        "seed": 2,
        "tied": True,
    }
    out["phi3-longrope"] = {
        "family": "phi3",
        "generics": {**fs.generics("phi3"), "MaxSeq": 40, **LONGROPE},
        "seed": 3,
        "longrope": True,
    }
    out["qwen3-shards"] = {
        "family": "qwen3",
        "generics": fs.generics("qwen3"),
        "seed": 4,
        "shards": 20_000,
    }
    return out


CASES = cases()
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
}


def case_weights(case: dict[str, Any]) -> tuple[dict[str, Array], dict[str, str] | None]:
    weights = fs.linnet_weights(case["family"], seed=case["seed"])
    if case.get("longrope"):
        weights["rope_factors"] = np.asarray(
            [fs.LONGROPE_SHORT, fs.LONGROPE_LONG], dtype=np.float32
        )
    if case.get("tied"):
        del weights["lm_head.weight"]
        return weights, {"lm_head.weight": "model.embed_tokens.weight"}
    return weights, None


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Per case: what transformers 4.x reported and what linnet.torch computed."""
    problem = hf4x.missing(hf4x.default_folder())
    if problem is not None:
        pytest.skip(problem)
    where = tmp_path_factory.mktemp("hf4x")
    tokenizer = where / "tokenizer"
    fs.save_tokenizer(tokenizer)
    jobs, mine = [], {}
    for name, case in CASES.items():
        family, generics = case["family"], case["generics"]
        weights, bindings = case_weights(case)
        extra = {"max_shard_bytes": case["shards"]} if "shards" in case else {}
        exported = linnet.hf.export(
            fs.source(family),
            where / name,
            generics=generics,
            weights=weights,
            bindings=bindings,
            tokenizer=tokenizer,
            **extra,
        )
        module = linnet_torch.load(
            fs.source(family), generics=generics, weights=weights, bindings=bindings
        )
        tokens = fs.tokens_of((2, 24 if case.get("longrope") else 9), seed=case["seed"] + 10)
        prompt = fs.tokens_of((1, 6), seed=case["seed"] + 20)
        mine[name] = {
            "exported": exported,
            "linnet_logits": fs.linnet_logits(module, tokens),
            "linnet_greedy": fs.linnet_greedy(module, prompt, STEPS),
        }
        jobs.append(
            {
                "folder": where / name,
                "tokens": tokens,
                "prompt": prompt,
                "steps": STEPS,
                "text": TEXT,
            }
        )
    theirs = hf4x.outputs(jobs)
    return {name: {**mine[name], **result} for name, result in zip(CASES, theirs, strict=True)}


@pytest.mark.parametrize("name", list(CASES))
def test_transformers4_loads_the_export_with_equal_logits_and_tokens(
    name: str, loaded: dict[str, dict[str, Any]]
) -> None:
    case, got = CASES[name], loaded[name]
    assert got["version"] == hf4x.VERSION
    assert got["architecture"] == ARCHITECTURES[case["family"]]
    assert got["parameter_dtype"] == "float32"
    actual, expected = got["linnet_logits"], got["logits"]
    assert actual.shape == expected.shape
    difference = float(np.abs(actual - expected).max())
    assert difference <= 1e-5, f"max |logit difference| {difference:.2e}"
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))
    np.testing.assert_array_equal(got["linnet_greedy"], got["generated"])
    assert len(set(got["generated"].ravel().tolist())) > 1, "a constant run proves little"


@pytest.mark.parametrize("name", list(CASES))
def test_transformers4_reads_the_config_values_serving_engines_use(
    name: str, loaded: dict[str, dict[str, Any]]
) -> None:
    """vLLM and SGLang on 4.x read `config.rope_theta`, `config.rope_scaling` and
    `config.torch_dtype` directly; `rope_parameters` is transformers 5's alone."""
    case, got = CASES[name], loaded[name]
    config, generics = got["config"], case["generics"]
    assert config["model_type"] == case["family"]
    assert config["torch_dtype"] == "float32"
    assert config["tie_word_embeddings"] is (case["family"] == "gpt2" or bool(case.get("tied")))
    assert config["bos_token_id"] == 1 and config["eos_token_id"] == 2
    if case["family"] == "gpt2":
        assert config["layer_norm_epsilon"] == 1e-5
        assert config["activation_function"] == "gelu_new"
        return
    assert config["rope_theta"] == float(generics["RopeTheta"])
    assert config["rms_norm_eps"] == 1.0 / generics["EpsInverse"]
    assert config["hidden_act"] == "silu"
    assert config["head_dim"] == generics["HeadDim"]
    assert config["num_key_value_heads"] == generics["KvHeads"]
    if case.get("longrope"):
        assert config["rope_scaling"] == {
            "type": "longrope",
            "short_factor": fs.LONGROPE_SHORT,
            "long_factor": fs.LONGROPE_LONG,
        }
        assert config["max_position_embeddings"] == fs.LONGROPE_POSITIONS
        assert config["original_max_position_embeddings"] == fs.LONGROPE_ORIGINAL
    elif "RopeFactor" in generics:
        scaling = config["rope_scaling"]
        assert scaling["rope_type"] == "llama3" and scaling["factor"] == 8.0
        assert scaling["original_max_position_embeddings"] == 16
        assert config["max_position_embeddings"] == generics["MaxSeq"]
    else:
        assert config["rope_scaling"] is None
        assert config["max_position_embeddings"] == generics["MaxSeq"]
    if case["family"] in ("qwen2", "qwen3", "phi3"):
        assert config["sliding_window"] is None


def test_transformers4_tokenizer_encodes_as_the_venvs(loaded: dict[str, dict[str, Any]]) -> None:
    reference = transformers.AutoTokenizer.from_pretrained(loaded["llama"]["exported"].folder)
    expected = reference(TEXT)["input_ids"]
    assert len(expected) > 3
    for name in CASES:
        assert loaded[name]["encoded"] == expected, name
