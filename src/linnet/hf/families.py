"""The five model families a Hugging Face folder can hold, both ways: Linnet model <-> config.json.

Stage: exporters and `linnet.convert`. A family is recognised from a bound
model's parameter paths, its generics and which optional tensors the weights
provide (`recognise`), and each family turns the root's generics into a
transformers `config.json` (`Family.config`) and back (`Family.generics`).

The examples that implement the families (examples/01-llama, qwen2, qwen3,
phi3, gpt2) name their members after transformers' checkpoint names, so a
parameter path *is* the transformers tensor name; only the tied head of a
folder is special (`save_pretrained` omits it).

Config values that are floats in `config.json` are integer generics of the
sources (language.md 5.5 has no float generics): `rope_theta` as `RopeTheta`,
an eps as `EpsInverse` (eps = 1 / EpsInverse) and the llama3 rope scaling
factors. `Family.generics` refuses a value it cannot represent exactly.
Phi-3's longrope factors are lists of floats: the phi3 source reads them from
its optional buffer `rope_factors` (`longrope_factors` gives its value,
`longrope_config` turns it back into the config's keys).

The configs carry `rope_theta` both at the top level (transformers 4.x, which
vLLM and SGLang pin) and in `rope_parameters` (transformers 5), and the dtype
both as `torch_dtype` (4.x) and `dtype` (5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from fractions import Fraction
from pathlib import Path

import numpy as np

from linnet.records import record

JSON = dict[str, object]

# The phi3 source's optional buffer of longrope factors (`[2, HeadDim / 2]` f32: short, long).
LONGROPE_PATH = "rope_factors"
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64"}
LINNET_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}

# The llama-like families share these generics and config keys.
_DECODER_SIZES = {
    "Vocab": "vocab_size",
    "H": "hidden_size",
    "Heads": "num_attention_heads",
    "KvHeads": "num_key_value_heads",
    "Inner": "intermediate_size",
    "Layers": "num_hidden_layers",
    "HeadDim": "head_dim",
}
_LLAMA3_KEYS = {
    "RopeFactor": "factor",
    "RopeLowFreqFactor": "low_freq_factor",
    "RopeHighFreqFactor": "high_freq_factor",
    "RopeOriginalMaxSeq": "original_max_position_embeddings",
}


@record(frozen=True)
class Family:
    """One transformers architecture as a Linnet example implements it.

    - `name`: the `model_type`; `architecture`: the class name in `architectures`;
    - `example`: the examples/ folder whose source implements it; `root`: its root block;
    - `required`: parameter paths (layer 0 standing for every layer) that must exist;
    - `present`/`absent`: optional tensors that the weights must provide / must not;
    - `embedding`, `head`: the token embedding path and the head path (None: always tied);
    - `eps_key`: the config key of the norm eps; `activation`: (config key, value);
    - `recognised`: False for a family that only `convert` reads (mistral is llama's
      source with its own config, so `recognise` could not tell the two apart).
    """

    name: str
    architecture: str
    example: str
    root: str
    required: tuple[str, ...]
    present: tuple[str, ...]
    absent: tuple[str, ...]
    embedding: str
    head: str | None
    eps_key: str
    activation: tuple[str, str]
    config: Callable[[Mapping[str, int | str], bool, Set[str]], JSON]
    generics: Callable[[Mapping[str, object]], tuple[dict[str, object], list[str]]]
    paired: tuple[str, str] | None = None
    recognised: bool = True

    def reasons(self, paths: Set[str], bound: Set[str], generics: Set[str]) -> list[str]:
        """Why a model with these declared `paths`, `bound` tensors and `generics` is not this family."""
        out = [f"no parameter `{p}`" for p in self.required if p not in paths]
        out += [f"`{p}` is not in the weights" for p in self.present if p not in bound]
        out += [f"`{p}` is in the weights" for p in self.absent if p in bound]
        if self.paired is not None and self.paired[0] in bound and self.paired[1] not in bound:
            out.append(f"`{self.paired[0]}` is in the weights without `{self.paired[1]}`")
        wanted = _GENERICS[self.name]
        out += [f"no generic `{g}`" for g in wanted if g not in generics]
        return out


def _eps(generics: Mapping[str, int | str]) -> float:
    return 1.0 / int(generics["EpsInverse"])


def _rope(generics: Mapping[str, int | str]) -> tuple[JSON, JSON | None]:
    """(`rope_parameters`, `rope_scaling` or None) for transformers 5 and 4.x."""
    theta = float(int(generics["RopeTheta"]))
    factor = int(generics.get("RopeFactor", 1))
    if factor == 1:
        return {"rope_type": "default", "rope_theta": theta}, None
    scaling: JSON = {
        "rope_type": "llama3",
        "factor": float(factor),
        "low_freq_factor": float(int(generics["RopeLowFreqFactor"])),
        "high_freq_factor": float(int(generics["RopeHighFreqFactor"])),
        "original_max_position_embeddings": int(generics["RopeOriginalMaxSeq"]),
    }
    return {**scaling, "rope_theta": theta}, scaling


def _decoder_config(
    model_type: str, architecture: str, extra: Callable[[Set[str]], JSON]
) -> Callable[[Mapping[str, int | str], bool, Set[str]], JSON]:
    def config(generics: Mapping[str, int | str], tied: bool, bound: Set[str]) -> JSON:
        dtype = TORCH_DTYPES[str(generics.get("T", "f32"))]
        parameters, scaling = _rope(generics)
        out: JSON = {
            "architectures": [architecture],
            "model_type": model_type,
            **{key: int(generics[g]) for g, key in _DECODER_SIZES.items()},
            "hidden_act": "silu",
            "max_position_embeddings": int(generics["MaxSeq"]),
            "rms_norm_eps": _eps(generics),
            "rope_theta": parameters["rope_theta"],
            "rope_parameters": parameters,
            "rope_scaling": scaling,
            "tie_word_embeddings": tied,
            "torch_dtype": dtype,
            "dtype": dtype,
            "use_cache": True,
            "attention_dropout": 0.0,
            "initializer_range": 0.02,
        }
        out.update(extra(bound))
        return out

    return config


def _decoder_generics(
    family: str, *, eps_default: float, theta_default: float
) -> Callable[[Mapping[str, object]], tuple[dict[str, object], list[str]]]:
    """config.json -> the root's generics, with every value it cannot represent as a reason."""

    def generics(config: Mapping[str, object]) -> tuple[dict[str, object], list[str]]:
        reasons: list[str] = []
        out: dict[str, object] = {}
        longrope = family == "phi3"
        for generic, key in _DECODER_SIZES.items():
            value = config.get(key)
            if key == "head_dim" and value is None:
                heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
                if isinstance(heads, int) and isinstance(hidden, int) and heads:
                    value = hidden // heads
            if key == "num_key_value_heads" and value is None:
                value = config.get("num_attention_heads")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                out[generic] = value
            else:
                reasons.append(f"`{key}` is {value!r}, not a positive integer")
        positions = config.get("max_position_embeddings")
        if isinstance(positions, int) and positions > 0:
            out["MaxSeq"] = positions
        else:
            reasons.append(f"`max_position_embeddings` is {positions!r}")
        inverse = _inverse(config.get("rms_norm_eps", eps_default), "rms_norm_eps", reasons)
        if inverse is not None:
            out["EpsInverse"] = inverse
        out.update(_rope_generics(config, theta_default, reasons, longrope=longrope))
        dtype = config.get("dtype", config.get("torch_dtype", "float32"))
        out["T"] = LINNET_DTYPES.get(str(dtype), "f32")
        if config.get("hidden_act", "silu") != "silu":
            reasons.append(
                f"activation `hidden_act` {config.get('hidden_act')!r}: {family} runs silu"
            )
        return out, reasons

    return generics


