"""Launching kernels through Triton from `linnet.torch` (language-extensions 4.5, 4.6).

Stage: backend. A `call` op whose op names a kernel carries a
`KernelInstance` (`linnet.ir.kernel_instance`); `natives.find_native` asks
`kernel_native` first. The kernel replaces the op's body only when every
launch condition of 4.5 holds:

- Triton is importable and usable for the device: CUDA, or the CPU with
  Triton's interpreter (`TRITON_INTERPRET=1`, which must be set before
  `triton` is first imported);
- the numerics policy is not `exact`: natives are enabled (`natives=False`,
  the backend's exact mode, always runs bodies);
- the kernel's `where` clause holds for the bound generics;
- the generator has a tile form for the whole instantiated body and every
  tile extent is a power of two (`triton_codegen`, `Unsupported`);

Otherwise the op's body runs. `explain(op, context)` says which condition
failed. Under autograd (grad mode on, an operand requiring a gradient) the
launch is a `torch.autograd.Function` whose backward pass is the derivative of
the op's body (4.5 "Gradients"): the body is re-run from the saved inputs under
`torch.enable_grad()` and differentiated with `torch.autograd.grad`. Generated modules are written to files (Triton's JIT reads the
source of its functions) in one temporary folder per process and imported
from there; each instantiation is generated and imported once, and the folder
is removed when the process exits.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from linnet.atomic import write_bytes
from linnet.ir.core import Op
from linnet.ir.kernel_instance import KernelInstance
from linnet.ir.regions import clause_region
from linnet.ir.tile_source import Unsupported, write_words
from linnet.torch.dtypes import storage
from linnet.torch.ops import Context

_MODULES: dict[str, ModuleType] = {}
# Launches per instantiation key in this process (what `explain` and the tests read).
LAUNCHES: Counter[str] = Counter()
_LAUNCHERS: dict[str, Callable[..., Any]] = {}
_FOLDER: list[Path] = []


def triton_available() -> bool:
    """Whether the `triton` package can be imported here."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """Triton's CPU interpreter is on (`TRITON_INTERPRET=1`)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def explain(op: Op, context: Context) -> str | None:
    """Why the kernel of `op` would not run (None when it would)."""
    instance = op.attrs.get("kernel_instance")
    if not isinstance(instance, KernelInstance):
        return "the op names no kernel"
    if not triton_available():
        return "triton is not installed"
    device = context.device.type
    if device != "cuda" and not (device == "cpu" and interpreting()):
        # (`linnet torch` generates for the meta device: its standalone files run bodies)
        return f"Triton needs CUDA tensors or TRITON_INTERPRET=1 (device {context.device})"
    if not instance.where_holds:
        return f"the `where` clause of `{instance.name}` does not hold for {instance.key}"
    if len(instance.results) != len(op.results):
        return "the op's results are not the kernel's"
    try:
        compiled(instance)
    except Unsupported as exc:
        return f"no tile form: {exc}"
    return None


def kernel_native(op: Op, context: Context) -> Any:
    """A `Native` launching the op's kernel, or None to run the body."""
    if explain(op, context) is not None:
        return None
    instance = op.attrs["kernel_instance"]
    assert isinstance(instance, KernelInstance)
    from linnet.torch.natives import Native

    key = f"{op.attrs['callee']}|{instance.key}|{len(_LAUNCHERS)}"
    if clause_region(op) is not None:  # the clause is the backward (`clauses.apply`)

        def run(*operands: torch.Tensor) -> Any:
            return launch(instance, operands)

    else:
        body = _body_runner(op, context.device)

        def run(*operands: torch.Tensor) -> Any:
            if torch.is_grad_enabled() and any(o.requires_grad for o in operands):
                return _KernelWithBodyGradient.apply(  # type: ignore[no-untyped-call]
                    instance, body, *operands
                )
            return launch(instance, operands)

    _LAUNCHERS[key] = run

    def source(names: Sequence[str]) -> str:
        return f"natives.kernel_launcher({key!r})({', '.join(names)})"

    return Native(instance.name, run, source)


def launcher(key: str) -> Callable[..., Any]:
    """The launch function of a registered instantiation (used by generated code)."""
    return _LAUNCHERS[key]


