"""LoRA adapters on JAX: `add_lora`, `merge_lora`, `save_lora`, `load_lora`.

Stage: training on the JAX backend, beside `linnet.jax.train.loop`. In: a
model from `linnet.jax.load_source` / `load_model` and parameter-path globs.
Out: a `LoraModel`, the model with a low-rank pair per chosen 2-D weight,
which `linnet.jax.train.train` trains (the adapters only, by default).

Names and numbers are `linnet.train.lora`'s (PyTorch), so the two paths
exchange adapters and give the same numbers:

- the pair of weight `path` is `<path>_lora.lora_A` `[rank, in]` and
  `<path>_lora.lora_B` `[out, rank]` (the PyTorch module's parameter names);
  `fan_in_fan_out=True` says the weight is stored `[in, out]`;
- `lora_A` is drawn as `torch.nn.init.kaiming_uniform_(a=sqrt(5))` draws it
  after `torch.manual_seed(seed)`, the adapters in path order, bit for bit
  (`torch_kaiming_uniform`: torch's CPU generator is MT19937 seeded as
  NumPy's `RandomState` seeds it, and a float32 uniform keeps the low 24
  bits of each 32-bit draw), so `add_lora(..., seed=s)` here equals
  `torch.manual_seed(s); add_lora(...)` there; `lora_B` is zeros; adapters
  of f16/bf16 weights are f32; the scaling is `alpha / rank` (or
  `alpha / sqrt(rank)` with `use_rslora`);
- the PEFT folder format is `linnet.train.peft_format`'s, shared with
  `linnet.train.peft`.

The mechanism differs: entries run with the merged weight `W + scaling * B
@ A` (in the weight's dtype), built inside the jitted step, where PyTorch
adds the adapter's product to `x W^T` (`linnet.train.lora`); the two agree to
rounding. Dropout on the adapter's input is not offered here (it needs the
unmerged form).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from linnet.errors import LinnetError
from linnet.jax.train.model import Apply, Trainable, as_trainable
from linnet.train.peft_format import AdapterFile, check_adapter, read_adapters, write_adapters

_HALF = (jnp.float16, jnp.bfloat16)


@dataclass(frozen=True)
class Lora:
    """One adapter's shape and options (its arrays live in the parameters)."""

    path: str
    shape: tuple[int, int]
    rank: int
    alpha: float
    fan_in_fan_out: bool = False
    use_rslora: bool = False

    @property
    def scaling(self) -> float:
        return self.alpha / math.sqrt(self.rank) if self.use_rslora else self.alpha / self.rank

    @property
    def a(self) -> str:
        return f"{self.path}_lora.lora_A"

    @property
    def b(self) -> str:
        return f"{self.path}_lora.lora_B"

    @property
    def in_features(self) -> int:
        return self.shape[0] if self.fan_in_fan_out else self.shape[1]

    @property
    def out_features(self) -> int:
        return self.shape[1] if self.fan_in_fan_out else self.shape[0]

    def delta(self, a: Any, b: Any) -> Any:
        """`scaling * B @ A` in the weight's stored layout."""
        product = (b @ a) * self.scaling
        return product.T if self.fan_in_fan_out else product


