"""GPTQ-format weights for `linnet.hf.export`, when the model's linears are `Int4GroupLinear`.

Stage: part of `linnet.hf.export`. In: the bound arrays of a recognised model
(by parameter path) and the paths a checkpoint stores. Out: the tensors of a
folder that transformers' GPTQ integration (optimum + `gptqmodel`) loads, and
the `quantization_config` for its `config.json`:

- every `Int4GroupLinear` inside the decoder layers becomes `<name>.qweight`
  i32 `[In/8, Out]`, `<name>.qzeros` i32 `[G, ceil(Out/8)]`, `<name>.scales`
  f16 `[G, Out]` and `<name>.g_idx` i32 `[In]`, packed as AutoGPTQ / GPTQModel
  pack them (`linnet.quant.gptq_awq.gptq_words`, the inverse of the importer):
  the same 4-bit integers and zero points; an activation order (`order`)
  becomes `g_idx` with `desc_act: true`;
- `checkpoint_format` is `gptq` (v1, zero points stored minus one), or
  `gptq_v2` when a zero point is 0, which v1 cannot store; `sym` is true when
  every zero point is 8; one `group_size` for all (another is refused);
- the scales are stored in f16, as GPTQ stores them: exact for scales that
  are f16 already (imported GPTQ / AWQ checkpoints), otherwise rounded once;
- a quantised linear outside the layers (`lm_head`, of any `std.quant` kind), which transformers'
  GPTQ loader keeps a float `nn.Linear`, is written as its weight dequantised
  exactly as the std body computes it (f32 arithmetic), in the model's dtype.

Refused with a `LinnetError`, before anything is written: an `Int8Linear`,
`Fp8Linear` or `Mxfp4Linear` in the layers (no transformers format is written
for them), a
float linear among quantised ones inside the layers (transformers would
expect it quantised too), group sizes that differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from linnet.errors import LinnetError
from linnet.quant.gptq_awq import gptq_words
from linnet.records import record
from linnet.weights.safetensors import NUMPY_DTYPES, file_range, linnet_dtype_of

Array = np.ndarray[Any, Any]
Spec = tuple[str, str, tuple[int, ...]]
LAYERS = {"gpt2": "transformer.h."}
"""Where each family's decoder layers live (`model.layers.` unless named here)."""


@record(frozen=True)
class WeightPlan:
    """The tensors to write (`(name, linnet dtype, shape)`), a loader by name, the
    `quantization_config` (None for a float model), and where a tensor written as it is
    stored lies in a SafeTensors file (`stored(name)`: file and byte offset, None for one
    computed here or held in memory), known before anything is loaded."""

    specs: list[Spec]
    load: Callable[[str], Array]
    quantization: dict[str, object] | None
    stored: Callable[[str], tuple[Path, int] | None]