def _inverse(value: object, key: str, reasons: list[str]) -> int | None:
    """`N` with `1 / N == value` exactly in f64, or None with a reason."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        reasons.append(f"`{key}` is {value!r}, not a positive number")
        return None
    inverse = round(1.0 / float(value))
    if inverse < 1 or 1.0 / inverse != float(value):
        reasons.append(f"`{key}` {value!r} is not 1 / N for an integer N")
        return None
    return inverse


def _integer(value: object, key: str, reasons: list[str]) -> int | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        exact = Fraction(value)
        if exact.denominator == 1 and exact > 0:
            return int(exact)
    reasons.append(f"`{key}` is {value!r}, not a positive integer")
    return None


def _rope_parameters(config: Mapping[str, object]) -> dict[str, object]:
    """`rope_parameters` (transformers 5) over `rope_scaling` (4.x), as one mapping."""
    raw = config.get("rope_parameters") or config.get("rope_scaling") or {}
    parameters = dict(raw) if isinstance(raw, Mapping) else {}
    scaling = config.get("rope_scaling")
    if isinstance(scaling, Mapping):
        parameters = {**dict(scaling), **parameters}
    return parameters


def _rope_kind(parameters: Mapping[str, object]) -> object:
    kind = parameters.get("rope_type", parameters.get("type", "default"))
    return "longrope" if kind in ("su", "yarn_longrope") else kind


def _rope_generics(
    config: Mapping[str, object], theta_default: float, reasons: list[str], *, longrope: bool
) -> dict[str, object]:
    parameters = _rope_parameters(config)
    theta = parameters.get("rope_theta", config.get("rope_theta", theta_default))
    out: dict[str, object] = {}
    value = _integer(theta, "rope_theta", reasons)
    if value is not None:
        out["RopeTheta"] = value
    kind = _rope_kind(parameters)
    if parameters.get("partial_rotary_factor", 1.0) != 1.0:
        reasons.append(
            f"`partial_rotary_factor` {parameters['partial_rotary_factor']!r}: only 1.0 is modelled"
        )
    if kind == "llama3":
        for generic, key in _LLAMA3_KEYS.items():
            value = _integer(parameters.get(key), f"rope_parameters.{key}", reasons)
            if value is not None:
                out[generic] = value
    elif kind == "longrope" and longrope:
        out.update(_longrope_generics(config, parameters, reasons))
    elif kind != "default":
        modelled = (
            "the default rope, llama3 and longrope" if longrope else "the default rope and llama3"
        )
        reasons.append(f"rope scaling type {kind!r}: only {modelled} are modelled")
    return out


def _longrope_generics(
    config: Mapping[str, object], parameters: Mapping[str, object], reasons: list[str]
) -> dict[str, object]:
    """`RopeOriginalMaxSeq` and `RopeMaxPositions` of a longrope config, with the reasons
    its factors cannot be reproduced (checked as transformers' `Phi3Config.validate_rope`)."""
    out: dict[str, object] = {}
    original = parameters.get(
        "original_max_position_embeddings", config.get("original_max_position_embeddings")
    )
    value = _integer(original, "original_max_position_embeddings", reasons)
    if value is not None:
        out["RopeOriginalMaxSeq"] = value
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        out["RopeMaxPositions"] = positions
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    head_dim = config.get("head_dim")
    if not isinstance(head_dim, int) and isinstance(heads, int) and isinstance(hidden, int):
        head_dim = hidden // heads if heads else None
    for key in ("short_factor", "long_factor"):
        factors = parameters.get(key)
        numbers = isinstance(factors, list) and all(
            isinstance(f, int | float) and not isinstance(f, bool) for f in factors
        )
        if not numbers:
            reasons.append(f"`rope_parameters.{key}` is {factors!r}, not a list of numbers")
        elif (
            isinstance(head_dim, int)
            and isinstance(factors, list)
            and len(factors) != head_dim // 2
        ):
            reasons.append(
                f"`rope_parameters.{key}` has {len(factors)} factors, not head_dim / 2 = {head_dim // 2}"
            )
    if isinstance(positions, int) and value is not None:
        factor = parameters.get("factor")
        if factor is not None and factor != positions / value:
            reasons.append(
                f"longrope `factor` {factor!r}: only max_position_embeddings / "
                f"original_max_position_embeddings ({positions / value!r}) is modelled"
            )
        if parameters.get("attention_factor") is not None:
            reasons.append(
                f"longrope `attention_factor` {parameters['attention_factor']!r}: only the "
                "default sqrt(1 + ln(factor) / ln(original_max_position_embeddings)) is modelled"
            )
    return out


def longrope_factors(config: Mapping[str, object]) -> np.ndarray | None:
    """The phi3 source's `rope_factors` buffer for a longrope `config` (f32 `[2, HeadDim / 2]`:
    `short_factor`, then `long_factor`, rounded to f32 as transformers rounds them), or None."""
    parameters = _rope_parameters(config)
    if _rope_kind(parameters) != "longrope":
        return None
    rows = [parameters.get("short_factor"), parameters.get("long_factor")]
    return np.asarray(rows, dtype=np.float32)


def _shortest(row: np.ndarray) -> list[float]:
    """Each f32 as the shortest decimal that rounds back to it (1.1, not 1.100000023841858)."""
    return [float(str(value)) for value in np.asarray(row, dtype=np.float32)]


def longrope_config(generics: Mapping[str, int | str], factors: np.ndarray) -> JSON:
    """The config keys of a phi3 model with the `rope_factors` buffer `factors`:
    `rope_parameters`/`rope_scaling` of type longrope and the two context lengths."""
    original = int(generics["RopeOriginalMaxSeq"])
    # transformers 4.x's Phi3Config wants exactly these three keys in `rope_scaling`.
    scaling: JSON = {
        "type": "longrope",
        "short_factor": _shortest(factors[0]),
        "long_factor": _shortest(factors[1]),
    }
    parameters: JSON = {
        **scaling,
        "rope_type": "longrope",
        "rope_theta": float(int(generics["RopeTheta"])),
        "partial_rotary_factor": 1.0,
        "original_max_position_embeddings": original,
    }
    return {
        "max_position_embeddings": int(generics["RopeMaxPositions"]),
        "original_max_position_embeddings": original,
        "rope_parameters": parameters,
        "rope_scaling": scaling,
    }


def _llama_extra(bound: Set[str]) -> JSON:
    return {
        "attention_bias": f"{_L0}.self_attn.q_proj.bias" in bound,
        "mlp_bias": f"{_L0}.mlp.gate_proj.bias" in bound,
        "pretraining_tp": 1,
    }


def _qwen_extra(bound: Set[str]) -> JSON:
    return {"use_sliding_window": False, "sliding_window": None, "max_window_layers": 0}


def _qwen3_extra(bound: Set[str]) -> JSON:
    return {**_qwen_extra(bound), "attention_bias": False}


def _phi3_extra(bound: Set[str]) -> JSON:
    return {
        "sliding_window": None,
        "partial_rotary_factor": 1.0,
        "pad_token_id": None,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
    }


def _gpt2_config(generics: Mapping[str, int | str], tied: bool, bound: Set[str]) -> JSON:
    dtype = TORCH_DTYPES[str(generics.get("T", "f32"))]
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": int(generics["Vocab"]),
        "n_positions": int(generics["Positions"]),
        "n_embd": int(generics["H"]),
        "n_layer": int(generics["Layers"]),
        "n_head": int(generics["Heads"]),
        "n_inner": int(generics["Inner"]),
        "activation_function": "gelu_new",
        "layer_norm_epsilon": _eps(generics),
        "tie_word_embeddings": True,
        "torch_dtype": dtype,
        "dtype": dtype,
        "use_cache": True,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "initializer_range": 0.02,
    }


