"""Quantised weights for the `std.quant` layouts (stdlib.md section 20).

`quantize_checkpoint` turns a float SafeTensors checkpoint into one that the
quantised blocks bind: `Int4GroupLinear` and `Int8Linear` by round-to-nearest
(`rtn`: ONNX Runtime's own 4-bit block quantiser, bit for bit, and symmetric
per-row int8), `Fp8Linear` (E4M3 rows) and `Mxfp4Linear` (OCP MX blocks) by
`minifloat`. Checkpoints quantised elsewhere are converted, never
requantised: `import_compressed` reads compressed-tensors `pack-quantized`
int4, `float-quantized` FP8 and `mxfp4-pack-quantized` linears, and
`import_quantized` a Hugging Face folder whose `config.json` names GPTQ
(act-order included), AWQ-GEMM, compressed-tensors or gpt-oss MXFP4. The
backends run the blocks with native kernels where they compute the same
function (`com.microsoft.MatMulNBits` on ONNX Runtime; `linnet.native`'s CPU
kernels on PyTorch, else dequantised once), and `linnet.gguf.export` writes them as GGUF blocks.
`quantize_source` rewrites a model's source (the decoder examples: Llama, Qwen2,
Qwen3, Phi-3, GPT-2) so that its linears are those blocks, and names the weights
`quantize_checkpoint` must quantise for it.
"""

from linnet.quant.checkpoint import quantize_checkpoint
from linnet.quant.compressed import import_compressed
from linnet.quant.hf import import_quantized
from linnet.quant.rtn import int4_groups, int8_rows, pack_zero_points
from linnet.quant.source import QuantizedSource, quantize_source

__all__ = [
    "QuantizedSource",
    "import_compressed",
    "import_quantized",
    "int4_groups",
    "int8_rows",
    "pack_zero_points",
    "quantize_checkpoint",
    "quantize_source",
]