def plan_weights(
    family: str, arrays: Mapping[str, Array], names: Sequence[str], dtype: str
) -> WeightPlan:
    """The weights of the folder: the bound `arrays` under `names` for a float model; the
    GPTQ form (see the module docstring) when some linears are quantised. `dtype` is the
    model's float dtype (`T`)."""
    from linnet.gguf.quantised import dequantized, find_quantised  # linnet.gguf imports us

    linears = {p: q for p, q in find_quantised(arrays).items() if p in names}
    if not linears:
        plain = [(n, linnet_dtype_of(arrays[n]), tuple(arrays[n].shape)) for n in names]
        return WeightPlan(plain, lambda n: arrays[n], None, lambda n: file_range(arrays[n]))
    layers = LAYERS.get(family, "model.layers.")
    for path, linear in linears.items():
        if linear.kind != "int4_groups" and path.startswith(layers):
            raise LinnetError(
                f"hf export: `{path.removesuffix('.weight')}` is a {_BLOCKS[linear.kind]}; "
                "the layers of a quantised folder are written for Int4GroupLinear (GPTQ) only"
            )
    grouped = {p: q for p, q in linears.items() if p.startswith(layers)}
    absorbed = {c for q in linears.values() for c in q.companions}
    floats = [
        n
        for n in names
        if n.startswith(layers)
        and n.endswith(".weight")
        and n not in linears
        and arrays[n].ndim == 2
        and linnet_dtype_of(arrays[n]) in ("f16", "bf16", "f32", "f64")
    ]
    if grouped and floats:
        raise LinnetError(
            f"hf export: `{floats[0]}` is a float linear among Int4GroupLinear ones; "
            "transformers' GPTQ loader quantises every linear of the layers, so quantise it too"
        )
    sizes = {p: 2 * arrays[p].shape[2] for p in grouped}
    if len(set(sizes.values())) > 1:
        first = min(sizes)
        other = next(p for p in sorted(sizes) if sizes[p] != sizes[first])
        raise LinnetError(
            f"hf export: `{first}` has groups of {sizes[first]} inputs and `{other}` of "
            f"{sizes[other]}; a GPTQ folder has one group_size"
        )
    zeros = [np.asarray(arrays[p.removesuffix(".weight") + ".zero"]) for p in grouped]
    v1 = all(bool((z != 0).all()) for z in zeros)
    sym = all(bool((z == 8).all()) for z in zeros)
    ordered = any(p.removesuffix(".weight") + ".order" in arrays for p in grouped)
    specs: list[Spec] = []
    for name in names:
        if name in absorbed:
            continue
        if name in grouped:
            out, groups = arrays[name].shape[:2]
            width = groups * sizes[name]
            prefix = name.removesuffix(".weight")
            specs += [
                (f"{prefix}.qweight", "i32", (width // 8, out)),
                (f"{prefix}.qzeros", "i32", (groups, -(-out // 8))),
                (f"{prefix}.scales", "f16", (groups, out)),
                (f"{prefix}.g_idx", "i32", (width,)),
            ]
        elif name in linears:
            specs.append((name, dtype, linears[name].shape))
        else:
            specs.append((name, linnet_dtype_of(arrays[name]), tuple(arrays[name].shape)))
    owner = {
        f"{p.removesuffix('.weight')}.{role}": p
        for p in grouped
        for role in ("qweight", "qzeros", "scales", "g_idx")
    }
    pending: dict[str, Array] = {}

    def companions(path: str) -> list[Array | None]:
        prefix = path.removesuffix(".weight")
        return [arrays.get(f"{prefix}.{role}") for role in ("scale", "zero", "order")]

    def load(name: str) -> Array:
        path = owner.get(name)
        if path is not None:
            if name not in pending:
                scale, zero, order = companions(path)
                assert scale is not None and zero is not None
                words = gptq_words(np.asarray(arrays[path]), scale, zero, order, v1=v1)
                prefix = path.removesuffix(".weight")
                words["scales"] = words["scales"].astype(np.float16)
                pending.update({f"{prefix}.{role}": v for role, v in words.items()})
            return pending.pop(name)
        if name in linears:
            scale, zero, order = companions(name)
            assert scale is not None
            weight = dequantized(linears[name].kind, arrays[name], scale, zero, order)
            return weight.astype(NUMPY_DTYPES[dtype])
        return arrays[name]

    quantization: dict[str, object] | None = None
    if grouped:
        quantization = {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": next(iter(sizes.values())),
            "desc_act": ordered,
            "sym": sym,
            "checkpoint_format": "gptq" if v1 else "gptq_v2",
            "true_sequential": True,
            "damp_percent": 0.01,
        }

    def stored(name: str) -> tuple[Path, int] | None:
        unchanged = name in arrays and name not in owner and name not in linears
        return file_range(arrays[name]) if unchanged else None

    return WeightPlan(specs, load, quantization, stored)


_BLOCKS = {"int8": "Int8Linear", "fp8": "Fp8Linear", "mxfp4": "Mxfp4Linear"}
