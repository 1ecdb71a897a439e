"""`linnet.gguf.export`: a Linnet model of one of the families -> a GGUF file for llama.cpp.

Stage: exporter. In: a source, the root's generics and weights (bound and
recognised as `linnet.hf.export` does: `linnet.hf.folder.bind_family`). Out:
one GGUF v3 file written with the `gguf` package (llama.cpp's own writer and
tensor-name maps; no llama.cpp checkout needed), plus, with a tokenizer, its
vocabulary and merges; `linnet.gguf.modelfile` writes the Ollama Modelfile.

What llama.cpp expects and the transformers names do not give:
- names: `gguf.get_tensor_name_map(arch)` maps every transformers name
  (`model.layers.3.self_attn.q_proj.weight` -> `blk.3.attn_q.weight`);
- llama's Q and K rows are permuted from the rotate-half layout to the
  interleaved pairs llama.cpp's LLAMA rope reads (`permute_rows`, the
  converter's `LlamaModel.permute`); qwen2, qwen3 and phi3 use the NEOX rope
  and keep their rows;
- GPT-2's Conv1D weights `[in, out]` are stored transposed, `[out, in]`;
- llama3 rope scaling (llama only, as the converter does it) is the extra f32
  tensor `rope_freqs.weight` of per-frequency divisors (`llama3_rope_freqs`),
  which llama.cpp's LLAMA graph applies to its default frequencies; phi3's
  longrope factors (the source's `rope_factors` buffer) are the tensors
  `rope_factors_short.weight`/`rope_factors_long.weight`, with the original
  context length and the attention factor as metadata (llama.cpp picks the long
  factors when its context exceeds the original one, transformers when the
  sequence does);
- outtypes as the converter writes them: 1-D tensors (norms, biases) stay f32;
  matrices become f16, bf16, q8_0 or q4_0 (a matrix whose rows do not split
  into 32-element blocks falls back to f16, as llama.cpp's converter does);
- `std.quant` linears (`Int8Linear`, `Int4GroupLinear`) keep their integers:
  Q8_0, Q4_0 or Q4_1 blocks built from them whatever the outtype, or, when no
  block type holds them (another group size, an activation order), their exact
  dequantised weight at the outtype (`linnet.gguf.quantised`).

The header is written first, from shapes and types alone; then each tensor's
data by the fastest path that gives the same bytes (`linnet.gguf.stream`): an
f32 tensor kept as it is goes file to file in the kernel, conversions to f16,
bf16 (torch's casts with the reference's rounding, `linnet.gguf.halves`) and
Q8_0 run chunk by chunk from the checkpoint file, and the rest (permuted,
transposed, Q4_0, `std.quant` blocks) is built whole, one worker thread
building the next tensor while this one is written. Everything goes into a
temporary file renamed at the end (`linnet.atomic`); a few tensors' worth of
memory is held at most.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from linnet.atomic import atomic_write
from linnet.errors import LinnetError
from linnet.gguf.halves import to_bf16, to_f16
from linnet.gguf.q8 import quantize_q8_0
from linnet.gguf.quantised import QuantisedLinear, block_bytes, dequantized, find_quantised
from linnet.gguf.stream import TensorData
from linnet.hf.families import LONGROPE_PATH
from linnet.hf.folder import BoundFamily, bind_family
from linnet.records import record
from linnet.weights.safetensors import FileCopier, release_mapped

OUTTYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")
_ARCHES = {"llama": "LLAMA", "qwen2": "QWEN2", "qwen3": "QWEN3", "phi3": "PHI3", "gpt2": "GPT2"}
_CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


@record(frozen=True)
class GgufExported:
    """What `export` wrote: the file, the family (llama.cpp architecture) and the outtype."""

    path: Path
    family: str
    outtype: str
    tensors: int


def export(
    source: Any,
    output: str | os.PathLike[str],
    *,
    generics: Mapping[str, object],
    weights: Any,
    outtype: str = "f16",
    tokenizer: str | os.PathLike[str] | None = None,
    name: str | None = None,
    bindings: Any = None,
    root: str | None = None,
    std_root: str | os.PathLike[str] | None = None,
    modelfile: bool = True,
) -> GgufExported:
    """Write `output` (a `.gguf` file) for `source` bound with `generics` and `weights`.

    `outtype` is one of f32, f16, bf16, q8_0, q4_0. `tokenizer` is a folder
    (or its `tokenizer.json`) whose BPE vocabulary, merges and special tokens
    go into the file (llama.cpp needs them to run; transformers' GGUF loader
    does not). `name` is `general.name` (default: the file's stem). With
    `modelfile`, an Ollama `Modelfile` is written beside the file (`linnet.gguf.modelfile`).
    """
    import gguf

    if outtype not in OUTTYPES:
        raise LinnetError(f"outtype {outtype!r} is not one of {', '.join(OUTTYPES)}")
    bound = bind_family(
        source, generics=generics, weights=weights, bindings=bindings, root=root, std_root=std_root
    )
    _refuse_unwritable(bound)
    target = Path(output)
    arch = getattr(gguf.MODEL_ARCH, _ARCHES[bound.family.name])
    writer = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[arch])
    _add_metadata(writer, bound, name or target.stem, outtype)
    if tokenizer is not None:
        from linnet.gguf.vocab import add_vocabulary

        template = add_vocabulary(
            writer, Path(tokenizer), int(bound.generics["Vocab"]), bound.family.name
        )
    else:
        template = None
    names = gguf.get_tensor_name_map(arch, int(bound.generics["Layers"]))
    linears = find_quantised(bound.arrays)
    absorbed = {c for linear in linears.values() for c in linear.companions}
    plan = [
        (path, _gguf_name(names, path))
        for path in bound.arrays
        if not (bound.tied and path == bound.family.head)
        and path != LONGROPE_PATH
        and path not in absorbed
    ]
    extra = _extra_tensors(bound)
    for path, gname in plan:  # the header first, from shapes and types alone
        shape, qtype, dtype = _layout(bound, path, outtype, linears)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        writer.add_tensor_info(gname, shape, dtype, nbytes, raw_dtype=qtype)
    for gname, array in extra.items():
        writer.add_tensor_info(gname, array.shape, array.dtype, array.nbytes)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(target, durable=False) as handle, FileCopier(handle) as copier:
        # NOTE: the writer's own open() is bypassed so the file goes through linnet.atomic;
        # these are the two fields its `open_output_file` would set. The tensor data is
        # written by `TensorData`, padded as the writer's `write_tensor_data` pads it.
        writer.fout = [handle]  # type: ignore[list-item]
        writer.state = gguf.gguf_writer.WriterState.EMPTY
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.fout = None
        stream = TensorData(handle, copier, writer.data_alignment)
        try:
            _write_data(stream, bound, plan, outtype, linears)
            for array in extra.values():
                stream.write(array)
        finally:
            stream.close()
        handle.flush()
    if modelfile:
        from linnet.gguf.modelfile import write_modelfile

        write_modelfile(target, template)
    return GgufExported(target, bound.family.name, outtype, len(plan) + len(extra))


def _write_data(
    stream: TensorData,
    bound: BoundFamily,
    plan: list[tuple[str, str]],
    outtype: str,
    linears: Mapping[str, QuantisedLinear],
) -> None:
    """Every planned tensor's data, in order, by the fastest path that gives its bytes
    (`linnet.gguf.stream`): kernel copies of unchanged f32 tensors, chunked conversions
    to f16, bf16 and Q8_0, and arrays built whole for the rest. One worker thread builds
    the next whole array while this one is written (NumPy and the file write release the
    GIL), so at most two are held."""
    paths = [path for path, _ in plan]
    streamed = {path: _streamed(bound, path, outtype, linears) for path in paths}

    def built(path: str) -> np.ndarray | None:
        if streamed[path] is not None:
            return None
        data = _data(bound, path, outtype, linears)
        release_mapped(bound.arrays[path])
        return data

    with ThreadPoolExecutor(max_workers=1) as worker:
        pending = [worker.submit(built, path) for path in paths[:1]]
        for i, path in enumerate(paths):
            data = pending.pop().result()
            if i + 1 < len(paths):
                pending.append(worker.submit(built, paths[i + 1]))
            if data is not None:
                stream.write(data)
                del data
                continue
            kind = streamed[path]
            source = _source_f32(bound, path)
            if kind == "copy":
                if not stream.copy(source):
                    stream.write(source)
            else:
                stream.convert(source, _CONVERTERS[str(kind)]())
            del source
            release_mapped(bound.arrays[path])


def _streamed(
    bound: BoundFamily, path: str, outtype: str, linears: Mapping[str, QuantisedLinear]
) -> str | None:
    """How `path`'s bytes stream from its f32 source (`_source_f32`): "copy" (stored as
    f32: a kernel copy where the source is the checkpoint file's own bytes, else written),
    an outtype of `_CONVERTERS`, or None (built whole by `_data`)."""
    import gguf

    if path in linears or np.asarray(bound.arrays[path]).dtype != np.float32:
        return None
    _, qtype, dtype = _layout(bound, path, outtype, linears)
    if qtype is None:
        return "copy" if dtype == np.float32 else "f16"
    return {gguf.GGMLQuantizationType.BF16: "bf16", gguf.GGMLQuantizationType.Q8_0: "q8_0"}.get(
        qtype
    )


def _into_buffer(
    dtype: type[np.generic], convert_into: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> Callable[[np.ndarray], np.ndarray]:
    """A chunk converter writing into one buffer of `dtype`, grown when a chunk is larger,
    so the stream allocates once per tensor kind rather than once per chunk."""
    out = np.empty(0, dtype)

    def convert(chunk: np.ndarray) -> np.ndarray:
        nonlocal out
        if out.size < chunk.size:
            out = np.empty(chunk.size, dtype)
        return convert_into(chunk, out[: chunk.size])

    return convert


def _f16_converter() -> Callable[[np.ndarray], np.ndarray]:
    return _into_buffer(np.float16, to_f16)


def _bf16_converter() -> Callable[[np.ndarray], np.ndarray]:
    return _into_buffer(np.uint16, to_bf16)


def _q8_0_converter() -> Callable[[np.ndarray], np.ndarray]:
    return lambda chunk: quantize_q8_0(chunk.reshape(-1, 32))


_CONVERTERS: dict[str, Callable[[], Callable[[np.ndarray], np.ndarray]]] = {
    "f16": _f16_converter,
    "bf16": _bf16_converter,
    "q8_0": _q8_0_converter,
}


def _refuse_unwritable(bound: BoundFamily) -> None:
    problems = []
    if int(bound.generics.get("RopeFactor", 1)) != 1 and bound.family.name != "llama":
        problems.append(
            f"llama3 rope scaling (RopeFactor > 1) of a {bound.family.name} model: llama.cpp "
            "reads the rope_freqs tensor only for llama"
        )
    dtype = str(bound.generics.get("T", "f32"))
    if dtype not in ("f32", "f16", "bf16"):
        problems.append(f"T = {dtype} has no GGUF source type")
    if problems:
        raise LinnetError("cannot write GGUF: " + "; ".join(problems))


def _extra_tensors(bound: BoundFamily) -> dict[str, np.ndarray]:
    """Tensors llama.cpp needs that the checkpoint does not hold: `rope_freqs.weight` for
    llama3 rope scaling."""
    import gguf

    g = bound.generics
    factors = bound.arrays.get(LONGROPE_PATH)
    if factors is not None:
        rows = np.asarray(factors, dtype=np.float32)
        return {
            gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight": rows[1].copy(),
            gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight": rows[0].copy(),
        }
    if bound.family.name != "llama" or int(g.get("RopeFactor", 1)) == 1:
        return {}
    name = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight"
    factors = llama3_rope_freqs(
        int(g["HeadDim"]),
        float(int(g["RopeTheta"])),
        float(int(g["RopeFactor"])),
        float(int(g["RopeLowFreqFactor"])),
        float(int(g["RopeHighFreqFactor"])),
        int(g["RopeOriginalMaxSeq"]),
    )
    return {name: factors}


def llama3_rope_freqs(
    dim: int, theta: float, factor: float, low: float, high: float, original: int
) -> np.ndarray:
    """The divisor of each default rotary frequency under llama3 scaling, f32 `[dim / 2]`,
    as `convert_hf_to_gguf.py`'s `LlamaModel.generate_extra_tensors` computes it: 1 for
    short wavelengths, `factor` for long ones, `1 / ((1 - smooth) / factor + smooth)`
    between. The converter's arithmetic is torch's on 0-d f32 tensors, so every step
    here is in f32 (the powers taken in f64 and rounded once, as torch's are)."""
    f32 = np.float32
    exponents = np.arange(0, dim, 2, dtype=f32) / f32(dim)
    freqs = f32(1.0) / np.power(np.float64(theta), exponents.astype(np.float64)).astype(f32)
    low_wavelen = original / low
    high_wavelen = original / high
    out: list[np.float32] = []
    for freq in freqs:
        wavelen = f32(2 * math.pi) / freq
        if wavelen < high_wavelen:
            out.append(f32(1.0))
        elif wavelen > low_wavelen:
            out.append(f32(factor))
        else:
            smooth = (f32(original) / wavelen - f32(low)) / f32(high - low)
            out.append(f32(1.0) / ((f32(1.0) - smooth) / f32(factor) + smooth))
    return np.asarray(out, dtype=f32)


def _gguf_name(names: Any, path: str) -> str:
    found = names.get_name(path, try_suffixes=(".weight", ".bias"))
    if found is None:
        raise LinnetError(f"no llama.cpp tensor name for `{path}`")
    return str(found)


def permute_rows(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's Q/K row order: within each head, the rotate-half halves interleaved
    (`convert_hf_to_gguf.py`'s `LlamaModel.permute`); works for biases too."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _layout(
    bound: BoundFamily, path: str, outtype: str, linears: Mapping[str, QuantisedLinear]
) -> tuple[tuple[int, ...], Any, Any]:
    """(stored shape, GGML type or None for a plain NumPy dtype, NumPy dtype) of `path`."""
    import gguf

    shape = tuple(bound.arrays[path].shape)
    linear = linears.get(path)
    if linear is not None:
        if linear.direct is not None:
            qtype = getattr(gguf.GGMLQuantizationType, linear.direct)
            byte_shape = tuple(gguf.quant_shape_to_byte_shape(linear.shape, qtype))
            return byte_shape, qtype, np.dtype(np.uint8)
        shape = linear.shape
    elif bound.family.name == "gpt2" and path.endswith(_CONV1D):
        shape = shape[::-1]
    if len(shape) < 2 or outtype == "f32":
        return shape, None, np.dtype(np.float32)
    qtype = {
        "f16": None,
        "bf16": gguf.GGMLQuantizationType.BF16,
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
        "q4_0": gguf.GGMLQuantizationType.Q4_0,
    }[outtype]
    if qtype is None or shape[-1] % gguf.GGML_QUANT_SIZES[qtype][0]:
        return shape, None, np.dtype(np.float16)
    return tuple(gguf.quant_shape_to_byte_shape(shape, qtype)), qtype, np.dtype(np.uint8)


def _data(
    bound: BoundFamily, path: str, outtype: str, linears: Mapping[str, QuantisedLinear]
) -> np.ndarray:
    """The bytes to store for `path`, as `_layout` describes them."""
    import gguf

    linear = linears.get(path)
    if linear is not None:
        prefix = path.removesuffix(".weight")
        scale, zero, order = (bound.arrays.get(f"{prefix}.{r}") for r in ("scale", "zero", "order"))
        assert scale is not None
        if linear.direct is not None:
            blocks = block_bytes(
                linear.kind,
                _llama_rows(bound, path, np.asarray(bound.arrays[path])),
                _llama_rows(bound, path, np.asarray(scale)),
                None if zero is None else _llama_rows(bound, path, np.asarray(zero)),
            )
            return np.ascontiguousarray(blocks)
        array = dequantized(linear.kind, bound.arrays[path], scale, zero, order)
        array = _llama_rows(bound, path, array)
    else:
        array = _source_f32(bound, path)
    array = np.ascontiguousarray(array)
    _, qtype, dtype = _layout(bound, path, outtype, linears)
    if qtype is None:
        return array.astype(dtype, copy=False)
    if qtype == gguf.GGMLQuantizationType.Q8_0:
        return quantize_q8_0(array)  # gguf-py's bytes, in cache-sized chunks
    return np.asarray(gguf.quants.quantize(array, qtype))


def _source_f32(bound: BoundFamily, path: str) -> np.ndarray:
    """`path`'s (unquantised) values as f32 in the stored layout: GPT-2's Conv1D weights
    transposed, llama's Q/K rows permuted; the checkpoint's own (mapped) array when
    neither applies and it is f32 already."""
    array = np.asarray(bound.arrays[path], dtype=np.float32)
    if bound.family.name == "gpt2" and path.endswith(_CONV1D):
        array = array.T
    return _llama_rows(bound, path, array)


def _llama_rows(bound: BoundFamily, path: str, array: np.ndarray) -> np.ndarray:
    """`array` (rows = the outputs of `path`'s linear) in llama.cpp's Q/K row order."""
    if bound.family.name == "llama":
        if ".self_attn.q_proj." in path:
            return permute_rows(array, int(bound.generics["Heads"]))
        if ".self_attn.k_proj." in path:
            return permute_rows(array, int(bound.generics["KvHeads"]))
    return array


def _add_metadata(writer: Any, bound: BoundFamily, name: str, outtype: str) -> None:
    import gguf

    g = {k: v for k, v in bound.generics.items()}
    writer.add_name(name)
    writer.add_file_type(
        {
            "f32": gguf.LlamaFileType.ALL_F32,
            "f16": gguf.LlamaFileType.MOSTLY_F16,
            "bf16": gguf.LlamaFileType.MOSTLY_BF16,
            "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
            "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
        }[outtype]
    )
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_block_count(int(g["Layers"]))
    writer.add_embedding_length(int(g["H"]))
    writer.add_feed_forward_length(int(g["Inner"]))
    writer.add_head_count(int(g["Heads"]))
    writer.add_vocab_size(int(g["Vocab"]))
    eps = 1.0 / int(g["EpsInverse"])
    if bound.family.name == "gpt2":
        writer.add_context_length(int(g["Positions"]))
        writer.add_head_count_kv(int(g["Heads"]))
        writer.add_layer_norm_eps(eps)
        return
    head_dim = int(g["HeadDim"])
    if LONGROPE_PATH in bound.arrays:  # as the converter writes a longrope Phi-3
        positions, original = int(g["RopeMaxPositions"]), int(g["RopeOriginalMaxSeq"])
        writer.add_context_length(positions)
        writer.add_rope_scaling_orig_ctx_len(original)
        scale = positions / original
        writer.add_rope_scaling_attn_factors(
            math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0
        )
    else:
        writer.add_context_length(int(g["MaxSeq"]))
    writer.add_head_count_kv(int(g["KvHeads"]))
    writer.add_layer_norm_rms_eps(eps)
    writer.add_rope_freq_base(float(int(g["RopeTheta"])))
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
