"""JAX training checkpoints and weights, without pickle: SafeTensors for arrays, JSON for the rest.

Stage: `linnet.jax.train`'s persistence, in the folder layout of
`linnet.train.checkpoint` (one `<checkpoint>/step-00000040/` folder per saved
step, the two latest kept, a folder without `progress.json` never restored):

- `model.safetensors`: the trained arrays by parameter path, in their master
  dtype (the frozen ones come from the model, as they were loaded);
- `optimizer.safetensors`: every array leaf of the optax state, named by its
  path in the state tree (`jax.tree_util.keystr`, e.g.
  `[0].mu['model.norm.weight']`); restoring fills the tree `optimizer.init`
  builds, so the optimizer must be the same;
- `progress.json`, written last: the step, the batches consumed, the trained
  paths, whether the run was sharded, the history so far.

Arrays are gathered to the host to be written and placed back with the
template's sharding when read, so a run on a mesh resumes on a mesh. Every
file is written atomically. `save_weights(params, path, dtype=None)` writes
parameters as one SafeTensors file, floats cast to `dtype` when given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from linnet.atomic import ensure_folder, write_bytes
from linnet.errors import LinnetError
from linnet.ir.core import FLOAT_DTYPES, numpy_dtype
from linnet.train.checkpoint import PROGRESS, Progress, latest, prune, read_json, step_folder
from linnet.weights.safetensors import linnet_dtype_of, read_safetensors, save_safetensors

FORMAT = "linnet.jax.train checkpoint 1"
MODEL = "model.safetensors"
OPTIMIZER = "optimizer.safetensors"


def host(array: Any) -> np.ndarray:
    """A (possibly sharded) JAX array as one NumPy array."""
    return np.asarray(jax.device_get(array))


def optimizer_arrays(state: Any) -> dict[str, np.ndarray]:
    """The array leaves of an optax state by their tree path."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(state)
    return {jax.tree_util.keystr(path): host(leaf) for path, leaf in leaves}


def save_checkpoint(
    root: str | os.PathLike[str],
    step: int,
    params: Mapping[str, Any],
    opt_state: Any,
    *,
    batches: int = 0,
    history: Sequence[Mapping[str, Any]] = (),
    sharded: bool = False,
) -> Path:
    """Write step `step` under `root`: `params` (path -> array), the optax `opt_state`,
    then `progress.json`; older steps beyond the two latest are removed. Its folder."""
    if step < 0:
        raise LinnetError(f"save_checkpoint: step must be >= 0, got {step}")
    folder = ensure_folder(
        step_folder(ensure_folder(root, what="checkpoint folder"), step), what="checkpoint folder"
    )
    save_safetensors({p: host(a) for p, a in params.items()}, folder / MODEL)
    save_safetensors(optimizer_arrays(opt_state), folder / OPTIMIZER)
    record = {
        "format": FORMAT,
        "step": step,
        "batches": batches,
        "world": 1,
        "sharded": sharded,
        "trained": sorted(params),
        "history": [dict(h) for h in history],
    }
    write_bytes(folder / PROGRESS, json.dumps(record, indent=1).encode())
    prune(Path(root), step)
    return folder


def load_checkpoint(
    folder: str | os.PathLike[str], params: Mapping[str, Any], opt_state: Any
) -> tuple[dict[str, Any], Any, Progress]:
    """The parameters, optimizer state and `Progress` saved in `folder` (a step folder, or
    a checkpoint root: its latest complete step). `params` and `opt_state` are templates
    (what the run starts from): every saved array must have their names, shapes and
    dtypes, and is placed with their sharding. `LinnetError` naming the file and array
    otherwise, or when `folder` holds no complete step."""
    where = Path(folder)
    if not (where / PROGRESS).is_file():
        found = latest(where)
        if found is None:
            raise LinnetError(f"load_checkpoint: `{where}` holds no complete checkpoint step")
        where = found
    record = read_json(where / PROGRESS)
    if record.get("format") != FORMAT:
        raise LinnetError(f"{where / PROGRESS}: not a linnet.jax.train checkpoint")
    if sorted(record.get("trained", [])) != sorted(params):
        raise LinnetError(
            f"{where}: saved training {len(record.get('trained', []))} parameters, this run "
            f"trains {len(params)}; resume with the same model, trainable= and LoRA adapters"
        )
    restored = _filled(dict(params), _read(where / MODEL), where / MODEL)
    leaves, tree = jax.tree_util.tree_flatten_with_path(opt_state)
    templates = {jax.tree_util.keystr(path): leaf for path, leaf in leaves}
    filled = _filled(templates, _read(where / OPTIMIZER), where / OPTIMIZER)
    state = jax.tree_util.tree_unflatten(tree, [filled[name] for name in templates])
    progress = Progress(
        step=int(record["step"]),
        batches=int(record["batches"]),
        world=1,
        sharded=bool(record["sharded"]),
        history=list(record.get("history", [])),
    )
    return restored, state, progress


def _read(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise LinnetError(f"{path}: missing from the checkpoint")
    return read_safetensors(path)


def _filled(
    templates: Mapping[str, Any], stored: Mapping[str, np.ndarray], file: Path
) -> dict[str, Any]:
    """Each template's saved array, checked and placed like the template."""
    missing = sorted(set(templates) - set(stored))
    extra = sorted(set(stored) - set(templates))
    if missing or extra:
        what = f"lacks `{missing[0]}`" if missing else f"has `{extra[0]}`, which this run lacks"
        raise LinnetError(
            f"{file}: the checkpoint {what}; resume with the same model and optimizer"
        )
    out = {}
    for name, template in templates.items():
        array = stored[name]
        if tuple(array.shape) != tuple(template.shape) or array.dtype != template.dtype:
            raise LinnetError(
                f"{file}: `{name}` is {array.dtype}{list(array.shape)}, the run has "
                f"{template.dtype}{list(template.shape)}"
            )
        out[name] = jax.device_put(np.array(array), getattr(template, "sharding", None))
    return out


def save_weights(
    params: Mapping[str, Any], path: str | os.PathLike[str], dtype: str | None = None
) -> Path:
    """Write `params` (path -> array) to one SafeTensors file at `path`, atomically; floating
    arrays cast to the Linnet dtype `dtype` (`"bf16"`, `"f16"`, `"f32"`) when given."""
    if dtype is not None and dtype not in FLOAT_DTYPES:
        listed = ", ".join(sorted(FLOAT_DTYPES))
        raise LinnetError(f"save_weights: dtype must be a float dtype ({listed}), got {dtype!r}")
    arrays = {}
    for name, value in params.items():
        array = host(value)
        if dtype is not None and linnet_dtype_of(array) in FLOAT_DTYPES:
            array = array.astype(numpy_dtype(dtype))
        arrays[name] = array
    target = Path(path)
    save_safetensors(arrays, target)
    return target
