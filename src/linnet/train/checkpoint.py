"""Training checkpoints without pickle: SafeTensors for tensors, JSON for everything else.

Stage: `linnet.train`'s persistence. A checkpoint is one folder per saved step,
`<checkpoint>/step-00000040/`, holding

- `model.safetensors`: every parameter and persistent buffer by path (the
  `state_dict` names, the Linnet paths for a `LinnetModule`);
- `optimizer.safetensors` + `optimizer.json`: the optimizer's state tensors
  (`state.<index>.<name>`, e.g. `state.3.exp_avg`) and, as JSON, its parameter
  groups (hyperparameters, the learning rate the schedule set), its non-tensor
  state, and the parameter path of each index (checked on restore);
- `random.safetensors`: the torch random generators' states;
- `progress.json`, written last: the step, the batches consumed, the world
  size, the schedule's state and the history so far. A folder without it is
  an interrupted save and is never restored.

With several ranks, the files of a data-parallel run are written once by rank
0 (every rank holds the same parameters and optimizer state); when FSDP2
shards the parameters, every rank writes its own shards to
`model.rank<r>.safetensors` (and `optimizer.rank<r>.*`), and a restore needs
the same world size. The random states are always per rank. After a save the
two latest complete steps are kept and older folders removed. Every file is
written atomically (`linnet.atomic`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from linnet.atomic import ensure_folder, write_bytes
from linnet.errors import LinnetError
from linnet.torch.dtypes import linnet_dtype, to_numpy, to_torch
from linnet.train.distributed import is_sharded, local, world
from linnet.weights.safetensors import linnet_dtype_of, read_safetensors, save_safetensors

FORMAT = "linnet.train checkpoint 1"
PROGRESS = "progress.json"
KEEP = 2
_STEP = re.compile(r"^step-(\d{8})$")


@dataclass
class Progress:
    """What `progress.json` records (see the module docstring)."""

    step: int
    batches: int
    world: int
    sharded: bool
    schedule: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


def step_folder(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def complete_steps(root: Path) -> list[tuple[int, Path]]:
    """The saved steps whose `progress.json` exists, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP.match(child.name)
        if match and (child / PROGRESS).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest(root: str | os.PathLike[str]) -> Path | None:
    """The latest complete step folder under `root`, or None."""
    steps = complete_steps(Path(root))
    return steps[-1][1] if steps else None


# -- tensors <-> SafeTensors -------------------------------------------------------------


