"""Identifiers for generated source: sanitised, unique, never a keyword or prelude name.

Stage: shared by translation and module assembly. In: names from a model
(ONNX value names such as `/model/layers.0/Mul_output_0`, `dim_param`s such
as `batch_size`, initializer names). Out: identifiers valid under section 2.4
that no declaration rule rejects (E1004 reserved words, E1207 prelude names,
keywords), unique within their scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from linnet.sourcegen.graph import Node
from linnet.syntax.tokens import KEYWORDS, PRELUDE_NAMES, RESERVED

# Reduction words may name locals, but such a local can never be indexed
# (3.3 rule 3), so generated code avoids them; `std` heads import paths.
FORBIDDEN: frozenset[str] = (
    KEYWORDS | RESERVED | PRELUDE_NAMES | frozenset({"sum", "prod", "any", "all", "std", "_"})
)

_NON_IDENT = re.compile(r"[^A-Za-z0-9_]+")


def sanitize(text: str, fallback: str = "v") -> str:
    """An identifier close to `text`: other characters become `_`, a leading
    digit gets a prefix, forbidden words get a trailing `_`."""
    out = _NON_IDENT.sub("_", text).strip("_")
    out = re.sub(r"__+", "_", out)
    if not out:
        out = fallback
    if out[0].isdigit():
        out = f"{fallback}{out}"
    if out in FORBIDDEN:
        out += "_"
    return out


def snake(text: str) -> str:
    """`LayerNormalization` -> `layer_normalization`, for names derived from operators."""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", text)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return sanitize(s.lower())


def pascal(text: str) -> str:
    """`self_attn` -> `SelfAttn`, for block type names."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+|_", text) if p]
    out = "".join(p[:1].upper() + p[1:] for p in parts) or "Block"
    if out[0].isdigit():
        out = "B" + out
    if out in FORBIDDEN:
        out += "_"
    return out


class Namer:
    """Hands out unique identifiers in one scope: `x`, `x_2`, `x_3`, ..."""

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self._taken: set[str] = set(taken)
        self._next: dict[str, int] = {}

    def reserve(self, name: str) -> None:
        self._taken.add(name)

    def taken(self, name: str) -> bool:
        return name in self._taken

    def release(self, name: str) -> None:
        """Give `name` back (a local renamed before anything read it)."""
        self._taken.discard(name)

    def fresh(self, hint: str) -> str:
        base = sanitize(hint)
        if base not in self._taken:
            self._taken.add(base)
            return base
        n = self._next.get(base, 2)
        while f"{base}_{n}" in self._taken:
            n += 1
        self._next[base] = n + 1
        name = f"{base}_{n}"
        self._taken.add(name)
        return name


# ---------------------------------------------------------------- readable local names
#
# Exporters name values after the module that made them: torch's TorchScript
# exporter writes `/model/layers.0/self_attn/q_proj/MatMul_output_0` (module
# path, then operator), its dynamo exporter names values after ATen ops
# (`linear_3`, `view_2`) and records the module path on the node
# (`model.layers.0.self_attn.q_proj`). A person names the result of a module
# call after the module (`let q_proj = ...`), not after its last operator, and
# never after a layer number (every layer's body must read the same, so the
# outliner can turn them into one method). Values that do not leave a module
# keep the short name the translator gives (`reshaped`, `attended`, `normed`).

_NUMBER = re.compile(r"^\d+$")
_GENERATED = re.compile(
    r"^(?:val|output|out|tensor|onnx_\w+|.*_output)_?\d*$|^\d+$|^[A-Z][A-Za-z]*_?\d*$"
)
_LAYER_RESULT = "out"
"""The name of what a repeated element (`layers.0`, `h.3`) returns."""


_WRAPPER = re.compile(
    r"^(?:jax2tf_\w*|pjit_\w*|jit_\w*|(?:Stateful)?PartitionedCall(?:_\d+)?|__inference_\w*"
    r"|tf2onnx\w*)$"
)
_WRAPPER_PREFIX = re.compile(r"^(?:jax2tf_(?:arg|out)_?|serving_default_)(?=\w)")


