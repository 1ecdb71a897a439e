"""Shared cases for the Hugging Face and GGUF tests: one small model per family.

For each family (llama, qwen2, qwen3, phi3, gpt2): its example source, small
generics, seeded random weights for the Linnet model (`linnet_weights`), and a
random-initialised transformers model of the same config (`hf_model`) whose
`save_pretrained` folder the converter reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
Array = np.ndarray[Any, Any]

DECODER = {"Vocab": 67, "H": 32, "Heads": 4, "KvHeads": 2, "Inner": 48, "Layers": 2}

# family -> (example folder, generics of the Linnet root)
CASES: dict[str, tuple[str, dict[str, object]]] = {
    "llama": (
        "01-llama",
        {**DECODER, "HeadDim": 8, "RopeTheta": 500000, "EpsInverse": 1000000, "MaxSeq": 64},
    ),
    "qwen2": (
        "qwen2",
        {**DECODER, "HeadDim": 8, "RopeTheta": 1000000, "EpsInverse": 1000000, "MaxSeq": 64},
    ),
    "qwen3": (
        "qwen3",
        {**DECODER, "HeadDim": 16, "RopeTheta": 1000000, "EpsInverse": 1000000, "MaxSeq": 64},
    ),
    "phi3": (
        "phi3",
        {**DECODER, "HeadDim": 8, "RopeTheta": 10000, "EpsInverse": 100000, "MaxSeq": 64},
    ),
    "gpt2": (
        "gpt2",
        {"Vocab": 67, "Positions": 64, "H": 32, "Heads": 4, "Layers": 2, "Inner": 128},
    ),
}
FAMILIES = sorted(CASES)


def source(family: str) -> Path:
    return ROOT / "examples" / CASES[family][0] / "src" / "lib.linnet"


def generics(family: str, batch: int = 1) -> dict[str, object]:
    return {**CASES[family][1], "Batch": batch, "T": "f32"}


def linnet_weights(
    family: str, seed: int = 0, binds: dict[str, object] | None = None
) -> dict[str, Array]:
    """Seeded random weights for every mandatory param (plus qwen2's q/k/v biases):
    projections N(0, 0.15), norm weights 1 + N(0, 0.2). `binds`: other generics than
    the family's case."""
    from linnet import pipeline
    from linnet.weights import specs_from_model

    model = pipeline.load_model(source(family), generics=binds or generics(family))
    rng = np.random.default_rng(seed)
    out: dict[str, Array] = {}
    for path, spec in specs_from_model(model).items():
        wanted = not spec.optional and spec.group is None
        if family == "qwen2" and path.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")):
            wanted = True
        if not wanted:
            continue
        values = rng.normal(0.0, 0.15, spec.shape)
        if "norm" in path.rsplit(".", 2)[-2] or path.split(".")[-2].startswith("ln_"):
            values = 1.0 + rng.normal(0.0, 0.2, spec.shape) if path.endswith("weight") else values
        out[path] = values.astype(np.float32)
    return out


def tokens_of(shape: tuple[int, ...], seed: int, vocab: int = 67) -> Array:
    return np.random.default_rng(seed).integers(0, vocab, shape).astype(np.int32)


def hf_model(family: str, seed: int = 0, *, tied: bool = False) -> Any:
    """A random-initialised transformers model of the family's config (eager attention),
    norm weights perturbed away from 1 so that they matter."""
    import torch
    import transformers

    values = CASES[family][1]
    if family == "gpt2":
        config: Any = transformers.GPT2Config(
            vocab_size=values["Vocab"],
            n_positions=values["Positions"],
            n_embd=values["H"],
            n_layer=values["Layers"],
            n_head=values["Heads"],
            n_inner=values["Inner"],
            initializer_range=0.15,
            bos_token_id=None,
            eos_token_id=None,
            attn_implementation="eager",
        )
        model_class: Any = transformers.GPT2LMHeadModel
    else:
        classes = {
            "llama": ("LlamaConfig", "LlamaForCausalLM"),
            "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
            "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
            "phi3": ("Phi3Config", "Phi3ForCausalLM"),
        }[family]
        config = getattr(transformers, classes[0])(
            vocab_size=values["Vocab"],
            hidden_size=values["H"],
            num_attention_heads=values["Heads"],
            num_key_value_heads=values["KvHeads"],
            intermediate_size=values["Inner"],
            num_hidden_layers=values["Layers"],
            head_dim=values["HeadDim"],
            max_position_embeddings=values["MaxSeq"],
            rms_norm_eps=1.0 / int(str(values["EpsInverse"])),
            rope_parameters={"rope_type": "default", "rope_theta": float(str(values["RopeTheta"]))},
            initializer_range=0.15,
            tie_word_embeddings=tied,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
            attn_implementation="eager",
        )
        model_class = getattr(transformers, classes[1])
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith(("norm.weight", "ln_1.weight", "ln_2.weight", "ln_f.weight")):
                value.add_(0.2 * torch.randn_like(value))
            elif name.endswith(".bias"):
                value.normal_(0.0, 0.3)
    return model


# Phi-3 longrope: 4 short and 4 long factors (head_dim 8), an original length of 16
# below max_position_embeddings 64 (so the attention factor is sqrt(1 + ln 4 / ln 16)).
LONGROPE_SHORT = [1.0, 1.1, 1.25, 1.5]
LONGROPE_LONG = [2.0, 3.5, 7.0, 11.0]
LONGROPE_ORIGINAL = 16
LONGROPE_POSITIONS = 64


def phi3_longrope_model(seed: int = 0) -> Any:
    """A random-initialised transformers `Phi3ForCausalLM` of the phi3 case's sizes with
    longrope scaling (the `LONGROPE_*` values), norm weights perturbed away from 1."""
    import torch
    import transformers

    values = CASES["phi3"][1]
    config = transformers.Phi3Config(
        vocab_size=values["Vocab"],
        hidden_size=values["H"],
        num_attention_heads=values["Heads"],
        num_key_value_heads=values["KvHeads"],
        intermediate_size=values["Inner"],
        num_hidden_layers=values["Layers"],
        head_dim=values["HeadDim"],
        max_position_embeddings=LONGROPE_POSITIONS,
        original_max_position_embeddings=LONGROPE_ORIGINAL,
        rms_norm_eps=1e-5,
        rope_scaling={
            "type": "longrope",
            "short_factor": LONGROPE_SHORT,
            "long_factor": LONGROPE_LONG,
        },
        rope_theta=10000.0,
        initializer_range=0.15,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    model = transformers.Phi3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.add_(0.2 * torch.randn_like(value))
    return model


def hf_logits(model: Any, tokens: Array) -> Array:
    import torch

    with torch.no_grad():
        logits: Array = model(torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy()
    return logits


def linnet_logits(module: Any, tokens: Array) -> Array:
    import torch

    with torch.no_grad():
        logits: Array = module.run_entry("forward", [torch.from_numpy(tokens)]).numpy()
    return logits


def linnet_greedy(module: Any, prompt: Array, steps: int) -> Array:
    """`steps` greedy tokens `[B, steps]` of a decoder example on linnet.torch: `prefill`
    of the prompt, then one `decode` per token, each argmax fed back."""
    import torch

    def run(entry: str, *inputs: object) -> Array:
        args = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in inputs]
        with torch.no_grad():
            out: Array = module.run_entry(entry, args).numpy()
        return out

    module.reset_state()
    token = run("prefill", prompt, 0)[:, -1].argmax(-1).astype(np.int32)
    chosen = [token]
    for step in range(1, steps):
        token = run("decode", token, prompt.shape[1] + step - 1).argmax(-1).astype(np.int32)
        chosen.append(token)
    return np.stack(chosen, axis=1)


def save_tokenizer(folder: Path, vocab_size: int = 67) -> None:
    """A small byte-free BPE tokenizer (`tokenizer.json` + `tokenizer_config.json`) with
    `<s>`, `</s>` and `<unk>`, its merges pairing letters, `vocab_size` tokens in all."""
    import string

    import tokenizers
    import transformers

    letters = list(string.ascii_lowercase)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for letter in letters:
        vocab[letter] = len(vocab)
    merges: list[tuple[str, str]] = []
    for first in letters:
        for second in letters:
            if len(vocab) >= vocab_size:
                break
            if first + second not in vocab:
                merges.append((first, second))
                vocab[first + second] = len(vocab)
    model = tokenizers.models.BPE(vocab=vocab, merges=merges, unk_token="<unk>")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(folder)


def save_sentencepiece(folder: Path) -> Path:
    """A tiny SentencePiece BPE model (60 pieces, `<|user|>` a special added token) with a
    `tokenizer_config.json` naming bos/eos/unk, as a llama folder holds them."""
    import io
    import json

    import sentencepiece as spm

    corpus = [
        "the quick brown fox jumps over the lazy dog",
        "a linnet sings in the hedge at dawn",
        "tensors flow through typed graphs",
        "hello world this is a small corpus for a tiny model",
    ] * 20
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, vocab_size=60, model_type="bpe",
        character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        user_defined_symbols=["<|user|>"], minloglevel=2,
    )  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    settings = {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False,
        "added_tokens_decoder": {"3": {"content": "<|user|>", "special": True}},
    }  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return folder
