"""The tensor nodes: ComfyUI images to tensors and back, argmax, and tensors typed in as JSON.

Stage: the node pack's tensor half (issue 19); the node contract is the one
described in `linnet.comfyui.model_nodes`. A `LINNET_TENSOR` is a torch tensor;
an output of Run entry that the entry does not fill is empty (None), and a node
given one says so instead of failing somewhere inside torch.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from linnet.comfyui.contract import (
    CATEGORY,
    TENSOR,
    choice,
    flag,
    integer,
    reported,
    socket,
    string,
)
from linnet.comfyui.images import DTYPES, image_to_tensor, parse_channels, tensor_to_image
from linnet.errors import LinnetError
from linnet.ir.core import DTYPES as LINNET_DTYPES

MEAN_TIP = "per-channel mean, comma-separated (ImageNet: 0.485, 0.456, 0.406); empty: none"
STD_TIP = "per-channel std, comma-separated (ImageNet: 0.229, 0.224, 0.225); empty: none"
VALUE_DTYPES = ("f32", *(d for d in LINNET_DTYPES if d not in ("f32", "u16", "u32", "u64")))
"""Every dtype torch holds natively, f32 first (the widget's default)."""


def required_tensor(tensor: object, what: str = "tensor") -> torch.Tensor:
    """A `LINNET_TENSOR` input, or a `LinnetError` for an empty Run entry output."""
    if isinstance(tensor, torch.Tensor):
        return tensor
    if tensor is None:
        raise LinnetError(
            f"`{what}` is empty: it is linked to a Run entry output that the entry does not produce"
        )
    raise LinnetError(f"`{what}` must be a tensor, got {type(tensor).__name__}")


class ImageToTensor:
    """Image to tensor: ComfyUI's IMAGE `[B, H, W, C]` as `[B, C, H, W]`."""

    DESCRIPTION = "Turns an IMAGE into the [B, C, H, W] tensor vision models take."
    RETURN_TYPES = (TENSOR,)
    RETURN_NAMES = ("tensor",)
    FUNCTION = "convert"
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {
            "required": {
                "image": socket("IMAGE"),
                "dtype": choice(tuple(DTYPES), "the tensor's dtype"),
            },
            "optional": {"mean": string(tooltip=MEAN_TIP), "std": string(tooltip=STD_TIP)},
        }

    @reported
    def convert(
        self, image: torch.Tensor, dtype: str, mean: str = "", std: str = ""
    ) -> tuple[torch.Tensor]:
        tensor = image_to_tensor(
            image, dtype=dtype, mean=parse_channels(mean, "mean"), std=parse_channels(std, "std")
        )
        return (tensor,)


class TensorToImage:
    """Tensor to image: `[B, C, H, W]` back to ComfyUI's IMAGE `[B, H, W, C]`."""

    DESCRIPTION = (
        "Turns a [B, C, H, W] tensor into an IMAGE, undoing the normalisation; one "
        "channel becomes grey."
    )
    RETURN_TYPES = ("IMAGE",)
    RETURN_NAMES = ("image",)
    FUNCTION = "convert"
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {
            "required": {"tensor": socket(TENSOR)},
            "optional": {
                "mean": string(tooltip=MEAN_TIP),
                "std": string(tooltip=STD_TIP),
                "clamp": flag(True, "clamp the values to [0, 1]"),
            },
        }

    @reported
    def convert(
        self, tensor: torch.Tensor, mean: str = "", std: str = "", clamp: bool = True
    ) -> tuple[torch.Tensor]:
        image = tensor_to_image(
            required_tensor(tensor),
            mean=parse_channels(mean, "mean"),
            std=parse_channels(std, "std"),
            clamp=clamp,
        )
        return (image,)


class Argmax:
    """Argmax: the index of the largest value along an axis (a class, a token)."""

    DESCRIPTION = "The index of the largest value along `axis` (the last by default)."
    RETURN_TYPES = (TENSOR, "INT", "STRING")
    RETURN_NAMES = ("indices", "first", "text")
    FUNCTION = "argmax"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {
            "required": {
                "tensor": socket(TENSOR),
                "axis": integer(-1, -8, 7, "the axis to reduce; -1: the last"),
            }
        }

    @reported
    def argmax(self, tensor: torch.Tensor, axis: int) -> dict[str, Any]:
        values = required_tensor(tensor)
        if values.dim() == 0:
            raise LinnetError("Argmax: the tensor is a scalar; it has no axis to reduce")
        if not -values.dim() <= axis < values.dim():
            raise LinnetError(
                f"Argmax: `axis` {axis} is outside a tensor of rank {values.dim()} "
                f"(shape {list(values.shape)})"
            )
        if values.shape[axis] == 0:
            raise LinnetError(f"Argmax: axis {axis} of shape {list(values.shape)} is empty")
        indices = torch.argmax(values.detach(), dim=axis)
        listed = indices.cpu().tolist()
        text = json.dumps(listed)
        first = int(indices.reshape(-1)[0].item())
        return {"ui": {"text": [text]}, "result": (indices, first, text)}


class TensorFromValues:
    """Tensor from values: a tensor typed in as JSON (token ids, positions, small inputs)."""

    DESCRIPTION = "A tensor from nested JSON lists (or one number) and a dtype."
    RETURN_TYPES = (TENSOR,)
    RETURN_NAMES = ("tensor",)
    FUNCTION = "make"
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {
            "required": {
                "values": string("[0]", multiline=True, tooltip="e.g. [[1, 2, 3]] or 5"),
                "dtype": choice(VALUE_DTYPES, "the tensor's Linnet dtype"),
            }
        }

    @reported
    def make(self, values: str, dtype: str) -> tuple[torch.Tensor]:
        from linnet.ir.core import numpy_dtype
        from linnet.torch.dtypes import to_torch

        if dtype not in VALUE_DTYPES:
            raise LinnetError(f"`dtype` takes {', '.join(VALUE_DTYPES)}, not `{dtype}`")
        try:
            data = json.loads(values)
        except json.JSONDecodeError as exc:
            raise LinnetError(f"`values` is not valid JSON: {exc}") from None
        try:
            array: np.ndarray[Any, Any] = np.array(data, dtype=np.float64)
        except (ValueError, TypeError):
            raise LinnetError(
                "`values` must be a number or nested lists of numbers of one shape "
                f"(a rectangular array), got {values.strip()[:80]}"
            ) from None
        target = np.dtype(numpy_dtype(dtype))
        if target.kind in "iu":
            if not bool(np.all(array == np.round(array))):
                raise LinnetError(f"`values` holds fractions, which {dtype} cannot hold")
            info = np.iinfo(target)
            if array.size and (array.min() < info.min or array.max() > info.max):
                raise LinnetError(
                    f"`values` holds numbers outside {dtype} ({info.min}..{info.max})"
                )
        return (to_torch(array.astype(target), dtype),)
