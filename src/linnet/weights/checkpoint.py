"""A checkpoint: every stored tensor of one source, by name, read lazily.

Stage: weights, between the file format (`safetensors`) and binding
(`weights.bind_weights`). In: a source, which is one of
- a `.safetensors` file;
- a sharded checkpoint's index (`model.safetensors.index.json`, whose
  `weight_map` maps each tensor name to its shard file), or the folder holding it;
- a folder without an index: every `*.safetensors` file in it;
- a mapping of names to NumPy arrays already in memory;
- a list or tuple of the above, read as one checkpoint (a model card holds the
  folder's weights and, for longrope, a file of rope factors beside the card).
Out: a `Checkpoint` whose `tensors` (name -> `StoredTensor`: dtype, shape,
file) come from headers only; `load(name)` maps the bytes of one tensor.

A tensor name stored in two shards is an error naming both files, whatever
the index says: which copy is meant would otherwise depend on reading order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from linnet.errors import LinnetError
from linnet.weights.safetensors import (
    LINNET_TO_ST,
    SafeTensorsFile,
    StoredTensor,
    linnet_dtype_of,
)

INDEX_NAME = "model.safetensors.index.json"
IN_MEMORY = Path("<arrays>")


class Checkpoint:
    """Stored tensors by name (headers only) and a way to read each one.

    `label` names the source in messages; `folder` is the folder of a file or
    shard set (where a `bindings.json` may sit), None for arrays in memory.
    """

    def __init__(
        self,
        label: str,
        tensors: dict[str, StoredTensor],
        loader: Callable[[StoredTensor], np.ndarray],
        folder: Path | None,
    ) -> None:
        self.label = label
        self.tensors = tensors
        self.folder = folder
        self._loader = loader

    def load(self, name: str) -> np.ndarray:
        """The stored tensor `name` (memory-mapped for files; not copied)."""
        stored = self.tensors.get(name)
        if stored is None:
            raise LinnetError(f"{self.label}: no tensor named `{name}`")
        return self._loader(stored)


CheckpointSource = (
    Checkpoint
    | Mapping[str, np.ndarray]
    | str
    | os.PathLike[str]
    | Sequence[Checkpoint | Mapping[str, np.ndarray] | str | os.PathLike[str]]
)


def open_checkpoint(source: CheckpointSource) -> Checkpoint:
    """Open any supported source (see the module docstring); reads headers only."""
    if isinstance(source, Checkpoint):
        return source
    if isinstance(source, Mapping):
        return _from_arrays(source)
    if not isinstance(source, str | os.PathLike):
        return _merged([open_checkpoint(part) for part in source])
    path = Path(source)
    if path.is_dir():
        index = path / INDEX_NAME
        if index.is_file():
            return _from_index(index)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise LinnetError(f"{path}: no {INDEX_NAME} and no *.safetensors files in the folder")
        return _from_files(str(path), path, files)
    if not path.exists():
        raise LinnetError(f"{path}: no such file or folder")
    if path.name.endswith(".json"):
        return _from_index(path)
    return _from_files(str(path), path.parent, [path])


def _merged(parts: list[Checkpoint]) -> Checkpoint:
    """Several checkpoints as one; a name stored in two of them is an error naming both."""
    if not parts:
        raise LinnetError("weights: an empty list of checkpoints")
    owner: dict[str, Checkpoint] = {}
    duplicates: list[str] = []
    for part in parts:
        for name in part.tensors:
            first = owner.get(name)
            if first is not None:
                duplicates.append(f"`{name}` is stored in both {first.label} and {part.label}")
            else:
                owner[name] = part
    label = " + ".join(part.label for part in parts)
    if duplicates:
        raise LinnetError(
            f"{label}: tensor names stored more than once:\n"
            + "\n".join(f"  - {d}" for d in duplicates)
        )
    tensors = {name: part.tensors[name] for name, part in owner.items()}
    return Checkpoint(
        label, tensors, lambda stored: owner[stored.name].load(stored.name), parts[0].folder
    )


def _from_arrays(arrays: Mapping[str, np.ndarray]) -> Checkpoint:
    tensors: dict[str, StoredTensor] = {}
    values: dict[str, np.ndarray] = {}
    for name, value in arrays.items():
        array = np.asarray(value)
        try:
            stored = LINNET_TO_ST[linnet_dtype_of(array)]
        except LinnetError:
            stored = str(array.dtype)  # reported if a path binds it
        tensors[name] = StoredTensor(name, stored, tuple(array.shape), IN_MEMORY, 0, 0)
        values[name] = array

    def load(stored: StoredTensor) -> np.ndarray:
        if stored.linnet_dtype is None:
            raise LinnetError(
                f"array `{stored.name}` has NumPy dtype {stored.dtype}, which Linnet does not support"
            )
        return values[stored.name]

    return Checkpoint("arrays in memory", tensors, load, None)


def _from_files(label: str, folder: Path, paths: list[Path]) -> Checkpoint:
    files = [SafeTensorsFile(p) for p in paths]
    tensors: dict[str, StoredTensor] = {}
    duplicates: list[str] = []
    for file in files:
        for name, stored in file.tensors.items():
            first = tensors.get(name)
            if first is not None:
                duplicates.append(f"`{name}` is stored in both {first.file} and {file.path}")
            else:
                tensors[name] = stored
    if duplicates:
        raise LinnetError(
            f"{label}: tensor names stored more than once:\n"
            + "\n".join(f"  - {d}" for d in duplicates)
        )
    by_path = {file.path: file for file in files}
    return Checkpoint(label, tensors, lambda stored: by_path[stored.file].load(stored.name), folder)


def _from_index(index: Path) -> Checkpoint:
    weight_map = _read_index(index)
    folder = index.parent
    shard_names = sorted(set(weight_map.values()))
    missing = [s for s in shard_names if not (folder / s).is_file()]
    if missing:
        raise LinnetError(f"{index}: shard file(s) not found in {folder}: " + ", ".join(missing))
    checkpoint = _from_files(str(index), folder, [folder / s for s in shard_names])
    problems = [
        f"`{name}` is listed in {shard} but that file does not contain it"
        + (
            f" (it is in {checkpoint.tensors[name].file.name})"
            if name in checkpoint.tensors
            else ""
        )
        for name, shard in weight_map.items()
        if name not in checkpoint.tensors or checkpoint.tensors[name].file != folder / shard
    ]
    if problems:
        raise LinnetError(
            f"{index}: the index does not match its shards:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    return checkpoint


def _read_index(index: Path) -> dict[str, str]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise LinnetError(f"{index}: cannot read the index: {error}") from None
    except json.JSONDecodeError as error:
        raise LinnetError(f"{index}: invalid JSON: {error}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise LinnetError(f"{index}: `weight_map` must be an object of tensor name -> shard file")
    for shard in set(weight_map.values()):
        relative = Path(shard)
        if relative.is_absolute() or ".." in relative.parts or not shard:
            raise LinnetError(
                f"{index}: shard `{shard}` must be a file name relative to the index's folder"
            )
    return weight_map
