"""`linnet.convert`: a local transformers folder -> a model card (`linnet.card`).

Families: llama, qwen2, qwen3, phi3, gpt2, and mistral (llama's source with
mistral's config; its sliding window must not be shorter than the context).

Stage: an importer that needs no graph: the five families' sources already
exist in Linnet (`linnet.hf.families.family_source`), named after transformers'
checkpoint names, so converting a folder is reading its `config.json` into the
root's generics and checking that the checkpoint binds as it is stored. The
card then holds the source, the generics, a reference to the folder's weights
(never copied or renamed), a `bindings.json` only for a tied head (which
`save_pretrained` omits), and copies of the tokenizer files, `config.json`,
`generation_config.json` and `README.md` (whose front matter's `license:` becomes
the card's `license`). A phi3 folder with longrope scaling gets one more
file, `rope_factors.safetensors` (its short and long factors, the source's
`rope_factors` buffer: generics are integers), which the card lists after the
folder's weights.

Anything the source cannot reproduce exactly is refused, with every reason at
once: another `model_type`, another activation, a rope scaling type other than
llama3 (and longrope for phi3), a sliding window shorter than the context, a value that is not an
integer generic, weights that are not SafeTensors, tensors missing or of the
wrong shape, stored tensors that bind nothing, and stored biases that the
source would bind but transformers' class does not have under the config
(`linnet.hf.families.transformers_reads`: a phi3 `lm_head.bias`, llama biases
without `attention_bias`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from linnet.atomic import atomic_write, write_bytes
from linnet.card import Card, read_card, readme_license, write_card
from linnet.errors import LinnetError
from linnet.hf.families import (
    FAMILIES,
    LONGROPE_PATH,
    Family,
    family_source,
    longrope_factors,
    transformers_reads,
)
from linnet.hf.folder import TOKENIZER_FILES

# The cache a card allocates is `MaxSeq` long; a config's context can be 128k.
DEFAULT_CONTEXT_LIMIT = 4096
ROPE_FACTORS_FILE = "rope_factors.safetensors"
KEPT_FILES = ("config.json", "generation_config.json", "README.md", *TOKENIZER_FILES)


def convert(
    folder: str | os.PathLike[str],
    *,
    output: str | os.PathLike[str] | None = None,
    context: int | None = None,
) -> Card:
    """Write the model card of the transformers folder `folder` to `output`
    (default: `<folder>-linnet` beside it) and return it as read back.

    `context` is the card's `MaxSeq` (the KV cache length); by default the
    config's `max_position_embeddings`, at most 4096.
    """
    source = Path(folder)
    config = _read_config(source)
    family = FAMILIES.get(str(config.get("model_type")))
    if family is None:
        raise LinnetError(
            f"{source}: cannot convert:\n  - model_type {config.get('model_type')!r} is not one "
            f"of {', '.join(FAMILIES)}"
        )
    generics, reasons = family.generics(config)
    positions = int(str(generics.get("MaxSeq", 1)))
    length = context if context is not None else min(positions, DEFAULT_CONTEXT_LIMIT)
    generics["MaxSeq"] = length
    generics["Batch"] = 1
    window = config.get("sliding_window")
    uses_window = family.name in ("phi3", "mistral") or bool(config.get("use_sliding_window"))
    if uses_window and isinstance(window, int) and window < length:
        reasons.append(
            f"`sliding_window` {window} is shorter than the context ({length}): "
            "sliding-window attention is not modelled (a shorter --context avoids it)"
        )
    bindings, found = _check_weights(source, family, config, generics)
    reasons += found
    if reasons:
        raise LinnetError(
            f"{source}: cannot convert this {family.name} folder:\n"
            + "\n".join(f"  - {r}" for r in reasons)
        )
    target = Path(output) if output is not None else source.parent / f"{source.name}-linnet"
    factors = longrope_factors(config) if family.name == "phi3" else None
    return _write(source, target, family, generics, bindings, factors)


def _read_config(source: Path) -> dict[str, object]:
    path = source / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LinnetError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise LinnetError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise LinnetError(f"{path}: not a JSON object")
    return data


def _check_weights(
    source: Path, family: Family, config: dict[str, object], generics: dict[str, object]
) -> tuple[dict[str, str], list[str]]:
    """(bindings for the tied head, reasons the checkpoint does not bind as stored);
    sets `T` to the stored dtype. Reads headers only."""
    from linnet import pipeline
    from linnet.weights import bind_weights, open_checkpoint, specs_from_model

    try:
        checkpoint = open_checkpoint(source)
    except LinnetError as exc:
        pickled = [p.name for p in source.glob("*.bin")] + [p.name for p in source.glob("*.pt")]
        extra = (
            f" ({', '.join(pickled)} are pickle files, which Linnet never reads)" if pickled else ""
        )
        return {}, [f"no SafeTensors weights: {exc.message}{extra}"]
    embedding = checkpoint.tensors.get(family.embedding)
    if embedding is not None and embedding.linnet_dtype is not None:
        generics["T"] = embedding.linnet_dtype
    bindings: dict[str, str] = {}
    tie = config.get("tie_word_embeddings", family.name in ("gpt2", "qwen3"))
    if family.head is not None and (tie is True or family.head not in checkpoint.tensors):
        if tie is not True:
            return {}, [f"`{family.head}` is not stored and `tie_word_embeddings` is {tie!r}"]
        bindings[family.head] = family.embedding
    reasons: list[str] = []
    try:
        model = pipeline.load_model(family_source(family), generics=generics)
    except LinnetError:
        return bindings, []  # generics the config lacks, reported already
    specs = specs_from_model(model)
    try:
        bound = bind_weights(specs, checkpoint, bindings=bindings, strict=False)
    except LinnetError as exc:
        return bindings, [exc.message]
    used = set(bound.names.values())
    unused = sorted(n for n in checkpoint.tensors if n not in used)
    if unused:
        reasons.append(
            f"{len(unused)} stored tensor(s) bind nothing in the {family.name} source: "
            + _shown(unused)
        )
    unread = sorted(
        name
        for path, name in bound.names.items()
        if specs[path].optional and not transformers_reads(family.name, config, path)
    )
    if unread:
        reasons.append(
            f"{len(unread)} stored tensor(s) that {family.architecture} does not have under "
            f"this config.json (the source would add them): " + _shown(unread)
        )
    return bindings, reasons


def _shown(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names[:6]) + (" ..." if len(names) > 6 else "")


def _write(
    source: Path,
    target: Path,
    family: Family,
    generics: dict[str, object],
    bindings: dict[str, str],
    factors: np.ndarray | None,
) -> Card:
    from linnet.weights import save_safetensors

    (target / "src").mkdir(parents=True, exist_ok=True)
    with (
        family_source(family).open("rb") as src,
        atomic_write(target / "src" / "lib.linnet") as out,
    ):
        shutil.copyfileobj(src, out)
    kept = [n for n in KEPT_FILES if (source / n).is_file()]
    for name in kept:
        if (source / name).resolve() != (target / name).resolve():
            with (source / name).open("rb") as src, atomic_write(target / name) as out:
                shutil.copyfileobj(src, out)
    if bindings:
        write_bytes(target / "bindings.json", (json.dumps(bindings, indent=2) + "\n").encode())
    has_tokenizer = any(n in TOKENIZER_FILES for n in kept)
    folder = os.path.relpath(source.resolve(), target.resolve())
    weights: str | list[str] = folder
    if factors is not None:
        save_safetensors({LONGROPE_PATH: factors}, target / ROPE_FACTORS_FILE)
        weights = [folder, ROPE_FACTORS_FILE]
    elif (target / ROPE_FACTORS_FILE).is_file():
        (target / ROPE_FACTORS_FILE).unlink()  # from an earlier conversion into this card
    readme = source / "README.md"
    spdx = (
        readme_license(readme.read_text(encoding="utf-8", errors="replace"))
        if readme.is_file()
        else None
    )
    write_card(
        target,
        {
            "name": source.resolve().name,
            "source": "src/lib.linnet",
            "root": family.root,
            "entry": "forward",
            "weights": weights,
            "bindings": "bindings.json" if bindings else None,
            "tokenizer": "." if has_tokenizer else None,
            "license": spdx,
        },
        generics,
    )
    return read_card(target)
