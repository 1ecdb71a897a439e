"""`linnet.gguf.halves` gives the reference's f16 and bf16 bits for every kind of f32.

The references are NumPy's `astype(np.float16)` (what GGUF f16 tensors held
before torch converted them) and gguf-py's `BF16.quantize_blocks` (ggml's
`ggml_compute_fp32_to_bf16`). The inputs are what a cast gets wrong first:
ties at every rounding boundary (to even, both parities), the largest finite
values and those that overflow to infinity, f16 subnormals and values that
round into or out of them, signed zeros, infinities, and NaNs quiet and
signalling with payloads (where the CPU's instructions and the references
differ); plus a random spread of every bit pattern, in one call longer than
torch's serial piece.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from linnet.gguf.halves import SERIAL_VALUES, bf16_reference, to_bf16, to_f16  # noqa: E402

Array = np.ndarray[Any, Any]


def awkward() -> Array:
    bits = [
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # zeros, infinities
        0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7F800001,  # NaNs: quiet, full, signalling
        0xFF800001, 0x7FA00000, 0x7F802000, 0x7F801FFF, 0xFFBFFFFF,
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FFFFF,  # f16 max, below/at/above its tie
        0x47800000, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF,  # overflow (f16), bf16's top
        0x33800000, 0x33000000, 0x33000001, 0x32FFFFFF,  # f16 smallest subnormal and halves
        0x387FC000, 0x387FE000, 0x387FF000, 0x38800000,  # subnormal -> normal boundary
        0x3F801000, 0x3F803000, 0x3F808000, 0x3F818000,  # f16 / bf16 ties, even and odd
        0x3F800FFF, 0x3F807FFF, 0x00000001, 0x80000001,  # below ties; f32 subnormals
    ]  # fmt: skip
    return np.array(bits, np.uint32).view(np.float32)


def spread() -> Array:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 3 * SERIAL_VALUES + 17, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32).copy()
    values[: awkward().size] = awkward()
    return values


@pytest.mark.parametrize("values", [awkward(), spread()], ids=["awkward", "spread"])
def test_f16_bits_are_numpys(values: Array) -> None:
    out = np.empty(values.size, np.float16)
    with np.errstate(over="ignore"):
        want = values.astype(np.float16)
    got = to_f16(values.copy(), out)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("values", [awkward(), spread()], ids=["awkward", "spread"])
def test_bf16_bits_are_gguf_pys(values: Array) -> None:
    want = gguf.quants.quantize(values.reshape(1, -1), gguf.GGMLQuantizationType.BF16)
    assert np.array_equal(bf16_reference(values).view(np.uint8), want.reshape(-1))
    got = to_bf16(values.copy(), np.empty(values.size, np.uint16))
    assert np.array_equal(got.view(np.uint8), want.reshape(-1))
