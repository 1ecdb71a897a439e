"""The block rule of `int8_activations`, shared by the ONNX export and the native kernels.

Stage: a constant and a lookup, read when a graph is emitted
(`linnet.onnx.export.fused_quant`: `MatMulNBits(bits=8, accuracy_level=4)`)
and when `linnet.torch` runs an int8 linear with int8 activations
(`linnet.torch.natives_quant`, `kernels.c`'s "int8 activations" section). Both
backends must round the same activations together, so the rule lives in one
place that neither backend's optional dependencies (onnx, torch) are needed to
import. int4 group weights need no rule: their activation block is the group.
"""

from __future__ import annotations

INT8_BLOCKS = (128, 64, 32, 16)
"""Block sizes for int8 weights under `int8_activations`, the first that divides `In`.
The block is also how many activations share one int8 scale. 128 is the activation
block of int4 group-128 weights (`MatMulNBits` rounds activations per weight block)
and, one thread, 8 distinct 5632 x 2048 weights: 0.80 ms of CPU per product against
0.99 ms for 32 (llama.cpp's Q8_0 block), 0.67 ms for 256; a 4-layer H=1024 Llama
decoded 1.07x as fast as with 32 (alternated rounds, load ~8 on 2 cores). Its logits
were 1.8% (max abs / max) from the exact int8 function, against 1.5% for 32 and
2.2% for 256, with 2.3% between exact int8 and f32 (`bench/quant_decode.py` weights)."""


def int8_block(width: int) -> int:
    """The activation block for int8 weights of `width` inputs, or 0 when none of
    `INT8_BLOCKS` divides it (the exact function runs then, on both backends)."""
    return next((b for b in INT8_BLOCKS if width % b == 0), 0)
