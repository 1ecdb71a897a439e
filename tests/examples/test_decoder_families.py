"""examples/qwen2, qwen3 and phi3 against transformers (f32, eager attention).

Each example is its transformers class in Linnet: `Qwen2ForCausalLM` (q/k/v
biases), `Qwen3ForCausalLM` (per-head q/k RMS norms, an explicit head_dim larger
than H / Heads) and `Phi3ForCausalLM` (fused `qkv_proj` and `gate_up_proj`). The
reference is a random-initialised transformers model of a small GQA config
whose norm weights are perturbed away from 1; its `state_dict` binds unchanged.
The config's rope theta and eps are bound as the generics `RopeTheta` and
`EpsInverse`. Checked per family: the parameter paths are the state_dict's
names; `forward` logits within 1e-4 with identical argmax; `prefill` (in two
chunks) and `decode` against the whole-sequence logits; greedy decoding of 16
tokens through the cache, batch 2, equal to `generate(do_sample=False)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import linnet.torch as linnet_torch  # noqa: E402
from linnet import pipeline  # noqa: E402
from linnet.cli import main as linnet_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
Array = np.ndarray[Any, Any]

SIZES = {"Vocab": 61, "H": 32, "Heads": 4, "KvHeads": 2, "Inner": 48, "Layers": 2}

# family -> (config class, model class, the config's extra values, the generics they bind)
FAMILIES: dict[str, tuple[str, str, dict[str, Any], dict[str, int]]] = {
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {"rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "head_dim": 8},
        {"EpsInverse": 1000000, "RopeTheta": 1000000, "HeadDim": 8},
    ),
    "qwen3": (
        "Qwen3Config",
        "Qwen3ForCausalLM",
        {"rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "head_dim": 16},
        {"EpsInverse": 1000000, "RopeTheta": 1000000, "HeadDim": 16},
    ),
    "phi3": (
        "Phi3Config",
        "Phi3ForCausalLM",
        {"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "head_dim": 8},
        {"EpsInverse": 100000, "RopeTheta": 10000, "HeadDim": 8},
    ),
}


def source(family: str) -> Path:
    return ROOT / "examples" / family / "src" / "lib.linnet"


def hf_config(family: str, max_seq: int = 64) -> Any:
    config_class, _, values, _ = FAMILIES[family]
    values = dict(values)
    theta = values.pop("rope_theta")
    return getattr(transformers, config_class)(
        vocab_size=SIZES["Vocab"],
        hidden_size=SIZES["H"],
        num_attention_heads=SIZES["Heads"],
        num_key_value_heads=SIZES["KvHeads"],
        intermediate_size=SIZES["Inner"],
        num_hidden_layers=SIZES["Layers"],
        max_position_embeddings=max_seq,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        initializer_range=0.15,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
        **values,
    )


def hf_model(family: str, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    model = getattr(transformers, FAMILIES[family][1])(hf_config(family)).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.add_(0.2 * torch.randn_like(value))
            elif name.endswith(".bias"):
                value.normal_(0.0, 0.5)
    return model


def generics(family: str, batch: int, max_seq: int) -> dict[str, object]:
    return {**SIZES, **FAMILIES[family][3], "Batch": batch, "MaxSeq": max_seq, "T": "f32"}


def reference_logits(model: Any, tokens: Array) -> Array:
    with torch.no_grad():
        logits: Array = model(torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy()
    return logits


def assert_logits(actual: Array, expected: Array) -> None:
    assert actual.shape == expected.shape
    gap = float(np.abs(actual - expected).max())
    assert gap <= 1e-4, f"max |logit difference| {gap:.2e}"
    np.testing.assert_array_equal(actual.argmax(-1), expected.argmax(-1))


def tokens_of(shape: tuple[int, ...], seed: int) -> Array:
    return np.random.default_rng(seed).integers(0, SIZES["Vocab"], shape).astype(np.int32)


def run(module: Any, entry: str, *inputs: object) -> Array:
    args = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in inputs]
    with torch.no_grad():
        result = module.run_entry(entry, args)
    array: Array = result.numpy()
    return array


def greedy(module: Any, prompt: Array, steps: int) -> Array:
    """Prefill the prompt, then `steps` argmax tokens through `decode`."""
    module.reset_state()
    logits = run(module, "prefill", prompt, 0)
    token = logits[:, -1].argmax(-1).astype(np.int32)
    chosen = [token]
    for step in range(1, steps):
        token = run(module, "decode", token, prompt.shape[1] + step - 1).argmax(-1)
        token = token.astype(np.int32)
        chosen.append(token)
    return np.stack(chosen, axis=1)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def reference(family: str) -> Any:
    return hf_model(family)


@pytest.fixture(scope="module")
def linnet_model(family: str, reference: Any) -> Any:
    return linnet_torch.load(
        source(family),
        generics=generics(family, batch=2, max_seq=32),
        weights={k: v.detach().clone() for k, v in reference.state_dict().items()},
        compile=True,
    )


def test_source_checks_strict_and_is_formatted(
    family: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert linnet_main(["check", "--strict", str(source(family))]) == 0
    assert linnet_main(["fmt", "--check", str(source(family))]) == 0
    assert capsys.readouterr().err == ""


def test_parameter_paths_are_the_state_dict_names(family: str, reference: Any) -> None:
    model = pipeline.load_model(source(family), generics=generics(family, batch=1, max_seq=16))
    declared = {path: t.type.shape for path, t in model.tensors.items() if t.kind == "param"}
    expected = {name: tuple(value.shape) for name, value in reference.state_dict().items()}
    assert set(expected) <= set(declared)
    assert all(declared[name] == shape for name, shape in expected.items())
    mandatory = {p for p, t in model.tensors.items() if t.kind == "param" and not t.optional}
    assert mandatory <= set(expected)


def test_forward_prefill_and_decode_match_transformers(linnet_model: Any, reference: Any) -> None:
    tokens = tokens_of((2, 12), seed=1)
    expected = reference_logits(reference, tokens)
    assert_logits(run(linnet_model, "forward", tokens), expected)
    other = tokens_of((3, 5), seed=2)  # B and S bind per call
    assert_logits(run(linnet_model, "forward", other), reference_logits(reference, other))
    linnet_model.reset_state()
    assert_logits(run(linnet_model, "prefill", tokens[:, :4], 0), expected[:, :4])
    assert_logits(run(linnet_model, "prefill", tokens[:, 4:9], 4), expected[:, 4:9])
    for position in range(9, 12):
        step = run(linnet_model, "decode", tokens[:, position], position)
        assert_logits(step, expected[:, position])


def test_greedy_decoding_equals_generate(linnet_model: Any, reference: Any) -> None:
    prompt = tokens_of((2, 6), seed=4)
    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        out = reference.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16
        )
    expected = out[:, 6:].numpy()
    np.testing.assert_array_equal(greedy(linnet_model, prompt, 16), expected)
    assert len(set(expected.ravel().tolist())) >= 4, "a degenerate reference proves little"
