"""`linnet.hf.export` (this module is `linnet.hf.folder`): a checked Linnet model and its weights -> a Hugging Face folder.

Stage: exporter (architecture.md "The second wave"). In: a source, the root's
generics and a checkpoint (bound as `linnet.torch.load` binds it). Out: a folder
that transformers, vLLM, SGLang and TGI load unchanged: `config.json`,
`generation_config.json`, `model.safetensors` (or shards past `max_shard_bytes`
with `model.safetensors.index.json`) under transformers' tensor names, and the
tokenizer files when given.

The family (llama, qwen2, qwen3, phi3, gpt2) is recognised from the parameter
paths, the generics and which optional tensors the weights hold
(`linnet.hf.families`); a model of none of them is refused with each family's
reasons. Tensors are written one at a time from the (memory-mapped) checkpoint,
never all in memory, and every file goes through `linnet.atomic`; a model whose
linears are `std.quant`'s `Int4GroupLinear` is written in the GPTQ format with
its `quantization_config` (`linnet.hf.gptq`); a tensor stored
as it is written (same dtype, same bytes) is copied file to file by the kernel
(`save_safetensors_streamed`), and such tensors keep the checkpoint's order, so
that those adjacent there go in one copy: a checkpoint holding just the exported
tensors (the bindings only rename) has its whole data section copied at once,
and an export costs about a file copy.
The tokenizer files are copied as they are, except a `tokenizer_config.json`
naming transformers 5's `TokenizersBackend`, which 4.x lacks: it gets the name
both lines know, `PreTrainedTokenizerFast` (5's alias of the same class).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from linnet.atomic import atomic_write, write_bytes
from linnet.errors import LinnetError
from linnet.hf.families import LONGROPE_PATH, Family, longrope_config, recognise
from linnet.hf.gptq import Spec, WeightPlan, plan_weights
from linnet.records import record

MAX_SHARD_BYTES = 5_000_000_000  # transformers' default `max_shard_size="5GB"`
SINGLE_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
# The files a tokenizer may consist of, as `save_pretrained` writes them.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "chat_template.jinja",
    "chat_template.json",
)


@record(frozen=True)
class Exported:
    """What `export` wrote: the folder, the family, the tensor files and whether the head is tied."""

    folder: Path
    family: str
    weight_files: tuple[str, ...]
    tied: bool
    tensors: int


def export(
    source: Any,
    output: str | os.PathLike[str],
    *,
    generics: Mapping[str, object],
    weights: Any,
    bindings: Any = None,
    root: str | None = None,
    std_root: str | os.PathLike[str] | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Exported:
    """Write the Hugging Face folder `output` for `source` bound with `generics` and `weights`.

    `weights` is a SafeTensors file, a shard folder or index, or a mapping of
    arrays (NumPy or torch); `bindings` maps paths to checkpoint names as in
    `linnet.torch.load`. `tokenizer` is a folder holding tokenizer files (or a
    `tokenizer.json`); they are copied, and their special token ids go into the
    configs. A `LinnetError` names what does not fit, before anything is written.
    """
    bound = bind_family(
        source, generics=generics, weights=weights, bindings=bindings, root=root, std_root=std_root
    )
    family, values, tied = bound.family, bound.generics, bound.tied
    names = weight_paths(bound)
    tokens = special_token_ids(tokenizer)
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = str(values.get("T", "f32"))
    plan = plan_weights(family.name, bound.arrays, names, dtype)
    config = {**family.config(values, tied, set(bound.arrays)), **tokens}
    if plan.quantization is not None:
        config["quantization_config"] = plan.quantization
    factors = bound.arrays.get(LONGROPE_PATH)
    if factors is not None:  # phi3's longrope: lists in config.json, not a tensor
        config.update(longrope_config(values, np.asarray(factors)))
    _write_json(folder / "config.json", config)
    _write_json(folder / "generation_config.json", {"_from_model_config": True, **tokens})
    files = _write_weights(folder, plan, max_shard_bytes)
    if tokenizer is not None:
        _copy_tokenizer(Path(tokenizer), folder)
    return Exported(folder, family.name, tuple(files), tied, len(plan.specs))


@record(frozen=True)
class BoundFamily:
    """A model bound to its weights and recognised: what every exporter starts from.

    `arrays` by parameter path (memory-mapped where the checkpoint is a file),
    `generics` the root's (defaults included, packs left out), `tied` whether
    the head reads the token embedding.
    """

    family: Family
    arrays: dict[str, np.ndarray]
    generics: dict[str, int | str]
    tied: bool


def bind_family(
    source: Any,
    *,
    generics: Mapping[str, object],
    weights: Any,
    bindings: Any = None,
    root: str | None = None,
    std_root: str | os.PathLike[str] | None = None,
) -> BoundFamily:
    """Check `source`, bind `generics` and `weights`, and recognise the family (or refuse
    with each family's reasons)."""
    from linnet.ir.bind import bind
    from linnet.pipeline import check_program
    from linnet.weights import bind_model_weights

    program = check_program(source, std_root)
    model = bind(program, root=root, generics=generics)
    bound = bind_model_weights(model, _checkpoint_source(weights), bindings=bindings)
    declared = {p for p, t in model.tensors.items() if t.kind != "state"}
    family, _ = recognise(declared, set(bound.arrays), set(model.generics))
    values = {k: v for k, v in model.generics.items() if not isinstance(v, tuple)}
    tied = family.head is None or (
        bound.names.get(family.head) == bound.names.get(family.embedding)
        or bound.arrays[family.head] is bound.arrays[family.embedding]
    )
    return BoundFamily(family, dict(bound.arrays), values, tied)


def weight_paths(bound: BoundFamily) -> list[str]:
    """The bound paths a checkpoint stores: all but a tied head and the longrope factors
    (which config.json holds)."""
    return [
        p
        for p in bound.arrays
        if not (bound.tied and p == bound.family.head) and p != LONGROPE_PATH
    ]


def _checkpoint_source(weights: Any) -> Any:
    """Arrays in a mapping as NumPy (torch tensors converted); files and folders as they are."""
    if isinstance(weights, Mapping) and not all(
        isinstance(v, np.ndarray) for v in weights.values()
    ):
        from linnet.torch.load import numpy_weights

        return numpy_weights(weights)
    return weights


def _write_json(path: Path, value: object) -> None:
    write_bytes(path, (json.dumps(value, indent=2) + "\n").encode("utf-8"))


def _write_weights(folder: Path, plan: WeightPlan, max_shard_bytes: int) -> list[str]:
    """One file, or shards of at most `max_shard_bytes` each (a bigger tensor alone) and an index.

    Tensors stored as they are written go in the order of their bytes in the checkpoint
    (the rest after them, largest element size first): where the checkpoint holds just
    these tensors, back to back, a file's data section is the checkpoint's and is copied
    in one piece, its header padded to put the data at the checkpoint's offset within a
    page (`page_phase`)."""
    from linnet.weights.safetensors import NUMPY_DTYPES, save_safetensors_streamed

    def position(spec: Spec) -> tuple[int, str, int, int, str]:
        place = plan.stored(spec[0])
        if place is not None:
            return (0, str(place[0]), place[1], 0, "")
        return (1, "", 0, -NUMPY_DTYPES[spec[1]].itemsize, spec[0])  # save_safetensors' order

    specs = sorted(plan.specs, key=position)
    shards: list[list[Spec]] = [[]]
    size = 0
    total = 0
    for spec in specs:
        nbytes = int(np.prod(spec[2], dtype=np.int64)) * NUMPY_DTYPES[spec[1]].itemsize
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(spec)
        size += nbytes
        total += nbytes
    metadata = {"format": "pt"}
    if len(shards) == 1:
        files = [SINGLE_NAME]
    else:
        files = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    _remove_stale(folder, set(files))
    for file, shard in zip(files, shards, strict=True):
        save_safetensors_streamed(
            folder / file, shard, plan.load, metadata, keep_order=True, page_phase=True
        )
    if len(files) > 1:
        weight_map = {
            name: file for file, shard in zip(files, shards, strict=True) for name, *_ in shard
        }
        _write_json(
            folder / INDEX_NAME, {"metadata": {"total_size": total}, "weight_map": weight_map}
        )
    return files


def _remove_stale(folder: Path, keep: set[str]) -> None:
    """Weight files of an earlier export into the same folder that this one does not rewrite:
    transformers would otherwise find two checkpoints."""
    stale = [
        p
        for p in folder.iterdir()
        if p.name not in keep
        and (
            p.name in (SINGLE_NAME, INDEX_NAME)
            or (p.name.startswith("model-") and p.suffix == ".safetensors")
        )
    ]
    for path in stale:
        path.unlink()


def tokenizer_folder(tokenizer: Path) -> Path:
    if tokenizer.is_dir():
        return tokenizer
    if tokenizer.is_file():
        return tokenizer.parent
    raise LinnetError(f"tokenizer: {tokenizer}: no such file or folder")


def _copy_tokenizer(tokenizer: Path, folder: Path) -> None:
    source = tokenizer_folder(tokenizer)
    names = [n for n in TOKENIZER_FILES if (source / n).is_file()]
    if not names:
        raise LinnetError(f"tokenizer: {source} holds none of {', '.join(TOKENIZER_FILES)}")
    for name in names:
        if (source / name).resolve() == (folder / name).resolve():
            continue
        if name == "tokenizer_config.json" and "tokenizer.json" in names:
            settings = _portable_tokenizer_config(source / name)
            if settings is not None:
                _write_json(folder / name, settings)
                continue
        with (source / name).open("rb") as src, atomic_write(folder / name) as out:
            shutil.copyfileobj(src, out)


# transformers 5 writes `tokenizer_class` `TokenizersBackend` for a plain `tokenizer.json`
# tokenizer, a class 4.x does not have (its AutoTokenizer refuses the folder); in 5,
# `PreTrainedTokenizerFast` is the same class, and 4.x has it too.
PORTABLE_TOKENIZER_CLASSES = {"TokenizersBackend": "PreTrainedTokenizerFast"}


def _portable_tokenizer_config(path: Path) -> dict[str, object] | None:
    """`tokenizer_config.json` with a 5-only `tokenizer_class` renamed to the class both
    transformers 4.x and 5 know (None: the file is copied as it is)."""
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LinnetError(f"tokenizer: {path}: {exc}") from None
    if not isinstance(settings, dict):
        return None
    portable = PORTABLE_TOKENIZER_CLASSES.get(str(settings.get("tokenizer_class")))
    if portable is None:
        return None
    return {**settings, "tokenizer_class": portable}


def special_token_ids(tokenizer: str | os.PathLike[str] | None) -> dict[str, object]:
    """`bos_token_id`, `eos_token_id`, `pad_token_id` from the tokenizer files, where they say."""
    if tokenizer is None:
        return {}
    source = tokenizer_folder(Path(tokenizer))
    ids: dict[str, int] = {}
    path = source / "tokenizer.json"
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LinnetError(f"tokenizer: {path}: {exc}") from None
        for token in data.get("added_tokens", []):
            ids[str(token.get("content"))] = int(token.get("id"))
        vocab = (data.get("model") or {}).get("vocab")
        if isinstance(vocab, dict):
            ids = {**{str(k): int(v) for k, v in vocab.items() if isinstance(v, int)}, **ids}
    settings: dict[str, object] = {}
    config_path = source / "tokenizer_config.json"
    if config_path.is_file():
        try:
            settings = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LinnetError(f"tokenizer: {config_path}: {exc}") from None
    out: dict[str, object] = {}
    for role in ("bos", "eos", "pad"):
        token = settings.get(f"{role}_token")
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str) and token in ids:
            out[f"{role}_token_id"] = ids[token]
    return out
