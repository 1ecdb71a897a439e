"""Quantised weights for the `std.quant` layouts (stdlib.md section 20).

`quantize_checkpoint` turns a float SafeTensors checkpoint into one that the
quantised blocks (`Int4GroupLinear`, `Int8Linear`) bind, by round-to-nearest
(`rtn`: ONNX Runtime's own 4-bit block quantiser, bit for bit, and symmetric
per-row int8). The backends run those blocks with native kernels where they
compute the same function (`com.microsoft.MatMulNBits` on ONNX Runtime).
"""

from linnet.quant.checkpoint import quantize_checkpoint
from linnet.quant.rtn import int4_groups, int8_rows, pack_zero_points

__all__ = ["int4_groups", "int8_rows", "pack_zero_points", "quantize_checkpoint"]
