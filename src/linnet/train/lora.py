"""LoRA adapters on a `LinnetModule`: `add_lora`, `merge_lora`, `lora_adapters`.

Stage: training, on the PyTorch backend. In: a module loaded with
`linnet.torch.load(..., trainable=True)` and parameter-path globs. Out: the
same module, its base parameters frozen, with a trainable low-rank pair
`lora_A` `[rank, in]`, `lora_B` `[out, rank]` per chosen 2-D weight, held in a
`LoraAdapter` child registered next to the weight (`<parent>.<leaf>_lora`, so
`state_dict()`, optimizers, `.to()` and checkpoints see it like any parameter).
Initialised as PEFT does: `lora_A` Kaiming-uniform with `a = sqrt(5)` (torch's
global generator, so `torch.manual_seed` reproduces it), `lora_B` zeros, the
update scaled by `alpha / rank`.

The mechanism, and why. The generated code of an entry reads each weight once
(`W['path']`) and then calls `F.linear(x, w)` (a `linear` native, Llama's
layout `[out, in]`) or `torch.matmul(x, w)` (a contraction over the first
axis, GPT-2's `Conv1D` layout `[in, out]`). The adapter hooks that read
(`LinnetModule.set_weight_view`): entries receive a `LoraWeight`, a tensor
subclass sharing the frozen weight's storage whose `__torch_function__`
computes what PEFT's `lora.Linear` computes,

    F.linear(x, W) + lora_B(lora_A(dropout(x))) * scaling,

for those two calls (a reshape to its own shape, `.T`, `.t()` or
`permute(1, 0)` first keep the adapter, the interpreter reshapes before its
matmul), and for any other use of the weight (a gather, arithmetic)
substitutes the merged weight `W + scaling * B @ A` (in the stored layout).
Metadata reads (`.shape`, `.dtype`) see the weight itself. Chosen over a `parametrize`-style merged weight for every
call because that route materialises `W + s B A` and, in the backward, the
full `[out, in]` gradient of it on each step, the very cost LoRA avoids, and
cannot apply dropout to the adapter's input alone; the hook keeps the
generated code unchanged (no re-lowering, no second code path) and matches
PEFT's arithmetic order, so logits agree with PEFT to rounding. A weight read
other than by `linear`/`matmul` while training with dropout is an error (the
merged form cannot drop the adapter's input).

`fan_in_fan_out=True` says the weight is stored `[in, out]` (transformers'
`Conv1D`, PEFT's flag of the same name): `lora_A` then spans the rows.
Adapters of floating weights in f16/bf16 are kept in f32 and the input cast to
them, PEFT's `autocast_adapter_dtype`. `merge_lora` adds `scaling * B @ A`
into each weight (PEFT's `merge_and_unload`) and removes the adapters; base
parameters stay frozen. The PEFT file format lives in `linnet.train.peft`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import _pytree as pytree

from linnet.errors import LinnetError
from linnet.torch.module import LinnetModule

# The calls a `LoraWeight` computes as PEFT does; any other use merges the weight.
_LINEAR = F.linear
_MATMULS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm)
_HALF = (torch.float16, torch.bfloat16)


class LoraAdapter(nn.Module):
    """The trainable pair of one weight: `lora_A [rank, in]`, `lora_B [out, rank]`.

    `path` names the weight; `shape` is its stored shape, `[out, in]`, or `[in, out]`
    when `fan_in_fan_out`. `delta()` is `scaling * B @ A` in the stored layout.
    """

    def __init__(
        self,
        path: str,
        shape: tuple[int, int],
        *,
        rank: int,
        alpha: float,
        dropout: float,
        fan_in_fan_out: bool,
        use_rslora: bool,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.path = path
        self.shape = shape
        self.rank = rank
        self.alpha = alpha
        self.fan_in_fan_out = fan_in_fan_out
        self.use_rslora = use_rslora
        self.scaling = alpha / math.sqrt(rank) if use_rslora else alpha / rank
        out_features, in_features = (shape[1], shape[0]) if fan_in_fan_out else shape
        self.lora_A = nn.Parameter(torch.empty(rank, in_features, dtype=dtype, device=device))
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank, dtype=dtype, device=device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.dropout: nn.Module = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    @property
    def dropout_p(self) -> float:
        return float(self.dropout.p) if isinstance(self.dropout, nn.Dropout) else 0.0

    def delta(self) -> torch.Tensor:
        """`scaling * B @ A` in the weight's stored layout and the adapter's dtype."""
        product = (self.lora_B @ self.lora_A) * self.scaling
        return product.T if self.fan_in_fan_out else product

    def merged(self, weight: torch.Tensor) -> torch.Tensor:
        """The weight with the update added, in the weight's dtype."""
        if self.training and self.dropout_p > 0:
            raise LinnetError(
                f"LoRA on `{self.path}`: the weight is used by an operation other than a "
                "linear or matmul, where dropout on the adapter's input cannot apply; "
                "use dropout=0.0 for this weight"
            )
        return weight + self.delta().to(weight.dtype)

    def contribution(self, x: torch.Tensor, contracts_in: bool) -> torch.Tensor:
        """The adapter's term of the product of `x` with the weight, as PEFT orders it.

        `contracts_in`: `x`'s last axis meets the adapter's `in` side (always so for
        PEFT's own layers); otherwise the update is applied transposed.
        """
        x = self.dropout(x.to(self.lora_A.dtype))
        if contracts_in:
            return F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling
        return F.linear(F.linear(x, self.lora_B.T), self.lora_A.T) * self.scaling

    def view(self, weight: torch.Tensor) -> torch.Tensor:
        """What entries receive instead of `weight` (`LinnetModule.set_weight_view`)."""
        return LoraWeight.wrap(weight, self)

    def extra_repr(self) -> str:
        layout = ", fan_in_fan_out" if self.fan_in_fan_out else ""
        return f"{self.path}: rank={self.rank}, alpha={self.alpha}{layout}"


