"""ComfyUI images <-> the tensors Linnet vision models take.

Stage: the Image to tensor and Tensor to image nodes (issue 19). ComfyUI's
`IMAGE` is a float32 torch tensor `[B, H, W, C]` with values in [0, 1] (C = 3;
a mask is a separate `[B, H, W]` tensor); Linnet vision models, like PyTorch's,
take `[B, C, H, W]`, often normalised per channel (`(x - mean) / std`, the
ImageNet statistics for most classifiers).

`image_to_tensor` permutes, normalises and casts; `tensor_to_image` undoes the
normalisation, permutes back, repeats a single channel to three (ComfyUI's
preview and save nodes expect colour), and clamps to [0, 1] unless told not to.
With the same `mean` and `std` the two are inverses on [0, 1] images.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from linnet.errors import LinnetError

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}


def parse_channels(text: str, what: str) -> list[float]:
    """`"0.485, 0.456, 0.406"` as floats; empty text is no values."""
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    try:
        return [float(p) for p in parts]
    except ValueError:
        raise LinnetError(
            f"`{what}` takes numbers separated by commas (one per channel), got `{text}`"
        ) from None


def _per_channel(values: Sequence[float], channels: int, what: str) -> torch.Tensor | None:
    if not values:
        return None
    if len(values) == 1:
        values = list(values) * channels
    if len(values) != channels:
        raise LinnetError(
            f"`{what}` has {len(values)} values but the image has {channels} channels"
        )
    return torch.tensor(values, dtype=torch.float64).view(1, channels, 1, 1)


def _statistics(
    mean: Sequence[float], std: Sequence[float], channels: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    m = _per_channel(mean, channels, "mean")
    s = _per_channel(std, channels, "std")
    if s is not None and bool((s == 0).any()):
        raise LinnetError("`std` holds a zero: every channel's std must be nonzero")
    return m, s


def image_to_tensor(
    image: torch.Tensor,
    *,
    dtype: str = "f32",
    mean: Sequence[float] = (),
    std: Sequence[float] = (),
) -> torch.Tensor:
    """A ComfyUI `IMAGE` `[B, H, W, C]` as `[B, C, H, W]` of `dtype`, `(x - mean) / std`."""
    if not isinstance(image, torch.Tensor) or image.dim() != 4:
        shape = list(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
        raise LinnetError(f"`image` must be a ComfyUI IMAGE [B, H, W, C], got {shape}")
    if dtype not in DTYPES:
        raise LinnetError(f"`dtype` takes {', '.join(DTYPES)}, not `{dtype}`")
    x = image.detach().permute(0, 3, 1, 2).to(torch.float64)
    m, s = _statistics(mean, std, x.shape[1])
    if m is not None:
        x = x - m.to(x.device)
    if s is not None:
        x = x / s.to(x.device)
    return x.to(DTYPES[dtype]).contiguous()


def tensor_to_image(
    tensor: torch.Tensor,
    *,
    mean: Sequence[float] = (),
    std: Sequence[float] = (),
    clamp: bool = True,
) -> torch.Tensor:
    """A `[B, C, H, W]` (or `[C, H, W]`) tensor as a ComfyUI `IMAGE`: float32 `[B, H, W, C]`
    on the CPU, `x * std + mean`, one channel repeated to three, clamped to [0, 1]."""
    if tensor.dim() == 3:
        tensor = tensor.unsqueeze(0)
    if tensor.dim() != 4:
        raise LinnetError(
            f"a tensor for an IMAGE must be [B, C, H, W] or [C, H, W], got {list(tensor.shape)}"
        )
    if not (tensor.is_floating_point() or tensor.dtype == torch.bool):
        raise LinnetError(f"a tensor for an IMAGE must hold floats, got {tensor.dtype}")
    x = tensor.detach().to("cpu", torch.float64)
    channels = x.shape[1]
    if channels not in (1, 3, 4):
        raise LinnetError(
            f"a tensor for an IMAGE has 1, 3 or 4 channels on axis 1, got {channels} "
            f"(shape {list(tensor.shape)}); is it [B, H, W, C] already?"
        )
    m, s = _statistics(mean, std, channels)
    if s is not None:
        x = x * s
    if m is not None:
        x = x + m
    if channels == 1:
        x = x.repeat(1, 3, 1, 1)
    if clamp:
        x = x.clamp(0.0, 1.0)
    return x.permute(0, 2, 3, 1).to(torch.float32).contiguous()
