"""`linnet.gguf.export`'s streamed data paths store each tensor as the reference converts it whole.

The weights come from a SafeTensors file, so every path runs: kernel copies of
unchanged f32 tensors, chunked reads straight from the file (chunks made tiny
here, so that every tensor spans several and ends in a partial one), arrays
built whole for llama's permuted Q/K and GPT-2's transposed Conv1D weights.
Each stored tensor's bytes must equal the reference's conversion of the whole
tensor: the array itself (f32), NumPy's `astype(np.float16)`, gguf-py's
`quants.quantize` (bf16, q8_0); a signalling NaN with a payload sits in one
matrix, where the CPU's conversion instructions and the references differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import family_support as fs  # noqa: E402

import linnet.gguf  # noqa: E402
import linnet.gguf.stream  # noqa: E402
from linnet.weights.safetensors import save_safetensors  # noqa: E402

Array = np.ndarray[Any, Any]
QTYPES = {"bf16": "BF16", "q8_0": "Q8_0"}


def stored_layout(family: str, path: str, array: Array) -> Array:
    """`array` in llama.cpp's layout: GPT-2's Conv1D transposed, llama's Q/K rows permuted."""
    generics = fs.generics(family)
    if family == "gpt2" and path.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
        return np.ascontiguousarray(array.T)
    if family == "llama" and ".self_attn.q_proj." in path:
        return linnet.gguf.permute_rows(array, int(str(generics["Heads"])))
    if family == "llama" and ".self_attn.k_proj." in path:
        return linnet.gguf.permute_rows(array, int(str(generics["KvHeads"])))
    return array


def reference_bytes(array: Array, outtype: str) -> bytes:
    if array.ndim < 2 or outtype == "f32":
        return array.astype(np.float32).tobytes()
    qtype = QTYPES.get(outtype)
    if qtype is None or (outtype == "q8_0" and array.shape[-1] % 32):  # f16, or rows of no blocks
        with np.errstate(over="ignore"):
            return array.astype(np.float16).tobytes()
    return np.asarray(
        gguf.quants.quantize(array, getattr(gguf.GGMLQuantizationType, qtype))
    ).tobytes()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the NaN, in Q8_0 blocks
@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0"])
def test_every_tensor_is_the_whole_conversion(
    family: str, outtype: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(linnet.gguf.stream, "CHUNK_VALUES", 96)
    weights = fs.linnet_weights(family, seed=3)
    name = next(n for n, a in weights.items() if a.ndim == 2)
    weights[name] = weights[name].copy()
    weights[name].reshape(-1)[5] = np.array(0x7F800001, np.uint32).view(np.float32)
    save_safetensors(weights, tmp_path / "w.safetensors")
    path = tmp_path / "m.gguf"
    linnet.gguf.export(
        fs.source(family), path, generics=fs.generics(family),
        weights=tmp_path / "w.safetensors", outtype=outtype, modelfile=False,
    )  # fmt: skip
    reader = gguf.GGUFReader(path)
    arch = getattr(gguf.MODEL_ARCH, family.upper())
    names = gguf.get_tensor_name_map(arch, int(str(fs.generics(family)["Layers"])))
    stored = {t.name: bytes(np.asarray(t.data).view(np.uint8).reshape(-1)) for t in reader.tensors}
    checked = 0
    for path_name, array in weights.items():
        gname = names.get_name(path_name, try_suffixes=(".weight", ".bias"))
        if gname not in stored:  # a tied head
            continue
        want = reference_bytes(stored_layout(family, path_name, array), outtype)
        assert stored[gname] == want, gname
        checked += 1
    assert checked == len(stored)
