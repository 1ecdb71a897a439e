"""Native CPU kernels compiled on first use: one-row linears on packed `std.quant` weights.

Batch-1 decoding on a CPU reads every weight once per token, so its speed is
read bandwidth over bytes per weight. `linnet.torch` ran int8 and int4 weights
dequantised to f32 (PyTorch's weight-only CPU kernels were 3-30x slower than
f32 here), reading four bytes per weight. These kernels read the packed bytes
(`Int8Linear`: 1 byte + a scale per row; `Int4GroupLinear`, group 128: 0.54
byte) and compute the std op's function in f32 (`kernels.c` says how); the f32
kernel serves `linnet.torch`'s f32 linears of a decode step (`natives.linear_cpu`).
The `_a8` kernels round the activations to int8 per block first and multiply
integers (`linnet.torch.load(..., int8_activations=True)`; ONNX Runtime's
`MatMulNBits` at `accuracy_level=4` computes the same function; the block rule
is `activations.py`).
Linears that read one x run as one call and one parallel region (`*_many`), and
a decode step's rms_norm, rope, attention and cache writes have plain C loops
(`linnet.torch.natives_cpu`), each one ctypes call in place of several aten ops.

`kernels()` gives the library or None; `status()` says which vector path was
compiled, with how many threads, or why there is no library (no compiler, a
failed build, `LINNET_NATIVE=0`). Nothing here raises at model load.
"""

from linnet.native.kernels import Kernels, Status, forget, kernels, status

__all__ = ["Kernels", "Status", "forget", "kernels", "status"]
