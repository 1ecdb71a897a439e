"""What every node of the pack shares: ComfyUI's socket types, clean errors, JSON widgets.

Stage: the node pack's plumbing (issue 19). ComfyUI calls a node's `FUNCTION`
with its inputs as keyword arguments and shows the message of any exception it
raises in the UI. `reported` wraps each node function so that a `LinnetError` (a
bad path, a generic that does not fit, a tensor of the wrong shape) reaches
ComfyUI as a `LinnetError` with the same text, its chained causes dropped, so the
user reads the message and not a traceback of ours. Other exceptions are bugs,
or the device failing, and travel unchanged.

Socket types are strings; the pack's own are `LINNET_MODEL` (a
`linnet.comfyui.model.LinnetModel`) and `LINNET_TENSOR` (a torch tensor, on the
model's device when an entry produced it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

from linnet.errors import LinnetError

MODEL = "LINNET_MODEL"
TENSOR = "LINNET_TENSOR"
CATEGORY = "Linnet"

F = TypeVar("F", bound=Callable[..., Any])


def reported(function: F) -> F:
    """`function` with its `LinnetError`s re-raised bare (see the module docstring)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except LinnetError as exc:
            raise LinnetError(str(exc)) from None

    return run  # type: ignore[return-value]


def json_object(text: str, what: str) -> dict[str, object]:
    """A widget's JSON object (`{"H": 64}`); empty text is `{}`."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LinnetError(f"`{what}` is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise LinnetError(
            f'`{what}` must be a JSON object such as {{"H": 64, "T": "f32"}}, got {text.strip()}'
        )
    return value


def optional_path(text: str) -> str | None:
    """A path widget: surrounding spaces and quotes dropped (a pasted path keeps them);
    empty is None."""
    cleaned = text.strip().strip('"').strip("'").strip()
    return cleaned or None


def _tip(options: dict[str, Any], tooltip: str) -> dict[str, Any]:
    """`options` with the `tooltip` ComfyUI shows on hover, when there is one."""
    return {**options, "tooltip": tooltip} if tooltip else options


def string(
    default: str = "", *, multiline: bool = False, tooltip: str = ""
) -> tuple[str, dict[str, Any]]:
    """A STRING widget's input spec."""
    return ("STRING", _tip({"default": default, "multiline": multiline}, tooltip))


def integer(default: int, low: int, high: int, tooltip: str = "") -> tuple[str, dict[str, Any]]:
    """An INT widget's input spec."""
    return ("INT", _tip({"default": default, "min": low, "max": high, "step": 1}, tooltip))


def number(
    default: float, low: float, high: float, step: float, tooltip: str = ""
) -> tuple[str, dict[str, Any]]:
    """A FLOAT widget's input spec."""
    return ("FLOAT", _tip({"default": default, "min": low, "max": high, "step": step}, tooltip))


def flag(default: bool, tooltip: str = "") -> tuple[str, dict[str, Any]]:
    """A BOOLEAN widget's input spec."""
    return ("BOOLEAN", _tip({"default": default}, tooltip))


def choice(options: tuple[str, ...], tooltip: str = "") -> tuple[list[str], dict[str, Any]]:
    """A combo widget's input spec: the options, the first the default."""
    return (list(options), _tip({"default": options[0]}, tooltip))


def socket(kind: str, tooltip: str = "") -> tuple[str, dict[str, Any]]:
    """A linked input's spec (no widget)."""
    return (kind, _tip({}, tooltip))