_GPT2_KEYS = {
    "Vocab": "vocab_size",
    "Positions": "n_positions",
    "H": "n_embd",
    "Layers": "n_layer",
    "Heads": "n_head",
}


def _gpt2_generics(config: Mapping[str, object]) -> tuple[dict[str, object], list[str]]:
    reasons: list[str] = []
    out: dict[str, object] = {}
    for generic, key in _GPT2_KEYS.items():
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            out[generic] = value
        else:
            reasons.append(f"`{key}` is {value!r}, not a positive integer")
    inner = config.get("n_inner")
    hidden = out.get("H")
    out["Inner"] = inner if isinstance(inner, int) else 4 * int(str(hidden or 0))
    out["MaxSeq"] = out.get("Positions", 1)
    inverse = _inverse(config.get("layer_norm_epsilon", 1e-5), "layer_norm_epsilon", reasons)
    if inverse is not None:
        out["EpsInverse"] = inverse
    dtype = config.get("dtype", config.get("torch_dtype", "float32"))
    out["T"] = LINNET_DTYPES.get(str(dtype), "f32")
    activation = config.get("activation_function", "gelu_new")
    if activation not in ("gelu_new", "gelu_pytorch_tanh"):
        reasons.append(f"activation `activation_function` {activation!r}: gpt2 runs the tanh GELU")
    if config.get("scale_attn_by_inverse_layer_idx") or config.get("reorder_and_upcast_attn"):
        reasons.append(
            "`scale_attn_by_inverse_layer_idx`/`reorder_and_upcast_attn` are not modelled"
        )
    if config.get("scale_attn_weights", True) is not True:
        reasons.append("`scale_attn_weights` false is not modelled")
    return out, reasons