def clean_exporter_name(text: str) -> str:
    """`text` without the wrapper components jax2tf and tf2onnx add around every name:
    `jax2tf_fn_/pjit_fn_/conv1/Conv2D` -> `conv1/Conv2D`, `serving_default_image:0`
    -> `image`, `jax2tf_arg_0` -> `0` (sanitize gives it a prefix). Names without
    such wrappers are returned unchanged."""
    head, colon, tail = text.partition(":")
    name = head if colon and tail.isdigit() else text
    lead = "/" if name.startswith("/") else ""
    parts = [p for p in name.split("/") if p]
    if not parts:
        return text
    kept = [p for p in parts[:-1] if not _WRAPPER.match(p)]
    kept.append(_WRAPPER_PREFIX.sub("", parts[-1]))
    if kept == parts and name == text:
        return text
    return lead + "/".join(kept)


def module_path(scope: str, node_name: str, value_name: str) -> tuple[str, ...]:
    """The module path a node belongs to, as components (`("model", "layers", "0", "mlp")`).

    `scope` is the path an exporter recorded (dotted); otherwise a TorchScript
    name `/a/b.0/c/Op_2` (node) or `/a/b.0/c/Op_2_output_0` (value) gives
    `a.b.0.c`. Scopes an exporter invents (`_empty_nn_module_stack...`) are
    no path.
    """
    if scope and not scope.startswith("_"):
        return tuple(p for p in scope.split(".") if p)
    for raw in (node_name, value_name):
        text = clean_exporter_name(raw)
        if text.startswith("/") and text.count("/") >= 2:
            parts = [p for p in text.split("/")[1:-1] if p]
            return tuple(q for p in parts for q in p.split(".") if q)
        if text != raw and text.count("/") >= 1:
            # A TensorFlow name once its wrappers are gone: `conv1/Conv2D`.
            parts = [p for p in text.split("/")[:-1] if p]
            return tuple(sanitize(p, "v") for p in parts)
    return ()


def module_name(path: tuple[str, ...]) -> str:
    """What a value leaving module `path` is called: its last component (`q_proj`);
    for an element of a repeated stack (`layers.0`), `out`, so no layer number shows."""
    if not path:
        return ""
    if _NUMBER.match(path[-1]):
        return _LAYER_RESULT
    name = sanitize(path[-1].lower(), "v")
    return name.removesuffix("_fn") if name.endswith("_fn") and len(name) > 3 else name


_KIND_SUFFIX = re.compile(r"_(?:proj|projection|fn|func|layer|module)$")


def shorter_name(name: str) -> str:
    """`q_proj` -> `q`, `act_fn` -> `act`: the module name without its kind word, or `""`."""
    short = _KIND_SUFFIX.sub("", name)
    return short if short != name and short and short not in FORBIDDEN else ""


def output_name(name: str) -> str:
    """A graph output's name when a person chose it (`logits`), else `""`."""
    if "/" in name or ":" in name or "." in name:
        return ""
    clean = sanitize(name, "")
    if not clean or _GENERATED.match(clean) or clean != name:
        return ""
    return clean.lower() if clean.lower() not in FORBIDDEN else ""


def plan_local_names(nodes: Iterable[Node], outputs: Iterable[str]) -> dict[str, str]:
    """A readable name for each value whose model names carry meaning.

    - a graph output a person named (`logits`) keeps that name;
    - a value read outside the module that made it (or returned) is named
      after that module (`q_proj`, `mlp`, `act`, `out` for a layer's result),
      unless the module hands out several values (each keeps its own name).
    Values not listed keep the translator's name.
    """
    node_list = list(nodes)
    graph_outputs = list(outputs)
    paths: dict[str, tuple[str, ...]] = {}
    for node in node_list:
        for out in node.outputs:
            if out:
                paths[out] = module_path(node.scope, node.name, out)
    leaving: dict[str, bool] = {v: False for v in paths}
    returned = set(graph_outputs)
    for node in node_list:
        reader = None
        for value in node.inputs:
            if value not in paths or leaving[value]:
                continue
            if reader is None:
                reader = _reader_path(node)
            path = paths[value]
            if path and reader[: len(path)] != path:
                leaving[value] = True
    per_module: dict[tuple[str, ...], int] = {}
    for value, path in paths.items():
        if path and (leaving[value] or value in returned):
            per_module[path] = per_module.get(path, 0) + 1
    plan: dict[str, str] = {}
    for value, path in paths.items():
        chosen = output_name(value) if value in returned else ""
        leaves = path and (leaving[value] or value in returned)
        if not chosen and leaves and per_module[path] == 1:
            chosen = module_name(path)
        if chosen:
            plan[value] = chosen
    return plan


def _reader_path(node: Node) -> tuple[str, ...]:
    first = next((o for o in node.outputs if o), "")
    return module_path(node.scope, node.name, first)