def _body_runner(op: Op, device: torch.device) -> Callable[..., list[torch.Tensor]]:
    """The op's body (its `call` region) as a function of the operands, natives off."""
    from linnet.ir.core import Function
    from linnet.torch.runner import Runner

    (region,) = op.regions
    inputs = tuple((f"operand{i}", v) for i, v in enumerate(region.args))
    fn = Function(f"{op.attrs['callee']}.body", inputs, region, tuple(region.results), {})
    runner = Runner(fn, device, hoist_weights=False, natives=False)

    def run(*operands: torch.Tensor) -> list[torch.Tensor]:
        results, _ = runner({}, {}, operands)
        return results

    return run


class _KernelWithBodyGradient(torch.autograd.Function):
    """The kernel forward, the body's derivative backward (4.5 "Gradients")."""

    @staticmethod
    def forward(
        ctx: Any,
        instance: KernelInstance,
        body: Callable[..., list[torch.Tensor]],
        *operands: torch.Tensor,
    ) -> Any:
        ctx.body = body
        ctx.save_for_backward(*operands)
        return launch(instance, operands)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        operands = ctx.saved_tensors
        with torch.enable_grad():
            inputs = [
                o.detach().requires_grad_(o.is_floating_point() and need)
                for o, need in zip(operands, ctx.needs_input_grad[2:], strict=True)
            ]
            results = ctx.body(*inputs)
            wanted = [x for x in inputs if x.requires_grad]
            found = iter(torch.autograd.grad(results, wanted, list(grads), allow_unused=True))
        out = [next(found) if x.requires_grad else None for x in inputs]
        return (None, None, *out)


def compiled(instance: KernelInstance) -> ModuleType:
    """The imported Triton module of `instance` (generated once per process)."""
    key = instance.key
    found = _MODULES.get(key)
    if found is not None:
        return found
    from linnet.torch.triton_codegen import triton_source

    text = triton_source(instance)  # Unsupported propagates: the body runs
    if not _FOLDER:
        _FOLDER.append(Path(tempfile.mkdtemp(prefix="linnet_triton_")))
        atexit.register(shutil.rmtree, _FOLDER[0], ignore_errors=True)
    name = f"linnet_kernel_{len(_MODULES)}"
    path = _FOLDER[0] / f"{name}.py"
    write_bytes(path, text.encode("utf-8"), durable=False)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _MODULES[key] = module
    return module


def launch(instance: KernelInstance, operands: Sequence[torch.Tensor]) -> Any:
    """Run the kernel on `operands` (the op's flattened parameters): its result, or the
    tuple of its results."""
    module = compiled(instance)
    device = operands[0].device if operands else torch.device("cpu")
    args: list[object] = []
    for value, tensor_type in zip(operands, instance.params, strict=True):
        if tensor_type is None:
            args.append(value.item())
        else:
            args.append(value.contiguous())
    words = write_words(instance.kernel.decl.body)
    results = []
    for local, t in zip(instance.kernel.results, instance.results, strict=True):
        results.append(_allocate(words.get(local.name, "store"), t.shape, t.dtype, device))
    options: dict[str, int] = {}
    if instance.warps is not None:
        options["num_warps"] = instance.warps
    if instance.stages is not None:
        options["num_stages"] = instance.stages
    if all(size > 0 for size in instance.grid):
        module.kernel[instance.grid](*args, *results, **options)
    LAUNCHES[instance.key] += 1
    return results[0] if len(results) == 1 else tuple(results)


def _allocate(word: str, shape: tuple[int, ...], dtype: str, device: torch.device) -> torch.Tensor:
    """A result buffer: empty for `store`, the atomic's identity otherwise (4.5 step 2)."""
    torch_dtype = storage(dtype)
    if word == "store":
        return torch.empty(shape, dtype=torch_dtype, device=device)
    if word == "atomic_add":
        return torch.zeros(shape, dtype=torch_dtype, device=device)
    if torch_dtype.is_floating_point:
        fill = float("-inf") if word == "atomic_max" else float("inf")
    else:
        info = torch.iinfo(torch_dtype)
        fill = info.min if word == "atomic_max" else info.max
    return torch.full(shape, fill, dtype=torch_dtype, device=device)