_L0 = "model.layers.0"
_DECODER_COMMON = (
    "model.embed_tokens.weight",
    "model.norm.weight",
    f"{_L0}.input_layernorm.weight",
    f"{_L0}.post_attention_layernorm.weight",
    f"{_L0}.self_attn.o_proj.weight",
    f"{_L0}.mlp.down_proj.weight",
    "lm_head.weight",
)
_SEPARATE_QKV = tuple(f"{_L0}.self_attn.{p}_proj.weight" for p in "qkv")
_SEPARATE_MLP = (f"{_L0}.mlp.gate_proj.weight", f"{_L0}.mlp.up_proj.weight")
_QKV_BIASES = tuple(f"{_L0}.self_attn.{p}_proj.bias" for p in "qkv")
_QK_NORMS = (f"{_L0}.self_attn.q_norm.weight", f"{_L0}.self_attn.k_norm.weight")

_DECODER_GENERICS = ("Vocab", "H", "Heads", "KvHeads", "Inner", "Layers", "MaxSeq", "HeadDim")
_GENERICS: dict[str, tuple[str, ...]] = {
    "llama": (*_DECODER_GENERICS, "RopeTheta", "EpsInverse"),
    "qwen2": (*_DECODER_GENERICS, "RopeTheta", "EpsInverse"),
    "qwen3": (*_DECODER_GENERICS, "RopeTheta", "EpsInverse"),
    "phi3": (*_DECODER_GENERICS, "RopeTheta", "EpsInverse"),
    "mistral": (*_DECODER_GENERICS, "RopeTheta", "EpsInverse"),
    "gpt2": ("Vocab", "Positions", "H", "Heads", "Layers", "Inner", "MaxSeq", "EpsInverse"),
}