def _arrays(tensors: Mapping[str, torch.Tensor], where: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, tensor in tensors.items():
        dtype = linnet_dtype(tensor.dtype)
        if dtype is None:
            raise LinnetError(f"{where}: `{name}` has dtype {tensor.dtype}, which cannot be saved")
        out[name] = to_numpy(local(tensor), dtype)
    return out


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise LinnetError(f"{path}: missing from the checkpoint")
    return {
        name: to_torch(array, linnet_dtype_of(array))
        for name, array in read_safetensors(path).items()
    }


def _named(path: Path, rank: int, sharded: bool) -> Path:
    """`model.safetensors` -> `model.rank3.safetensors` when each rank has its own."""
    if not sharded:
        return path
    stem, _, suffix = path.name.partition(".")
    return path.with_name(f"{stem}.rank{rank}.{suffix}")


# -- model --------------------------------------------------------------------------------


def model_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The persistent tensors of `model` by `state_dict` name (tied ones under each name)."""
    return {name: t.detach() for name, t in model.state_dict().items()}


def restore_model(model: nn.Module, tensors: Mapping[str, torch.Tensor], where: Path) -> None:
    own = model.state_dict()
    missing = sorted(set(own) - set(tensors))
    extra = sorted(set(tensors) - set(own))
    if missing or extra:
        raise LinnetError(
            f"{where}: the checkpoint does not fit the model: "
            f"missing {missing[:5]}, unexpected {extra[:5]}"
        )
    with torch.no_grad():
        for name, target in own.items():
            value = tensors[name]
            part = local(target)
            if tuple(part.shape) != tuple(value.shape):
                raise LinnetError(
                    f"{where}: `{name}` is {list(value.shape)} in the checkpoint, "
                    f"{list(part.shape)} in the model"
                )
            part.copy_(value)


# -- optimizer ----------------------------------------------------------------------------


def _parameter_names(model: nn.Module, optimizer: Optimizer) -> list[str]:
    """The path of each parameter the optimizer holds, in its state_dict index order."""
    names = {id(p): name for name, p in model.named_parameters(remove_duplicate=False)}
    found = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            name = names.get(id(p))
            if name is None:
                raise LinnetError("the optimizer holds a parameter that is not the model's")
            found.append(name)
    return found


def _json_value(value: object, where: str) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(v, where) for v in value]
    raise LinnetError(f"{where}: a {type(value).__name__} cannot be saved as JSON")


def optimizer_files(
    model: nn.Module, optimizer: Optimizer
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The optimizer's state as SafeTensors tensors and a JSON document."""
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, object]] = {}
    for index, entries in state["state"].items():
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value.detach()
            else:
                where = f"optimizer state {index}.{key}"
                scalars.setdefault(str(index), {})[key] = _json_value(value, where)
    groups = []
    for number, group in enumerate(state["param_groups"]):
        where = f"optimizer param_groups[{number}]"
        groups.append({k: _json_value(v, f"{where}.{k}") for k, v in group.items()})
    document = {
        "format": FORMAT,
        "optimizer": type(optimizer).__name__,
        "parameters": _parameter_names(model, optimizer),
        "param_groups": groups,
        "scalars": scalars,
    }
    return tensors, document


def restore_optimizer(
    model: nn.Module,
    optimizer: Optimizer,
    tensors: Mapping[str, torch.Tensor],
    document: Mapping[str, Any],
    where: Path,
) -> None:
    if document.get("optimizer") != type(optimizer).__name__:
        raise LinnetError(
            f"{where}: saved for a {document.get('optimizer')} optimizer, "
            f"restored into a {type(optimizer).__name__}"
        )
    names = _parameter_names(model, optimizer)
    if document.get("parameters") != names:
        raise LinnetError(f"{where}: the optimizer's parameters differ from the saved ones")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, object]] = {}
    for index_text, entries in document.get("scalars", {}).items():
        state.setdefault(int(index_text), {}).update(entries)
    for name, value in tensors.items():
        _, index_text, key = name.split(".", 2)
        index = int(index_text)
        param = params[index]
        if is_sharded(param) and tuple(value.shape) == tuple(local(param).shape):
            from torch.distributed.tensor import DTensor

            value = DTensor.from_local(
                value.to(local(param).device),
                param.device_mesh,
                param.placements,
                shape=param.shape,
                stride=param.stride(),
            )
        state.setdefault(index, {})[key] = value
    current = optimizer.state_dict()["param_groups"]
    groups = []
    for saved, now in zip(document["param_groups"], current, strict=True):
        # JSON has no tuples: give back the optimizer's own type (`betas`)
        groups.append(
            {k: tuple(v) if isinstance(now.get(k), tuple) else v for k, v in saved.items()}
        )
    optimizer.load_state_dict({"state": state, "param_groups": groups})


# -- random state -------------------------------------------------------------------------


def random_tensors() -> dict[str, torch.Tensor]:
    found = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        for index, value in enumerate(torch.cuda.get_rng_state_all()):
            found[f"cuda.{index}"] = value
    return found


