"""`import_stablehlo` and `export_linnet`: StableHLO text or a JAX function in, Linnet out.

Stage: the JAX importer's front door; it runs the importer stages in order
(architecture.md "Importers"):

    the MLIR text parsed with jaxlib's bindings (mlir.parse_module)
      -> `@main`'s arguments bound: parameter leaves as stored tensors under
         their pytree paths, inputs as graph inputs
      -> every op of `@main` and the functions it calls mapped onto the
         importer graph's (ONNX) vocabulary (walk, ops)
      -> every unmapped op refused at once, with its `file.py:line`
      -> the shared back half (sourcegen.finish): pattern recovery, layout
         from the parameter paths, translation, module assembly, formatting,
         the checker
      -> only then: the source written atomically, weights and bindings.json

Argument order: a module `linnet stablehlo` wrote says what each argument is
(its `linnet.*` contract: inputs, then params by path, then the state members
the entry reads; results, then the state members' new values): each state
member becomes a `state` member at its path, read through that path and
assigned where the entry made its new value (`sourcegen.state`); any other module
(`jax.export` of `fn(params, *inputs)`) takes the flattened parameter leaves,
in JAX's pytree order, then the inputs. Parameter paths join pytree keys
with "." (`{"layers": [{"w": ...}]}` -> `layers.0.w`), so the SafeTensors
written by `weights=` bind the generated source unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jaxlib.mlir import ir

from linnet.errors import LinnetError
from linnet.jax.importer.builder import Builder, Lazy, Ref
from linnet.jax.importer.mlir import DYNAMIC, functions, parse_module, tensor_type
from linnet.jax.importer.walk import walk_function
from linnet.onnx.importer import ops  # noqa: F401 - registers every operator translator
from linnet.onnx.importer.graph import REGISTRY
from linnet.sourcegen.finish import ImportResult, finish_import
from linnet.sourcegen.graph import Node, TensorInfo
from linnet.sourcegen.names import sanitize
from linnet.sourcegen.patterns import drop_dead
from linnet.sourcegen.refusals import ImportRefusedError, refusal_error
from linnet.sourcegen.translate import Refusal

__all__ = ["ImportResult", "export_linnet", "flatten_params", "import_stablehlo"]


def import_stablehlo(
    text: str,
    params: Any = None,
    *,
    output: str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
    input_names: Sequence[str] | None = None,
    module_name: str | None = None,
    root_name: str = "Model",
    entry: str | None = None,
    std_root: str | os.PathLike[str] | None = None,
    label: str = "the StableHLO module",
) -> ImportResult:
    """Translate StableHLO MLIR `text` into a Linnet source file at `output`.

    `params` is the parameter pytree (nested dicts and lists of arrays; a
    flat dict keyed by dotted paths works too): dicts become blocks, lists
    arrays of blocks, each leaf a `param` member at its dotted path. With
    `weights=DIR` the leaves the source reads are saved to
    `DIR/model.safetensors` under those paths. `input_names` names the
    inputs (default: the names in the module's locations, else `x0`, ...).
    Ops with no translation, custom calls, loops and dynamic shapes raise
    one `ImportRefusedError` naming every such op with its `file.py:line`;
    nothing is written then.
    """
    module = parse_module(text)
    funcs = functions(module)
    if "main" not in funcs:
        raise LinnetError(f"{label} has no `@main` function")
    main = funcs["main"]
    block = main.regions[0].blocks[0]
    formals = list(block.arguments)
    leaves = flatten_params(params)
    contract = _contract(module)
    if contract is not None:
        _check_state(contract, label)
        n_in = len(contract.inputs)
        order: list[tuple[str, Any]] = [("input", i) for i in range(n_in)]
        order += [("param", p) for p in contract.params]
        order += [("state", p) for p in contract.state]
        names = list(contract.inputs)
        missing = [p for p in contract.params if p not in leaves]
        if missing:
            raise LinnetError(f"{label} reads parameters `params` lacks: " + ", ".join(missing))
        entry = entry or contract.entry
    else:
        n_in = len(formals) - len(leaves)
        if n_in < 0:
            raise LinnetError(
                f"{label}'s `@main` takes {len(formals)} arguments, fewer than the "
                f"{len(leaves)} parameter leaves"
            )
        order = [("param", p) for p in leaves] + [("input", i) for i in range(n_in)]
        names = [_arg_name(main, len(leaves) + i) or f"x{i}" for i in range(n_in)]
    if input_names is not None:
        if len(input_names) != n_in:
            raise LinnetError(
                f"{label} takes {n_in} inputs, `input_names` names {len(input_names)}"
            )
        names = list(input_names)
    if len(order) != len(formals):
        raise LinnetError(
            f"{label}'s `@main` takes {len(formals)} arguments, expected {len(order)}"
        )
    b = Builder()
    args: list[Ref | None] = []
    used_names: set[str] = set()
    for formal, (kind, key) in zip(formals, order, strict=True):
        t = tensor_type(formal.type)
        if t is None or t[0] is None or DYNAMIC in t[1]:
            what = f"{kind} `{key}`" if kind != "input" else f"input `{names[int(key)]}`"
            why = "a dynamic shape" if t is not None and DYNAMIC in t[1] else "a type"
            raise ImportRefusedError(
                f"cannot import {label}: {what} has {why} Linnet cannot express "
                f"({formal.type}); export at static shapes"
            )
        dtype, shape = t[0], t[1]
        assert dtype is not None
        if kind == "param":
            path = str(key)
            arr = _leaf_array(leaves[path], path, dtype, shape)
            b.graph.initializers[path] = arr
            b.graph.paths[path] = path
            b.graph.value_info[path] = TensorInfo(path, dtype, shape)
            args.append(path)
        elif kind == "state":
            # The member's value before the call: a graph input read through its path.
            name = _unique(sanitize(f"state_{str(key).replace('.', '_')}", "state"), used_names)
            info = TensorInfo(name, dtype, shape)
            b.graph.inputs.append(info)
            b.graph.value_info[name] = info
            b.graph.state[name] = str(key)
            b.graph.paths[name] = str(key)
            args.append(name)
        else:
            name = _unique(sanitize(names[int(key)], f"x{key}"), used_names)
            info = TensorInfo(name, dtype, shape)
            b.graph.inputs.append(info)
            b.graph.value_info[name] = info
            args.append(name)
    results = walk_function(b, funcs, main, args)
    next_state: list[str] = []
    if contract is not None:
        if len(results) != contract.results + len(contract.next_state):
            raise LinnetError(
                f"{label}'s `@main` returns {len(results)} values; its contract says "
                f"{contract.results} results and {len(contract.next_state)} next states"
            )
        next_state = list(contract.next_state)
    if b.untranslated:
        refusals = [
            Refusal(
                Node(u.op, "", u.name, (), (u.name,), {"_where": u.where} if u.where else {}),
                u.reason,
            )
            for u in b.untranslated
        ]
        raise refusal_error(label, refusals)
    _outputs(b, results, next_state)
    # Rewrites (keepdims reductions, means) leave the forms they replaced unread; they
    # go before recovery, which refuses chains whose values something else reads.
    drop_dead(b.graph)
    result = finish_import(
        b.graph,
        REGISTRY,
        label=label,
        output=Path(output),
        entry=entry or "forward",
        weights=None if weights is None else Path(weights),
        module_name=module_name,
        root_name=root_name,
        std_root=std_root,
    )
    result.notes[:0] = b.notes
    return result


def export_linnet(
    fn: Callable[..., Any],
    params: Any,
    example_inputs: Sequence[Any],
    *,
    output: str | os.PathLike[str],
    weights: str | os.PathLike[str] | None = None,
    input_names: Sequence[str] | None = None,
    module_name: str | None = None,
    root_name: str = "Model",
    entry: str | None = None,
    std_root: str | os.PathLike[str] | None = None,
) -> ImportResult:
    """Capture `fn(params, *example_inputs)` with `jax.export` and import its StableHLO.

    The capture is `jax.export.export(jax.jit(fn))(params, *inputs)` at the
    example inputs' shapes and dtypes; see `import_stablehlo` for the rest.
    """
    name = str(getattr(fn, "__name__", ""))
    label = f"`{name}`" if name.isidentifier() else "the function"
    try:
        exported = jax.export.export(jax.jit(fn))(params, *example_inputs)
    except Exception as exc:  # tracing runs the user's function; its error is theirs
        raise LinnetError(f"cannot capture {label} with jax.export: {exc}") from None
    return import_stablehlo(
        exported.mlir_module(),
        params,
        output=output,
        weights=weights,
        input_names=input_names,
        module_name=module_name,
        root_name=root_name,
        entry=entry or sanitize(name if name.isidentifier() else "forward", "forward"),
        std_root=std_root,
        label=label,
    )


def flatten_params(params: Any) -> dict[str, Any]:
    """The leaves of a parameter pytree by dotted path, in JAX's flattening order
    (`{"layers": [{"w": ...}]}` -> `layers.0.w`; an `nnx.State`'s `fc1.kernel`)."""
    if params is None:
        return {}
    flat, _ = jax.tree_util.tree_flatten_with_path(params)
    out: dict[str, Any] = {}
    for path, leaf in flat:
        # A Flax NNX variable's array is its `.value`: the path is the variable's.
        keys = path[:-1] if path and getattr(path[-1], "name", None) == "value" else path
        out[".".join(_key_part(k) for k in keys)] = leaf
    return out


def _key_part(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _leaf_array(leaf: Any, path: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    from linnet.jax.importer.mlir import numpy_type

    arr = np.asarray(leaf)
    if tuple(arr.shape) != shape:
        raise LinnetError(
            f"parameter `{path}` has shape {tuple(arr.shape)}; the module takes {shape}"
        )
    want = np.dtype(numpy_type(dtype))
    if arr.dtype != want:
        raise LinnetError(f"parameter `{path}` is {arr.dtype}; the module takes {dtype}")
    return np.ascontiguousarray(arr)


def _contract(module: ir.Module) -> Any:
    if "linnet.entry" not in module.operation.attributes:
        return None
    from linnet.jax.stablehlo import parse_contract

    return parse_contract(module)


def _arg_name(main: Any, index: int) -> str:
    """The name JAX recorded for an argument (`loc("x")`), or ``""``."""
    import re

    block = main.regions[0].blocks[0]
    text = str(block.arguments[index].location)
    match = re.match(r'^loc\("([A-Za-z_][A-Za-z0-9_]*)"\)$', text)
    return match.group(1) if match else ""


def _unique(name: str, used: set[str]) -> str:
    out, n = name, 1
    while out in used:
        n += 1
        out = f"{name}_{n}"
    used.add(out)
    return out


def _check_state(contract: Any, label: str) -> None:
    """A state member is read at most once, written at most once, and is no parameter."""
    for kind, paths in (("linnet.state", contract.state), ("linnet.next_state",
                                                           contract.next_state)):  # fmt: skip
        twice = sorted({p for p in paths if paths.count(p) > 1})
        if twice:
            raise LinnetError(f"{label}: `{kind}` names `{twice[0]}` twice")
        both = sorted(set(paths) & set(contract.params))
        if both:
            raise LinnetError(f"{label}: `{both[0]}` is both a parameter and a state member")


def _outputs(b: Builder, results: list[Ref | None], next_state: Sequence[str] = ()) -> None:
    """The graph's outputs: the entry's results, then (the last `len(next_state)`)
    each state member's value after the call, named in `graph.next_state`."""
    seen: set[str] = set()
    first_state = len(results) - len(next_state)
    for i, ref in enumerate(results):
        assert ref is not None  # a refused value was reported above
        name = b.full(ref) if isinstance(ref, Lazy) else ref
        state = i >= first_state
        if (
            name in seen
            or name in b.graph.constants
            or name in b.graph.initializers
            or (state and any(info.name == name for info in b.graph.inputs))
        ):
            name = b.emit("Identity", [name], b.dtype(name), b.shape(name))
        seen.add(name)
        info = b.info(name)
        if state:
            path = next_state[i - first_state]
            before = next((n for n, p in b.graph.state.items() if p == path), None)
            if before is not None:
                had = b.graph.value_info[before]
                if (had.dtype, had.shape) != (info.dtype, info.shape):
                    raise LinnetError(
                        f"state `{path}` is {had.dtype}{list(had.shape or ())} before the "
                        f"call and {info.dtype}{list(info.shape or ())} after it"
                    )
            b.graph.next_state[name] = path
        b.graph.outputs.append(TensorInfo(name, info.dtype, info.shape))