FAMILIES: dict[str, Family] = {
    "llama": Family(
        "llama",
        "LlamaForCausalLM",
        "01-llama",
        "LlamaForCausalLM",
        (*_DECODER_COMMON, *_SEPARATE_QKV, *_SEPARATE_MLP),
        (),
        _QK_NORMS,
        "model.embed_tokens.weight",
        "lm_head.weight",
        "rms_norm_eps",
        ("hidden_act", "silu"),
        _decoder_config("llama", "LlamaForCausalLM", _llama_extra),
        _decoder_generics("llama", eps_default=1e-6, theta_default=10000.0),
        (f"{_L0}.self_attn.q_proj.bias", f"{_L0}.self_attn.o_proj.bias"),
    ),
    "qwen2": Family(
        "qwen2",
        "Qwen2ForCausalLM",
        "qwen2",
        "Qwen2ForCausalLM",
        (*_DECODER_COMMON, *_SEPARATE_QKV, *_SEPARATE_MLP, *_QKV_BIASES),
        _QKV_BIASES,
        (*_QK_NORMS, f"{_L0}.self_attn.o_proj.bias"),
        "model.embed_tokens.weight",
        "lm_head.weight",
        "rms_norm_eps",
        ("hidden_act", "silu"),
        _decoder_config("qwen2", "Qwen2ForCausalLM", _qwen_extra),
        _decoder_generics("qwen2", eps_default=1e-6, theta_default=1000000.0),
    ),
    "qwen3": Family(
        "qwen3",
        "Qwen3ForCausalLM",
        "qwen3",
        "Qwen3ForCausalLM",
        (*_DECODER_COMMON, *_SEPARATE_QKV, *_SEPARATE_MLP, *_QK_NORMS),
        (),
        (*_QKV_BIASES, f"{_L0}.self_attn.o_proj.bias"),
        "model.embed_tokens.weight",
        "lm_head.weight",
        "rms_norm_eps",
        ("hidden_act", "silu"),
        _decoder_config("qwen3", "Qwen3ForCausalLM", _qwen3_extra),
        _decoder_generics("qwen3", eps_default=1e-6, theta_default=1000000.0),
    ),
    "phi3": Family(
        "phi3",
        "Phi3ForCausalLM",
        "phi3",
        "Phi3ForCausalLM",
        (*_DECODER_COMMON, f"{_L0}.self_attn.qkv_proj.weight", f"{_L0}.mlp.gate_up_proj.weight"),
        (),
        (f"{_L0}.self_attn.qkv_proj.bias", f"{_L0}.self_attn.o_proj.bias"),
        "model.embed_tokens.weight",
        "lm_head.weight",
        "rms_norm_eps",
        ("hidden_act", "silu"),
        _decoder_config("phi3", "Phi3ForCausalLM", _phi3_extra),
        _decoder_generics("phi3", eps_default=1e-5, theta_default=10000.0),
    ),
    "mistral": Family(
        "mistral",
        "MistralForCausalLM",
        "01-llama",
        "LlamaForCausalLM",
        (*_DECODER_COMMON, *_SEPARATE_QKV, *_SEPARATE_MLP),
        (),
        (*_QK_NORMS, *_QKV_BIASES),
        "model.embed_tokens.weight",
        "lm_head.weight",
        "rms_norm_eps",
        ("hidden_act", "silu"),
        _decoder_config("mistral", "MistralForCausalLM", lambda bound: {"sliding_window": None}),
        _decoder_generics("mistral", eps_default=1e-6, theta_default=10000.0),
        recognised=False,
    ),
    "gpt2": Family(
        "gpt2",
        "GPT2LMHeadModel",
        "gpt2",
        "Gpt2",
        (
            "transformer.wte.weight",
            "transformer.wpe.weight",
            "transformer.ln_f.weight",
            "transformer.h.0.ln_1.weight",
            "transformer.h.0.attn.c_attn.weight",
            "transformer.h.0.attn.c_proj.weight",
            "transformer.h.0.mlp.c_fc.weight",
            "transformer.h.0.mlp.c_proj.weight",
        ),
        (),
        (),
        "transformer.wte.weight",
        None,
        "layer_norm_epsilon",
        ("activation_function", "gelu_new"),
        _gpt2_config,
        _gpt2_generics,
    ),
}


