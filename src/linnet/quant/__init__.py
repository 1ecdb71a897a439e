"""Quantised weights for the `std.quant` layouts (stdlib.md section 20).

`quantize_checkpoint` turns a float SafeTensors checkpoint into one that the
quantised blocks (`Int4GroupLinear`, `Int8Linear`) bind, by round-to-nearest
(`rtn`: ONNX Runtime's own 4-bit block quantiser, bit for bit, and symmetric
per-row int8); `import_compressed` converts compressed-tensors `pack-quantized`
int4 checkpoints (llm-compressor's GPTQ / AWQ output) to the same layout, and
`import_quantized` reads a Hugging Face folder whose `config.json` names GPTQ
(act-order included), AWQ-GEMM or compressed-tensors. The
backends run those blocks with native kernels where they compute the same function (`com.microsoft.MatMulNBits` on ONNX Runtime).
"""

from linnet.quant.checkpoint import quantize_checkpoint
from linnet.quant.compressed import import_compressed
from linnet.quant.hf import import_quantized
from linnet.quant.rtn import int4_groups, int8_rows, pack_zero_points

__all__ = [
    "import_compressed",
    "import_quantized",
    "int4_groups",
    "int8_rows",
    "pack_zero_points",
    "quantize_checkpoint",
]