class LoraModel:
    """A model with LoRA adapters: `parameters` holds the base's and the adapters' arrays,
    `entry(name)` runs an entry with the merged weights, `trainable()` is what
    `linnet.jax.train.train` reads."""

    def __init__(self, base: Trainable, adapters: Mapping[str, Lora], arrays: Mapping[str, Any]):
        self.base = base
        self.adapters = dict(adapters)
        self.parameters = {**base.parameters, **arrays}

    def merged(self, parameters: Mapping[str, Any]) -> dict[str, Any]:
        """The base parameters with every adapter folded into its weight."""
        keys = {k for lora in self.adapters.values() for k in (lora.a, lora.b)}
        out = {p: v for p, v in parameters.items() if p not in keys}
        for path, lora in self.adapters.items():
            weight = out[path]
            delta = lora.delta(parameters[lora.a], parameters[lora.b])
            out[path] = weight + delta.astype(weight.dtype)
        return out

    def entry(self, name: str) -> Apply:
        run = self.base.entry(name)

        def apply(parameters: Mapping[str, Any], *inputs: Any, **named: Any) -> Any:
            return run(self.merged({**self.parameters, **parameters}), *inputs, **named)

        return apply

    def trainable(self) -> Trainable:
        keys = {k for lora in self.adapters.values() for k in (lora.a, lora.b)}
        return replace(
            self.base,
            parameters=dict(self.parameters),
            entry=self.entry,
            kinds={**self.base.kinds, **dict.fromkeys(keys, "param")},
            adapters=frozenset(keys),
        )

    def arrays(self, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The adapters' arrays by name, from `parameters` (a training result) or the model."""
        source = {**self.parameters, **(parameters or {})}
        return {k: source[k] for lora in self.adapters.values() for k in (lora.a, lora.b)}

    def with_arrays(self, parameters: Mapping[str, Any]) -> LoraModel:
        """The same adapters holding the arrays of `parameters` (a training result)."""
        return LoraModel(self.base, self.adapters, self.arrays(parameters))


def torch_kaiming_uniform(state: np.random.RandomState, shape: tuple[int, int]) -> np.ndarray:
    """What `torch.nn.init.kaiming_uniform_(t, a=sqrt(5))` writes into a float32 CPU tensor
    of `shape` drawing from the generator whose MT19937 state is `state` (see the module
    docstring): `bound = 1 / sqrt(fan_in)`, each value `x * (2 bound) - bound` for
    `x = (draw & (2**24 - 1)) / 2**24`, computed with one rounding as torch's fused
    multiply-add does."""
    count = int(np.prod(shape))
    draws = state.randint(0, 2**32, size=count, dtype=np.uint64)
    unit = (draws & np.uint64((1 << 24) - 1)).astype(np.float32) * np.float32(2.0**-24)
    gain = math.sqrt(2.0 / (1 + 5))
    bound = gain * math.sqrt(3.0 / shape[1])
    low, high = np.float32(-bound), np.float32(bound)
    spread = np.float64(high - low)
    values = unit.astype(np.float64) * spread + np.float64(low)
    return values.astype(np.float32).reshape(shape)


def add_lora(
    model: Any,
    patterns: str | Sequence[str],
    rank: int = 16,
    alpha: float = 32,
    *,
    seed: int = 0,
    fan_in_fan_out: bool = False,
    use_rslora: bool = False,
) -> LoraModel:
    """A `LoraModel`: an adapter on every param of `model` whose path matches one of the
    `fnmatch` `patterns` (`*` crosses dots), initialised as PyTorch's `add_lora` after
    `torch.manual_seed(seed)` (module docstring). Adapters of a `LoraModel` add to its
    own. `LinnetError` when nothing matches (the paths are listed), a match is not a
    2-D float weight, already has an adapter, or is tied to another path."""
    globs = [patterns] if isinstance(patterns, str) else list(patterns)
    if rank < 1:
        raise LinnetError(f"add_lora: rank must be at least 1, got {rank}")
    base = model.base if isinstance(model, LoraModel) else as_trainable(model)
    existing = model.adapters if isinstance(model, LoraModel) else {}
    arrays = model.arrays() if isinstance(model, LoraModel) else {}
    params = sorted(p for p in base.parameters if base.kinds.get(p) == "param")
    chosen = [p for p in params if any(fnmatchcase(p, g) for g in globs)]
    if not chosen:
        raise LinnetError(
            f"add_lora: no parameter path matches {', '.join(map(repr, globs))}; "
            f"the paths are: {', '.join(params) or 'none'}"
        )
    state = np.random.RandomState(seed)
    adapters = dict(existing)
    new_arrays = dict(arrays)
    for path in chosen:
        weight = check_target(base, path, existing)
        lora = Lora(
            path, (weight.shape[0], weight.shape[1]), rank, alpha, fan_in_fan_out, use_rslora
        )
        dtype = jnp.float32 if weight.dtype in _HALF else weight.dtype
        a = torch_kaiming_uniform(state, (rank, lora.in_features))
        new_arrays[lora.a] = jnp.asarray(a, dtype=dtype)
        new_arrays[lora.b] = jnp.zeros((lora.out_features, rank), dtype)
        adapters[path] = lora
    return LoraModel(base, adapters, new_arrays)


def check_target(base: Trainable, path: str, existing: Mapping[str, Lora]) -> Any:
    """The weight at `path` if an adapter may go there (see `add_lora`)."""
    weight = base.parameters[path]
    if weight.ndim != 2:
        shape = "x".join(map(str, weight.shape)) or "scalar"
        raise LinnetError(f"add_lora: `{path}` is {shape}, LoRA adapts 2-D weights only")
    if not jnp.issubdtype(weight.dtype, jnp.floating):
        raise LinnetError(f"add_lora: `{path}` holds {weight.dtype}, not a float weight")
    if path in existing:
        raise LinnetError(f"add_lora: `{path}` already has a LoRA adapter")
    tied = sorted(p for p, owner in base.ties.items() if owner == path or p == path)
    tied += [base.ties[path]] if path in base.ties else []
    tied = [p for p in dict.fromkeys(tied) if p != path]
    if tied:
        raise LinnetError(
            f"add_lora: `{path}` is one tensor with `{'`, `'.join(tied)}` (tied weights); "
            "LoRA on a tied weight is not supported, leave it out of the patterns"
        )
    return weight


def merge_lora(model: LoraModel, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every base parameter with its adapter folded in (`W += scaling * B @ A`, PEFT's
    `merge_and_unload`), from `parameters` (a training result) or the model's arrays."""
    if not isinstance(model, LoraModel) or not model.adapters:
        raise LinnetError("merge_lora: the model has no LoRA adapter")
    return model.merged({**model.parameters, **(parameters or {})})


def save_lora(
    model: LoraModel,
    folder: str | os.PathLike[str],
    parameters: Mapping[str, Any] | None = None,
    *,
    names: Mapping[str, str] | None = None,
    base_model: str | None = None,
    task_type: str | None = None,
) -> Path:
    """Write the adapters (from `parameters`, a training result, or the model) to `folder`
    as PEFT files, as `linnet.train.save_lora` does; the folder."""
    if not isinstance(model, LoraModel) or not model.adapters:
        raise LinnetError("save_lora: the model has no LoRA adapter (add_lora first)")
    arrays = model.arrays(parameters)
    files = [
        AdapterFile(
            path=lora.path,
            rank=lora.rank,
            alpha=lora.alpha,
            dropout=0.0,
            fan_in_fan_out=lora.fan_in_fan_out,
            use_rslora=lora.use_rslora,
            lora_A=np.asarray(arrays[lora.a]),
            lora_B=np.asarray(arrays[lora.b]),
        )
        for lora in sorted(model.adapters.values(), key=lambda lora: lora.path)
    ]
    return write_adapters(folder, files, names=names, base_model=base_model, task_type=task_type)


def load_lora(
    model: Any, folder: str | os.PathLike[str], *, names: Mapping[str, str] | None = None
) -> LoraModel:
    """`model` with the adapters of a PEFT folder (replacing adapters on those paths), as
    `linnet.train.load_lora` reads it; `LinnetError` naming the file, tensor or option
    for what is malformed or not implemented (dropout included: not offered on JAX)."""
    base = model.base if isinstance(model, LoraModel) else as_trainable(model)
    adapters = dict(model.adapters) if isinstance(model, LoraModel) else {}
    arrays = model.arrays() if isinstance(model, LoraModel) else {}
    params = sorted(p for p in base.parameters if base.kinds.get(p) == "param")
    found = read_adapters(folder, params, names=names)
    for stored in found:
        if stored.dropout:
            raise LinnetError(
                f"load_lora: `{folder}` sets lora_dropout {stored.dropout}; linnet.jax.train "
                "trains LoRA without dropout (use linnet.train on PyTorch for dropout)"
            )
        weight = check_target(base, stored.path, {})
        check_adapter(stored, tuple(weight.shape), folder, names)
        old = adapters.pop(stored.path, None)
        if old is not None:
            arrays.pop(old.a)
            arrays.pop(old.b)
        lora = Lora(
            stored.path,
            (weight.shape[0], weight.shape[1]),
            stored.rank,
            stored.alpha,
            stored.fan_in_fan_out,
            stored.use_rslora,
        )
        dtype = jnp.float32 if weight.dtype in _HALF else weight.dtype
        arrays[lora.a] = jnp.asarray(np.asarray(stored.lora_A), dtype=dtype)
        arrays[lora.b] = jnp.asarray(np.asarray(stored.lora_B), dtype=dtype)
        adapters[stored.path] = lora
    return LoraModel(base, adapters, arrays)