def transformers_reads(family: str, config: Mapping[str, object], path: str) -> bool:
    """Whether transformers' class of `family` has the tensor `path` under `config`, for
    the paths the sources declare optional: every bias (the std `Linear`'s) and phi3's
    `rope_factors`. A stored bias that the class lacks would be bound by the source
    and change its function while transformers ignores it."""
    if not path.endswith(".bias") or family == "gpt2":
        return True
    if path == "lm_head.bias":
        return False
    if family in ("llama", "qwen3") and ".self_attn." in path:
        return config.get("attention_bias") is True
    if family == "llama" and ".mlp." in path:
        return config.get("mlp_bias") is True
    return False  # qwen2's o_proj and MLP, mistral's and phi3's projections


def recognise(paths: Set[str], bound: Set[str], generics: Set[str]) -> tuple[Family, list[str]]:
    """The one family these parameter paths, bound tensors and generics fit, with the
    reasons every other family gave; a `LinnetError` listing each family's reasons if none fits."""
    from linnet.errors import LinnetError

    reasons = {
        name: family.reasons(paths, bound, generics)
        for name, family in FAMILIES.items()
        if family.recognised
    }
    fits = [name for name, found in reasons.items() if not found]
    if len(fits) != 1:
        detail = "\n".join(
            f"  - {name}: " + "; ".join(found[:4]) + (" ..." if len(found) > 4 else "")
            for name, found in reasons.items()
            if found
        )
        what = "none" if not fits else "more than one (" + ", ".join(fits) + ")"
        raise LinnetError(
            f"the model is {what} of the Hugging Face families ({', '.join(FAMILIES)}):\n{detail}"
        )
    return FAMILIES[fits[0]], [
        r for name, found in reasons.items() for r in found if name != fits[0]
    ]


def family_source(family: Family) -> Path:
    """The Linnet source implementing `family`: shipped in the wheel as
    `linnet/_models/<name>/lib.linnet` (pyproject force-includes the examples' `src`
    folders), or the example itself in a source checkout."""
    package = Path(__file__).resolve().parents[1]
    shipped = package / "_models" / family.name / "lib.linnet"
    if shipped.is_file():
        return shipped
    checkout = package.parents[1] / "examples" / family.example / "src" / "lib.linnet"
    if checkout.is_file():
        return checkout
    from linnet.errors import LinnetError

    raise LinnetError(f"the {family.name} source is missing: neither {shipped} nor {checkout}")
