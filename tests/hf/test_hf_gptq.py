"""`linnet.hf.export` of an `Int4GroupLinear` model: a GPTQ-format folder.

The quantised Llama example (`examples/01-llama/quantised.py`, int4 groups of
32) is exported and checked three ways:

- against the GPTQ format definition, independently of our code: a NumPy
  dequantiser written here from AutoGPTQ's layout (`qweight` packed along the
  inputs, v1 `qzeros` holding the zero point minus one, `scales[g_idx]`) gives
  exactly the weights the std body (`dequantize_int4_groups`, NumPy reference
  interpreter, columns put back by `order`) gives for the exported model;
- round trip: `import_quantized` reads the exported folder back to the same
  bytes we exported, and a GPTQ folder built from the format (test_gptq_awq,
  act-order included) survives import then export byte for byte;
- transformers itself (slow; skipped unless `gptqmodel` and `optimum` import:
  they do not install into the shared venv, gptqmodel pins torch >= 2.14, so
  run with `PYTHONPATH=<a side --target install>`, made with `pip install --no-deps
  --target DIR gptqmodel==7.7.0 optimum==2.3.0 device-smi==0.5.7 pypcre==0.6.4
  tokenicer==0.0.14 logbar==0.4.15 torchao==0.18.0 defuser==0.0.28
  pillow==13.0.0`; its CPU kernel compiles on first use): `from_pretrained` loads
  the folder through GPTQModel's CPU kernel, each quantised module's own
  `dequantize_weight()` equals ours rounded to its f16 output, and the logits
  equal linnet.torch's up to the kernel's bf16 activations (a gap far below
  the quantisation error itself).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from quant.test_gptq_awq import DEQUANTIZE, write_folder  # noqa: E402
from quant.test_quantised_llama import GENERICS, GROUP, _module  # noqa: E402
from stdlib.stdlib_support import StdCases  # noqa: E402

import linnet.hf  # noqa: E402
import linnet.torch  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.quant import import_quantized, quantize_checkpoint  # noqa: E402
from linnet.weights import read_safetensors, save_safetensors  # noqa: E402

Array = np.ndarray[Any, Any]
ROLES = ("qweight", "qzeros", "scales", "g_idx")


def quantised_model(
    root: Path, *, lm_head: bool, seed: int = 3
) -> tuple[Path, Path, dict[str, Array]]:
    """(source, quantised checkpoint, float weights) of the int4 Llama example; the scales
    are rounded to f16 values (kept f32, the model's T), so the GPTQ export holds them exactly."""
    floats = _module("make_weights").make_weights(GENERICS, seed=seed)
    save_safetensors(floats, root / "float.safetensors")
    quantised = _module("quantised")
    patterns = quantised.PATTERNS if lm_head else ("*_proj.weight",)
    quantize_checkpoint(
        root / "float.safetensors", root / "q.safetensors", patterns=patterns, group=GROUP
    )
    arrays = read_safetensors(root / "q.safetensors")
    for name in [n for n in arrays if n.endswith(".scale")]:
        arrays[name] = arrays[name].astype(np.float16).astype(np.float32)
    save_safetensors(arrays, root / "q.safetensors")
    source = root / "q.linnet"
    source.write_text(quantised.quantised_source(4, GROUP, lm_head=lm_head))
    return source, root / "q.safetensors", floats


def gptq_reference(tensors: dict[str, Array], prefix: str, v1: bool) -> Array:
    """The weight `[Out, In]` of one GPTQ linear, from the format's definition, in f64."""
    qweight, qzeros = tensors[f"{prefix}.qweight"], tensors[f"{prefix}.qzeros"]
    scales, g_idx = tensors[f"{prefix}.scales"], tensors[f"{prefix}.g_idx"]
    words = qweight.view(np.uint32)
    shifts = np.arange(8, dtype=np.uint32) * 4
    q = ((words[:, None, :] >> shifts[None, :, None]) & 15).reshape(-1, words.shape[1])
    zwords = qzeros.view(np.uint32)
    z = ((zwords[:, :, None] >> shifts[None, None, :]) & 15).reshape(zwords.shape[0], -1)
    z = z[:, : scales.shape[1]].astype(np.float64) + (1 if v1 else 0)
    weight = (q - z[g_idx]) * scales[g_idx].astype(np.float64)  # [In, Out]
    result: Array = weight.T
    return result


def std_weight(ours: dict[str, Array], prefix: str) -> Array:
    """The std body's weight `[Out, In]` (inputs in their own order)."""
    inputs = [ours[f"{prefix}.{role}"] for role in ("weight", "scale", "zero")]
    (got,) = StdCases(DEQUANTIZE).run("groups", inputs)["numpy"]
    order = ours.get(f"{prefix}.order")
    weight = np.empty_like(got)
    weight[:, order if order is not None else slice(None)] = got
    return weight


def test_export_writes_gptq_that_reads_back_and_dequantises_as_the_format_says(
    tmp_path: Path,
) -> None:
    source, checkpoint, _ = quantised_model(tmp_path, lm_head=True)
    result = linnet.hf.export(source, tmp_path / "hf", generics=GENERICS, weights=checkpoint)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    quant = config["quantization_config"]
    assert quant["quant_method"] == "gptq" and quant["bits"] == 4
    assert quant["group_size"] == GROUP and quant["desc_act"] is False
    assert quant["checkpoint_format"] == "gptq" and quant["sym"] is False
    stored = read_safetensors(tmp_path / "hf" / result.weight_files[0])
    ours = read_safetensors(checkpoint)
    prefixes = sorted(n.removesuffix(".weight") for n in ours if n.endswith("_proj.weight"))
    assert len(prefixes) == 7 * int(GENERICS["Layers"])  # type: ignore[call-overload]
    for prefix in prefixes:
        assert [stored[f"{prefix}.{r}"].dtype.name for r in ROLES] == [
            "int32",
            "int32",
            "float16",
            "int32",
        ]
        assert f"{prefix}.weight" not in stored
        expected = gptq_reference(stored, prefix, v1=True)
        np.testing.assert_array_equal(std_weight(ours, prefix), expected.astype(np.float32))
    # lm_head stays a float linear in transformers' GPTQ models: its exact dequantised weight
    head = stored["lm_head.weight"]
    assert head.dtype == np.float32
    np.testing.assert_array_equal(head, std_weight(ours, "lm_head"))
    # import_quantized reads the folder back to the bytes exported
    import_quantized(tmp_path / "hf", tmp_path / "back.safetensors", dtype="f32")
    back = read_safetensors(tmp_path / "back.safetensors")
    for prefix in prefixes:
        for role in ("weight", "scale", "zero"):
            name = f"{prefix}.{role}"
            assert back[name].dtype == ours[name].dtype
            assert back[name].tobytes() == ours[name].tobytes(), name


@pytest.mark.parametrize("kind", ["gptq", "gptq-act-order"])
def test_a_gptq_folder_survives_import_then_export(tmp_path: Path, kind: str) -> None:
    """GPTQ packed from the format's definition (test_gptq_awq) -> our layout -> GPTQ again:
    the same qweight, qzeros, scales and g_idx, byte for byte."""
    write_folder(tmp_path / "in", kind, seed=5)
    import_quantized(tmp_path / "in", tmp_path / "ours.safetensors", dtype="f32")
    source = tmp_path / "q.linnet"
    source.write_text(_module("quantised").quantised_source(4, GROUP, lm_head=False))
    linnet.hf.export(
        source, tmp_path / "out", generics=GENERICS, weights=tmp_path / "ours.safetensors"
    )
    original = read_safetensors(tmp_path / "in" / "model.safetensors")
    exported = read_safetensors(tmp_path / "out" / "model.safetensors")
    assert set(exported) == set(original)
    for name, value in original.items():
        assert exported[name].dtype == value.dtype, name
        np.testing.assert_array_equal(exported[name], value, err_msg=name)
    quant = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    assert quant["desc_act"] is (kind == "gptq-act-order")


def test_zero_point_zero_is_written_as_gptq_v2(tmp_path: Path) -> None:
    source, checkpoint, _ = quantised_model(tmp_path, lm_head=False)
    arrays = read_safetensors(checkpoint)
    name = "model.layers.1.mlp.up_proj.zero"
    arrays[name] = arrays[name].copy()
    arrays[name][3, 1] = 0
    save_safetensors(arrays, checkpoint)
    linnet.hf.export(source, tmp_path / "hf", generics=GENERICS, weights=checkpoint)
    quant = json.loads((tmp_path / "hf" / "config.json").read_text())["quantization_config"]
    assert quant["checkpoint_format"] == "gptq_v2"
    stored = read_safetensors(tmp_path / "hf" / "model.safetensors")
    prefix = name.removesuffix(".zero")
    expected = gptq_reference(stored, prefix, v1=False)
    np.testing.assert_array_equal(std_weight(arrays, prefix), expected.astype(np.float32))
    import_quantized(tmp_path / "hf", tmp_path / "back.safetensors", dtype="f32")
    assert read_safetensors(tmp_path / "back.safetensors")[name][3, 1] == 0


def test_refusals(tmp_path: Path) -> None:
    floats = _module("make_weights").make_weights(GENERICS, seed=1)
    save_safetensors(floats, tmp_path / "float.safetensors")
    quantised = _module("quantised")
    quantize_checkpoint(tmp_path / "float.safetensors", tmp_path / "q8.safetensors",
                        patterns=("*_proj.weight",), bits=8)  # fmt: skip
    source = tmp_path / "q8.linnet"
    source.write_text(quantised.quantised_source(8, lm_head=False))
    with pytest.raises(LinnetError, match="is a Int8Linear; the layers of a quantised folder"):
        linnet.hf.export(
            source, tmp_path / "a", generics=GENERICS, weights=tmp_path / "q8.safetensors"
        )
    assert not (tmp_path / "a" / "model.safetensors").exists()
    # a float linear among quantised ones inside the layers
    quantize_checkpoint(tmp_path / "float.safetensors", tmp_path / "q4.safetensors",
                        patterns=("*.self_attn.*_proj.weight",), group=GROUP)  # fmt: skip
    text = quantised.quantised_source(4, GROUP, lm_head=False)
    mlp = text.index("pub block LlamaMlp")
    end = text.index("\n}\n", mlp)
    plain = text[mlp:end].replace(f"Int4GroupLinear<H, Inner, {GROUP}, T>", "Linear<H, Inner, T>")
    plain = plain.replace(f"Int4GroupLinear<Inner, H, {GROUP}, T>", "Linear<Inner, H, T>")
    mixed = tmp_path / "mixed.linnet"
    mixed.write_text(text[:mlp] + plain + text[end:])
    with pytest.raises(LinnetError, match="float linear among Int4GroupLinear ones"):
        linnet.hf.export(
            mixed, tmp_path / "b", generics=GENERICS, weights=tmp_path / "q4.safetensors"
        )


def _gptqmodel_loads() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("gptqmodel", "optimum"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rtn", "gptq-act-order"])
def test_transformers_loads_the_exported_folder(tmp_path: Path, kind: str) -> None:
    if not _gptqmodel_loads():
        pytest.skip("gptqmodel and optimum are not importable (transformers' GPTQ loader)")
    from linnet.gguf.quantised import dequantized

    if kind == "rtn":  # lm_head quantised too: written dequantised, a float linear there
        source, checkpoint, floats = quantised_model(tmp_path, lm_head=True)
    else:
        write_folder(tmp_path / "in", kind, seed=5)
        checkpoint = tmp_path / "ours.safetensors"
        import_quantized(tmp_path / "in", checkpoint, dtype="f32")
        source = tmp_path / "q.linnet"
        source.write_text(_module("quantised").quantised_source(4, GROUP, lm_head=False))
    linnet.hf.export(source, tmp_path / "hf", generics=GENERICS, weights=checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    ours = read_safetensors(checkpoint)
    for prefix, module in model.named_modules():
        if not prefix.endswith("_proj"):
            continue
        assert hasattr(module, "qweight"), f"{prefix} is a {type(module).__name__}"
        theirs = module.dequantize_weight().float().numpy().T  # [Out, In]
        parts = [ours.get(f"{prefix}.{r}") for r in ("weight", "scale", "zero", "order")]
        mine = dequantized("int4_groups", *parts)
        np.testing.assert_array_equal(theirs, mine.astype(module.dequantize_weight().numpy().dtype))
    if kind == "rtn":
        head = [ours[f"lm_head.{r}"] for r in ("weight", "scale", "zero")]
        exact = dequantized("int4_groups", *head, None)
        np.testing.assert_array_equal(model.lm_head.weight.detach().numpy(), exact)
    tokens = np.random.default_rng(4).integers(0, 64, (1, 9)).astype(np.int32)
    module = linnet.torch.load(source, generics=GENERICS, weights=checkpoint)
    with torch.no_grad():
        expected = module(torch.from_numpy(tokens)).numpy()
        got = model(torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy()
    gap = float(np.abs(got - expected).max())
    assert gap < 5e-3 * max(1.0, float(np.abs(expected).max())), gap
    if kind == "rtn":  # the gap is the kernel's bf16 activations, not the weights
        floats_module = linnet.torch.load(
            Path(_module("quantised").SOURCE), generics=GENERICS, weights=floats
        )
        with torch.no_grad():
            exact = floats_module(torch.from_numpy(tokens)).numpy()
        assert gap < float(np.abs(exact - expected).max()) / 50
