"""The PEFT LoRA file format without a framework: what `linnet.train.peft` (PyTorch) and
`linnet.jax.train.lora` (JAX) both write and read.

Stage: training output and input. `write_adapters` writes a folder from
`AdapterFile`s (NumPy `lora_A [r, in]`, `lora_B [out, r]` and the options of
each adapter); `read_adapters` reads one back, checked against the model's
weight paths, and `check_pair` checks a pair against its weight's shape. The
format, the names and what is refused are described in `linnet.train.peft`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from linnet.atomic import ensure_folder, write_bytes
from linnet.errors import LinnetError
from linnet.weights.safetensors import linnet_dtype_of

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."
PEFT_VERSION = "0.21.2"  # the version whose format this writes (pyproject's pin)

# Options that change what an adapter computes, with the value meaning "not used".
_UNSUPPORTED: dict[str, object] = {
    "use_dora": False,
    "lora_bias": False,
    "bias": "none",
    "modules_to_save": None,
    "layer_replication": None,
    "trainable_token_indices": None,
    "target_parameters": None,
    "alora_invocation_tokens": None,
    "use_bdlora": None,
}
_KEY = re.compile(r"(?P<module>.+)\.(?P<which>lora_A|lora_B)\.weight")


@dataclass(frozen=True)
class AdapterFile:
    """One adapter as a PEFT folder holds it: the parameter path of its weight, its options
    and its pair (`lora_A [rank, in]`, `lora_B [out, rank]`, NumPy)."""

    path: str
    rank: int
    alpha: float
    dropout: float
    fan_in_fan_out: bool
    use_rslora: bool
    lora_A: np.ndarray
    lora_B: np.ndarray


def write_adapters(
    folder: str | os.PathLike[str],
    adapters: Sequence[AdapterFile],
    *,
    names: Mapping[str, str] | None = None,
    base_model: str | None = None,
    task_type: str | None = None,
) -> Path:
    """Write `adapters` to `folder` as PEFT files (what `save_lora` does); the folder."""
    if not adapters:
        raise LinnetError("save_lora: the model has no LoRA adapter (add_lora first)")
    modules = {module_name(a.path, names): a for a in adapters}
    first = adapters[0]
    for option in ("dropout", "fan_in_fan_out", "use_rslora"):
        values = {getattr(a, option) for a in adapters}
        if len(values) > 1:
            raise LinnetError(
                f"save_lora: the adapters differ in {option} "
                f"({sorted(values)}); a PEFT config holds one value"
            )
    ranks = [a.rank for a in adapters]
    alphas = [a.alpha for a in adapters]
    rank = max(set(ranks), key=ranks.count)
    alpha = max(set(alphas), key=alphas.count)
    config = {
        "peft_type": "LORA",
        "peft_version": PEFT_VERSION,
        "task_type": task_type,
        "base_model_name_or_path": base_model,
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": first.dropout,
        "fan_in_fan_out": first.fan_in_fan_out,
        "use_rslora": first.use_rslora,
        "target_modules": sorted(modules),
        "rank_pattern": {re.escape(m): a.rank for m, a in modules.items() if a.rank != rank},
        "alpha_pattern": {re.escape(m): a.alpha for m, a in modules.items() if a.alpha != alpha},
        "bias": "none",
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
    }
    tensors: dict[str, np.ndarray] = {}
    for module, adapter in modules.items():
        tensors[f"{PREFIX}{module}.lora_A.weight"] = adapter.lora_A
        tensors[f"{PREFIX}{module}.lora_B.weight"] = adapter.lora_B
    from linnet.weights.safetensors import save_safetensors

    target = ensure_folder(folder, what="adapter folder")
    save_safetensors(tensors, target / WEIGHTS, metadata={"format": "pt"})
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    write_bytes(target / CONFIG, text.encode("utf-8"))
    return target


def read_adapters(
    folder: str | os.PathLike[str],
    weights: Sequence[str],
    *,
    names: Mapping[str, str] | None = None,
) -> list[AdapterFile]:
    """The adapters of a PEFT folder in path order, for a model whose parameter paths are
    `weights` (what `load_lora` reads; the pairs' shapes are checked by `check_pair`).
    `LinnetError` naming the file, tensor or option for a missing or malformed file, an
    option not implemented, or a module the model lacks."""
    from linnet.weights.safetensors import read_safetensors

    where = Path(folder)
    config = _read_config(where)
    weights_file = where / WEIGHTS
    if not weights_file.is_file():
        pickled = " (adapter_model.bin is a pickle, never read: save it as SafeTensors)"
        found = pickled if (where / "adapter_model.bin").exists() else ""
        raise LinnetError(f"load_lora: `{weights_file}` does not exist{found}")
    stored = read_safetensors(weights_file)
    pairs = _pairs(stored, weights_file)
    paths_of = {}
    for path in weights:
        name = (names or {}).get(path, path)
        if name.endswith(".weight"):
            paths_of[name.removesuffix(".weight")] = path
    missing = sorted(m for m in pairs if m not in paths_of)
    if missing:
        raise LinnetError(
            f"load_lora: `{weights_file}` adapts {', '.join(f'`{m}`' for m in missing)}, "
            "which the model has no weight for"
        )
    settings = _settings(config, where / CONFIG)
    found_adapters = []
    for module, (a, b) in pairs.items():
        rank = _pattern_value(config, "rank_pattern", module, config.get("r", 8))
        if a.ndim != 2 or rank != a.shape[0]:
            raise LinnetError(
                f"load_lora: `{weights_file}`: `{PREFIX}{module}.lora_A.weight` is "
                f"{list(a.shape)}, but `{CONFIG}` gives the module rank {rank}"
            )
        found_adapters.append(
            AdapterFile(
                path=paths_of[module],
                rank=int(a.shape[0]),
                alpha=_pattern_value(config, "alpha_pattern", module, settings["lora_alpha"]),
                dropout=settings["lora_dropout"],
                fan_in_fan_out=settings["fan_in_fan_out"],
                use_rslora=settings["use_rslora"],
                lora_A=a,
                lora_B=b,
            )
        )
    return sorted(found_adapters, key=lambda a: a.path)


def check_adapter(
    adapter: AdapterFile,
    shape: Sequence[int],
    folder: str | os.PathLike[str],
    names: Mapping[str, str] | None = None,
) -> None:
    """`check_pair` of one read adapter against its weight's shape."""
    pair = (adapter.lora_A, adapter.lora_B)
    module = module_name(adapter.path, names)
    check_pair(shape, pair, adapter.fan_in_fan_out, module, Path(folder) / WEIGHTS)


# -- names -------------------------------------------------------------------------------


def module_name(path: str, names: Mapping[str, str] | None) -> str:
    name = (names or {}).get(path, path)
    if not name.endswith(".weight"):
        raise LinnetError(
            f"the LoRA weight `{name}` is not named `<module>.weight`, so it has no PEFT "
            "module name; pass names={path: '<module>.weight'}"
        )
    return name.removesuffix(".weight")


def _pairs(stored: Mapping[str, np.ndarray], file: Path) -> dict[str, tuple[Any, Any]]:
    """`module -> (lora_A, lora_B)` of an adapter file; LinnetError for other tensors."""
    found: dict[str, dict[str, np.ndarray]] = {}
    other = []
    for key, array in stored.items():
        match = _KEY.fullmatch(key.removeprefix(PREFIX)) if key.startswith(PREFIX) else None
        if match is None:
            other.append(key)
        else:
            found.setdefault(match["module"], {})[match["which"]] = array
    if other:
        raise LinnetError(
            f"load_lora: `{file}` holds tensors that are no LoRA pair of a linear weight: "
            f"{', '.join(f'`{k}`' for k in sorted(other))}"
        )
    if not found:
        raise LinnetError(f"load_lora: `{file}` holds no LoRA tensor")
    pairs = {}
    for module, both in sorted(found.items()):
        if set(both) != {"lora_A", "lora_B"}:
            lacking = ({"lora_A", "lora_B"} - set(both)).pop()
            raise LinnetError(f"load_lora: `{file}` has no `{PREFIX}{module}.{lacking}.weight`")
        pairs[module] = (both["lora_A"], both["lora_B"])
    return pairs


# -- config ------------------------------------------------------------------------------


def _read_config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LinnetError(f"load_lora: `{path}` does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LinnetError(f"load_lora: cannot read `{path}`: {exc}") from None
    if not isinstance(config, dict):
        raise LinnetError(f"load_lora: `{path}` is not a JSON object")
    if config.get("peft_type") != "LORA":
        raise LinnetError(
            f"load_lora: `{path}` has peft_type {config.get('peft_type')!r}, not 'LORA'"
        )
    for option, unused in _UNSUPPORTED.items():
        value = config.get(option, unused)
        if value != unused and value not in (None, [], {}):
            raise LinnetError(
                f"load_lora: `{path}` sets `{option}` to {value!r}, which linnet.train "
                "does not implement"
            )
    return config


def _settings(config: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The config's uniform options, checked: alpha, dropout, layout, rsLoRA."""
    alpha = config.get("lora_alpha", 8)
    dropout = config.get("lora_dropout", 0.0)
    fan_in_fan_out = config.get("fan_in_fan_out", False)
    use_rslora = config.get("use_rslora", False)
    if not _number(alpha) or not _number(dropout) or not 0 <= dropout < 1:
        raise LinnetError(
            f"load_lora: `{path}` needs a number `lora_alpha` and a `lora_dropout` in [0, 1)"
        )
    for option, value in (("fan_in_fan_out", fan_in_fan_out), ("use_rslora", use_rslora)):
        if not isinstance(value, bool):
            raise LinnetError(f"load_lora: `{path}` sets `{option}` to {value!r}, not a bool")
    for option in ("rank_pattern", "alpha_pattern"):
        patterns = config.get(option) or {}
        if not isinstance(patterns, dict) or not all(_number(v) for v in patterns.values()):
            raise LinnetError(f"load_lora: `{path}`: `{option}` must map names to numbers")
    return {
        "lora_alpha": alpha,
        "lora_dropout": float(dropout),
        "fan_in_fan_out": fan_in_fan_out,
        "use_rslora": use_rslora,
    }


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _pattern_value(config: Mapping[str, Any], option: str, module: str, default: Any) -> Any:
    """PEFT's `get_pattern_key`: the first key matching the end of the module name."""
    for key, value in (config.get(option) or {}).items():
        try:
            if re.match(rf"(.*\.)?({key})$", module):
                return value
        except re.error as exc:
            raise LinnetError(f"load_lora: `{option}` key {key!r} is no regex: {exc}") from None
    return default


# -- tensors -----------------------------------------------------------------------------


def check_pair(
    shape: Sequence[int], pair: tuple[Any, Any], fan_in_fan_out: bool, module: str, file: Path
) -> None:
    """`lora_A` `[r, in]` and `lora_B` `[out, r]` of floats for a weight of `shape`."""
    out_features, in_features = (shape[1], shape[0]) if fan_in_fan_out else (shape[0], shape[1])
    rank = pair[0].shape[0]
    layout = " (fan_in_fan_out: stored [in, out])" if fan_in_fan_out else ""
    for name, array, wanted in (
        ("lora_A", pair[0], (rank, in_features)),
        ("lora_B", pair[1], (out_features, rank)),
    ):
        key = f"`{PREFIX}{module}.{name}.weight`"
        if tuple(array.shape) != wanted:
            raise LinnetError(
                f"load_lora: `{file}`: {key} is {list(array.shape)}, the weight "
                f"{list(shape)}{layout} needs {list(wanted)}"
            )
        if linnet_dtype_of(array) not in ("f16", "bf16", "f32", "f64"):
            raise LinnetError(f"load_lora: `{file}`: {key} holds {array.dtype}, not floats")