class LoraWeight(torch.Tensor):
    """A frozen weight as entries see it with an adapter attached (see the module docstring).

    Shares the weight's storage. `base` is the weight as this tensor shows it, the
    stored weight or, when `transposed`, its transpose (a `.T`, `.t()` or
    `permute(1, 0)` of the weight keeps the adapter); `adapter` is its `LoraAdapter`.
    """

    base: torch.Tensor
    adapter: LoraAdapter
    transposed: bool

    @staticmethod
    def wrap(weight: torch.Tensor, adapter: LoraAdapter, transposed: bool = False) -> LoraWeight:
        wrapped = weight.as_subclass(LoraWeight)
        wrapped.base = weight
        wrapped.adapter = adapter
        wrapped.transposed = transposed
        return wrapped

    def flipped(self) -> LoraWeight:
        return LoraWeight.wrap(self.base.T, self.adapter, not self.transposed)

    def merged(self) -> torch.Tensor:
        """The weight plus the update, as a plain tensor in this tensor's layout."""
        if self.transposed:
            return self.adapter.merged(self.base.T).T
        return self.adapter.merged(self.base)

    def times(self, x: torch.Tensor, axis: int, result: torch.Tensor) -> torch.Tensor:
        """`result` (the product of `x` with `base`, `x` meeting `base`'s axis `axis`)
        plus the adapter's term: `axis` 1 for `F.linear`, 0 for `matmul`."""
        stored_axis = 1 - axis if self.transposed else axis
        in_axis = 0 if self.adapter.fan_in_fan_out else 1
        term = self.adapter.contribution(x, contracts_in=stored_axis == in_axis)
        return (result + term).to(result.dtype)

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Iterable[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        found = _special(func, args, kwargs)
        if found is not None:
            return found
        if getattr(func, "__name__", "") == "__get__":  # .shape, .dtype, .device, ...
            value = func(*_unwrapped(args, lambda w: w.base), **kwargs)
            if not isinstance(value, torch.Tensor):
                return value
        return func(*_unwrapped(args, LoraWeight.merged), **_unwrapped(kwargs, LoraWeight.merged))


def _special(func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The calls a `LoraWeight` serves without merging: `F.linear` and `matmul` with it as
    the weight, a reshape to its own shape, its transpose. None for any other call."""
    if func is _LINEAR:
        found = _linear_operands(args, kwargs)
        if found is not None:
            x, weight, bias = found
            return weight.times(x, 1, F.linear(x, weight.base, bias))
        return None
    if kwargs or not args:
        return None
    first, rest = args[0], args[1:]
    if func in _MATMULS:
        right = rest[0] if len(rest) == 1 else None
        plain = isinstance(first, torch.Tensor) and not isinstance(first, LoraWeight)
        if isinstance(right, LoraWeight) and plain and first.dim() >= 1:
            return right.times(first, 0, torch.matmul(first, right.base))
        return None
    if not isinstance(first, LoraWeight) or any(isinstance(a, LoraWeight) for a in rest):
        return None
    if func in _RESHAPES and _dims(rest) == tuple(first.base.shape):
        return first
    if func in _PERMUTES and _dims(rest) in ((0, 1), (1, 0)):
        return first if _dims(rest) == (0, 1) else first.flipped()
    if func in _TRANSPOSES and not rest:
        return first.flipped()
    if getattr(func, "__self__", None) in _TRANSPOSE_PROPERTIES:
        return first.flipped()
    return None


_RESHAPES = (torch.Tensor.reshape, torch.reshape, torch.Tensor.view)
_PERMUTES = (torch.Tensor.permute, torch.permute)
_TRANSPOSES = (torch.Tensor.t, torch.t)
_TRANSPOSE_PROPERTIES = (torch.Tensor.T, torch.Tensor.mT)


def _dims(values: Sequence[Any]) -> tuple[int, ...] | None:
    """The dims of `reshape(2, 3)` or `reshape((2, 3))`; None when they are not ints."""
    if len(values) == 1 and isinstance(values[0], tuple | list | torch.Size):
        values = values[0]
    if all(isinstance(v, int) for v in values):
        return tuple(values)
    return None


def _unwrapped(tree: Any, replace: Callable[[LoraWeight], torch.Tensor]) -> Any:
    return pytree.tree_map_only(LoraWeight, replace, tree)


def _linear_operands(
    args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[torch.Tensor, LoraWeight, torch.Tensor | None] | None:
    """`(input, weight, bias)` of an `F.linear` call whose weight alone is a `LoraWeight`."""
    names = ("input", "weight", "bias")
    values = dict(zip(names, args, strict=False)) | dict(kwargs)
    x, weight, bias = (values.get(name) for name in names)
    if not isinstance(weight, LoraWeight) or isinstance(x, LoraWeight):
        return None
    if isinstance(bias, LoraWeight) or not isinstance(x, torch.Tensor):
        return None
    if weight.base.dim() != 2:
        return None
    return x, weight, bias


# -- attaching, listing, merging ----------------------------------------------------------


def add_lora(
    model: LinnetModule,
    patterns: str | Sequence[str],
    rank: int = 16,
    alpha: float = 32,
    dropout: float = 0.0,
    *,
    fan_in_fan_out: bool = False,
    use_rslora: bool = False,
) -> list[LoraAdapter]:
    """Attach a LoRA adapter to every param whose path matches one of `patterns`.

    Patterns are `fnmatch` globs over the Linnet parameter paths (`*` crosses dots:
    `"*.q_proj.weight"`). `fan_in_fan_out`: the weights are stored `[in, out]` (GPT-2's
    `Conv1D`); `use_rslora`: scale by `alpha / sqrt(rank)` (PEFT's rsLoRA). Every param of the model is frozen (`requires_grad=False`);
    the new `lora_A`/`lora_B` are the trainable ones. Returns the new adapters in path
    order; earlier adapters stay trainable. `LinnetError` when the module is not trainable, nothing matches (the
    paths are listed), a matched param is not a 2-D float weight, already has an
    adapter, or shares its tensor with another path (tied weights).
    """
    globs = [patterns] if isinstance(patterns, str) else list(patterns)
    if rank < 1:
        raise LinnetError(f"add_lora: rank must be at least 1, got {rank}")
    if not 0.0 <= dropout < 1.0:
        raise LinnetError(f"add_lora: dropout must be in [0, 1), got {dropout}")
    params = param_paths(model)
    chosen = [p for p in params if any(fnmatchcase(p, g) for g in globs)]
    if not chosen:
        listed = ", ".join(params) or "none"
        raise LinnetError(
            f"add_lora: no parameter path matches {', '.join(map(repr, globs))}; "
            f"the paths are: {listed}"
        )
    check_lora_targets(model, chosen)
    adapted = {id(p) for a in lora_adapters(model) for p in a.parameters()}
    for param in model.parameters():
        if id(param) not in adapted:
            param.requires_grad_(False)
    added = []
    for path in chosen:
        weight = model.tensor(path)
        dtype = torch.float32 if weight.dtype in _HALF else weight.dtype
        adapter = LoraAdapter(
            path,
            (weight.shape[0], weight.shape[1]),
            rank=rank,
            alpha=alpha,
            dropout=dropout,
            fan_in_fan_out=fan_in_fan_out,
            use_rslora=use_rslora,
            dtype=dtype,
            device=weight.device,
        )
        _attach(model, adapter)
        added.append(adapter)
    return added


def param_paths(model: LinnetModule) -> list[str]:
    """The Linnet parameter paths of the module, sorted (tied paths each listed)."""
    return sorted(model.linnet_model.live_tensors(model.present_paths, "param"))


def lora_adapters(model: LinnetModule) -> list[LoraAdapter]:
    """The adapters attached to `model`, in path order."""
    found = [m for m in model.modules() if isinstance(m, LoraAdapter)]
    return sorted(found, key=lambda a: a.path)


def merge_lora(model: LinnetModule) -> list[str]:
    """Fold every adapter into its weight (`W += scaling * B @ A`) and remove it.

    Returns the merged paths. The weights keep their dtype and stay frozen;
    `LinnetError` when the model has no adapter.
    """
    adapters = lora_adapters(model)
    if not adapters:
        raise LinnetError("merge_lora: the model has no LoRA adapter")
    with torch.no_grad():
        for adapter in adapters:
            weight = model.tensor(adapter.path)
            weight.add_(adapter.delta().to(weight.dtype))
            _detach(model, adapter)
    return [a.path for a in adapters]


def remove_lora(model: LinnetModule, paths: Sequence[str] | None = None) -> list[str]:
    """Drop the adapters of `paths` (all when None) without merging them: the base
    weights as they were. Returns the paths dropped."""
    adapters = [a for a in lora_adapters(model) if paths is None or a.path in paths]
    for adapter in adapters:
        _detach(model, adapter)
    return [a.path for a in adapters]


def adapter_name(path: str) -> str:
    """The child name an adapter of `path` takes next to the weight: `<leaf>_lora`."""
    return path.rsplit(".", 1)[-1] + "_lora"


def _parent(model: LinnetModule, path: str) -> nn.Module:
    node: nn.Module = model
    for segment in path.split(".")[:-1]:
        node = node.get_submodule(segment)
    return node


def _attach(model: LinnetModule, adapter: LoraAdapter) -> None:
    parent = _parent(model, adapter.path)
    name = adapter_name(adapter.path)
    if hasattr(parent, name):
        raise LinnetError(
            f"add_lora: the adapter of `{adapter.path}` would be `{name}`, which the "
            "model already uses"
        )
    parent.add_module(name, adapter)
    model.set_weight_view(adapter.path, adapter.view)


def _detach(model: LinnetModule, adapter: LoraAdapter) -> None:
    model.set_weight_view(adapter.path, None)
    delattr(_parent(model, adapter.path), adapter_name(adapter.path))


def check_lora_targets(
    model: LinnetModule, paths: Sequence[str], *, replacing: bool = False
) -> None:
    """What `add_lora` checks of each chosen path (see there); with `replacing`, an
    adapter already on a path is no error (`load_lora` replaces it)."""
    existing = set() if replacing else {a.path for a in lora_adapters(model)}
    owners = _tensor_owners(model, param_paths(model))
    for path in paths:
        _check_target(model, path, existing, owners)


def _tensor_owners(model: LinnetModule, paths: Sequence[str]) -> dict[int, list[str]]:
    owners: dict[int, list[str]] = {}
    for path in paths:
        owners.setdefault(id(model.tensor(path)), []).append(path)
    return owners


def _check_target(
    model: LinnetModule, path: str, existing: set[str], owners: Mapping[int, list[str]]
) -> None:
    weight = model.tensor(path)
    if not isinstance(weight, nn.Parameter):
        raise LinnetError(
            f"add_lora: `{path}` is not a trainable parameter; load the model with "
            "linnet.torch.load(..., trainable=True)"
        )
    if weight.dim() != 2:
        shape = "x".join(map(str, weight.shape)) or "scalar"
        raise LinnetError(f"add_lora: `{path}` is {shape}, LoRA adapts 2-D weights only")
    if not weight.is_floating_point():
        raise LinnetError(f"add_lora: `{path}` holds {weight.dtype}, not a float weight")
    if path in existing:
        raise LinnetError(f"add_lora: `{path}` already has a LoRA adapter")
    tied = [p for p in owners[id(weight)] if p != path]
    if tied:
        raise LinnetError(
            f"add_lora: `{path}` is one tensor with `{'`, `'.join(tied)}` (tied weights); "
            "LoRA on a tied weight is not supported, leave it out of the patterns"
        )