def restore_random(tensors: Mapping[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["cpu"])
    devices = [tensors[k] for k in sorted(tensors) if k.startswith("cuda.")]
    if devices and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(devices)


# -- save and restore ---------------------------------------------------------------------


def save(
    root: str | os.PathLike[str],
    model: nn.Module,
    optimizer: Optimizer,
    schedule: LRScheduler | None,
    progress: Progress,
) -> Path:
    """Write step `progress.step` under `root` (every rank calls this); its folder."""
    rank, size = world()
    folder = step_folder(ensure_folder(root, what="checkpoint folder"), progress.step)
    if rank == 0:
        ensure_folder(folder, what="checkpoint folder")
    _barrier(size)
    sharded = progress.sharded
    if sharded or rank == 0:
        where = f"checkpoint {folder}"
        save_safetensors(
            _arrays(model_tensors(model), where),
            _named(folder / "model.safetensors", rank, sharded),
        )
        tensors, document = optimizer_files(model, optimizer)
        save_safetensors(
            _arrays(tensors, where), _named(folder / "optimizer.safetensors", rank, sharded)
        )
        write_bytes(
            _named(folder / "optimizer.json", rank, sharded),
            json.dumps(document, indent=1).encode(),
        )
    random_name = "random.safetensors" if size == 1 else f"random.rank{rank}.safetensors"
    save_safetensors(_arrays(random_tensors(), str(folder)), folder / random_name)
    _barrier(size)
    if rank == 0:
        record = {
            "format": FORMAT,
            "step": progress.step,
            "batches": progress.batches,
            "world": progress.world,
            "sharded": progress.sharded,
            "schedule": None if schedule is None else _schedule_state(schedule),
            "history": progress.history,
        }
        write_bytes(folder / PROGRESS, json.dumps(record, indent=1).encode())
        prune(Path(root), progress.step)
    _barrier(size)
    return folder


def restore(
    folder: Path,
    model: nn.Module,
    optimizer: Optimizer,
    schedule: LRScheduler | None,
) -> Progress:
    """Load the step saved in `folder` into `model`, `optimizer`, `schedule` and the
    random generators; its `Progress`."""
    rank, size = world()
    record = read_json(folder / PROGRESS)
    if record.get("format") != FORMAT:
        raise LinnetError(f"{folder / PROGRESS}: not a linnet.train checkpoint")
    if record["world"] != size:
        raise LinnetError(
            f"{folder}: saved by {record['world']} processes, restored by {size}; "
            "resume on the same world size"
        )
    sharded = bool(record["sharded"])
    restore_model(model, _tensors(_named(folder / "model.safetensors", rank, sharded)), folder)
    document = read_json(_named(folder / "optimizer.json", rank, sharded))
    tensors = _tensors(_named(folder / "optimizer.safetensors", rank, sharded))
    restore_optimizer(model, optimizer, tensors, document, folder)
    saved_schedule = record.get("schedule")
    if (schedule is None) != (saved_schedule is None):
        state = "without" if saved_schedule is None else "with"
        raise LinnetError(f"{folder}: saved {state} a schedule; pass the same kind of schedule")
    if schedule is not None and saved_schedule is not None:
        schedule.load_state_dict(saved_schedule)
    random_name = "random.safetensors" if size == 1 else f"random.rank{rank}.safetensors"
    restore_random(_tensors(folder / random_name))
    return Progress(
        step=int(record["step"]),
        batches=int(record["batches"]),
        world=size,
        sharded=sharded,
        schedule=saved_schedule,
        history=list(record.get("history", [])),
    )


def _schedule_state(schedule: LRScheduler) -> dict[str, Any]:
    state = schedule.state_dict()
    return {k: _json_value(v, f"schedule `{k}`") for k, v in state.items()}


def read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise LinnetError(f"{path}: missing from the checkpoint") from None
    except (OSError, ValueError) as error:
        raise LinnetError(f"{path}: cannot read it: {error}") from None
    if not isinstance(value, dict):
        raise LinnetError(f"{path}: expected a JSON object")
    return value


def prune(root: Path, newest: int) -> None:
    """Keep the `KEEP` latest complete steps; remove older and interrupted folders."""
    complete = complete_steps(root)
    kept = {step for step, _ in complete[-KEEP:]}
    for child in root.iterdir():
        match = _STEP.match(child.name)
        if match is None or not child.is_dir():
            continue
        step = int(match.group(1))
        if step not in kept and step < newest:
            shutil.rmtree(child, ignore_errors=True)


def _barrier(size: int) -> None:
    if size > 1:
        dist.barrier()
