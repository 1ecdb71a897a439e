"""`linnet.jax.export_linnet` and `import_stablehlo`: JAX functions and StableHLO text to Linnet.

Plain JAX functions are captured with `jax.export`, imported, and the source
runs on `linnet.torch` bound to the weights the import wrote (under the
parameter pytree's dotted paths); it must equal JAX itself (the independent
reference) to 1e-5. `linnet stablehlo` output of examples imports back with
the example's parameter paths and equals the StableHLO text compiled by XLA.
Loops, custom calls and other ops with no translation are refused at once,
each named with its source line, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax_import_support import RNG, STD, check, normal, run  # noqa: E402

from linnet.cli import main  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.jax import export_linnet, import_stablehlo  # noqa: E402
from linnet.sourcegen.refusals import ImportRefusedError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def layer_norm(x: Any, scale: Any, bias: Any) -> Any:
    d = x - jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(d * d, axis=-1, keepdims=True)
    return d / jnp.sqrt(var + 1e-5) * scale + bias


def mlp(params: Any, x: Any) -> Any:
    h = x
    for layer in params["layers"]:
        h = jax.nn.gelu(h @ layer["w"] + layer["b"])
    norm = params["norm"]
    return jax.nn.softmax(layer_norm(h, norm["scale"], norm["bias"]), axis=-1)


def mlp_params() -> dict[str, Any]:
    return {
        "layers": [{"w": normal(8, 8), "b": normal(8)}, {"w": normal(8, 8), "b": normal(8)}],
        "norm": {"scale": normal(8), "bias": normal(8)},
    }


def test_mlp_with_a_params_dict(tmp_path: Path) -> None:
    result = check(mlp, mlp_params(), (normal(2, 3, 8),), tmp_path)
    assert set(result.parameters) == {
        "layers.0.w",
        "layers.0.b",
        "layers.1.w",
        "layers.1.b",
        "norm.scale",
        "norm.bias",
    }
    text = "\n".join(result.notes)
    for recovered in ("layer_norm", "softmax", "gelu"):
        assert f"recovered `{recovered}`" in text, result.notes
    assert "layer_norm(" in result.source and "softmax(" in result.source
    assert "sub layers: [" in result.source  # the list became an array of blocks


def test_activations_and_norms_recovered(tmp_path: Path) -> None:
    def fn(p: Any, x: Any) -> Any:
        rms = x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * p["g"]
        return (
            jax.nn.softmax(x, axis=0),
            jax.nn.silu(x),
            jax.nn.sigmoid(x),
            jax.nn.gelu(x, approximate=False),
            rms,
        )

    result = check(fn, {"g": normal(6)}, (normal(4, 6),), tmp_path)
    text = "\n".join(result.notes)
    for recovered in ("softmax", "silu", "sigmoid", "gelu_erf", "rms_norm", "erfc"):
        assert f"recovered `{recovered}`" in text, result.notes
    # Softmax over the first axis: the std call over the last, between transposes.
    assert "softmax(permute(x, [1, 0]))" in result.source
    assert "sigmoid(x)" in result.source and "rms_norm(x, g" in result.source


def test_vmapped_function_and_lookup(tmp_path: Path) -> None:
    def one(p: Any, ids: Any) -> Any:
        rows = p["table"][ids]
        return jnp.tanh(rows @ p["proj"]).sum(axis=0)

    def fn(p: Any, ids: Any) -> Any:
        return jax.vmap(lambda i: one(p, i))(ids)

    params = {"table": normal(10, 4), "proj": normal(4, 5)}
    ids = RNG.integers(0, 10, (3, 7)).astype(np.int32)
    result = check(fn, params, (ids,), tmp_path)
    assert "table[" in result.source  # the row gather reads as a lookup


def test_cumsum_concat_slice_where_and_argmax(tmp_path: Path) -> None:
    def fn(p: Any, x: Any) -> Any:
        c = jnp.cumsum(x, axis=1)
        y = jnp.concatenate([x[:, :2], c[:, 1:3]], axis=1)
        best = jnp.argmax(x, axis=-1), jnp.argmin(x @ p["s"][:, None], axis=0)
        return jnp.where(y > 0, y * p["s"], -y), jnp.max(x, axis=0), x.T @ x, *best

    check(fn, {"s": normal(4)}, (normal(5, 4),), tmp_path)


def test_flax_nnx_mlp_and_transformer_block(tmp_path: Path) -> None:
    nnx = pytest.importorskip("flax.nnx")

    class Block(nnx.Module):  # type: ignore[misc]
        def __init__(self, rngs: Any) -> None:
            self.norm1 = nnx.LayerNorm(8, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(num_heads=2, in_features=8, decode=False, rngs=rngs)
            self.norm2 = nnx.RMSNorm(8, rngs=rngs)
            self.up = nnx.Linear(8, 16, rngs=rngs)
            self.down = nnx.Linear(16, 8, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            h = self.norm1(x)
            mask = nnx.make_causal_mask(jnp.ones(x.shape[:2]))
            x = x + self.attn(h, mask=mask)
            return x + self.down(nnx.silu(self.up(self.norm2(x))))

    class Mlp(nnx.Module):  # type: ignore[misc]
        def __init__(self, rngs: Any) -> None:
            self.fc1 = nnx.Linear(8, 16, rngs=rngs)
            self.fc2 = nnx.Linear(16, 4, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return jax.nn.softmax(self.fc2(nnx.gelu(self.fc1(x))))

    for name, model, x in (
        ("mlp", Mlp(nnx.Rngs(0)), normal(2, 8)),
        ("block", Block(nnx.Rngs(1)), normal(2, 5, 8)),
    ):
        graphdef, state = nnx.split(model)

        def fn(p: Any, x: Any, graphdef: Any = graphdef) -> Any:
            return nnx.merge(graphdef, p)(x)

        result = check(fn, state, (x,), tmp_path / name)
        # Variables bind by their module paths (`fc1.kernel`), not `fc1.kernel.value`.
        assert "fc1.kernel" in result.parameters.values() or name == "block"
        assert not any(p.endswith(".value") for p in result.parameters.values())


def test_convolutions_and_pooling_in_any_layout(tmp_path: Path) -> None:
    nnx = pytest.importorskip("flax.nnx")

    class Cnn(nnx.Module):  # type: ignore[misc]
        def __init__(self, rngs: Any) -> None:
            self.c1 = nnx.Conv(3, 4, (3, 3), strides=2, rngs=rngs)
            self.c2 = nnx.Conv(4, 4, (3, 3), padding="VALID", feature_group_count=2, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return self.c2(nnx.relu(self.c1(x))).mean(axis=(1, 2))

    graphdef, state = nnx.split(Cnn(nnx.Rngs(0)))
    result = check(
        lambda p, x: nnx.merge(graphdef, p)(x), state, (normal(2, 9, 9, 3),), tmp_path / "nhwc"
    )
    assert "conv2d" in result.source

    def dilated(p: Any, x: Any) -> Any:  # NCHW / OIHW, asymmetric padding, dilation
        return lax.conv_general_dilated(x, p["k"], (1, 1), ((1, 1), (2, 0)), rhs_dilation=(2, 1))

    check(dilated, {"k": normal(4, 3, 3, 3)}, (normal(1, 3, 8, 8),), tmp_path / "nchw")

    def pools(p: Any, x: Any) -> Any:  # reduce_window: max and sum pooling, NHWC
        return (
            nnx.max_pool(x, (2, 2), strides=(2, 2)),
            nnx.avg_pool(x, (3, 3), strides=(1, 1)),
            nnx.max_pool(x, (3, 3), strides=(2, 2), padding="SAME"),
        )

    result = check(pools, {}, (normal(2, 8, 8, 3),), tmp_path / "pool")
    assert "max_pool2d" in result.source


@pytest.mark.parametrize("unroll", [True, False])
def test_scan_and_fori_loop(tmp_path: Path, unroll: bool) -> None:
    """Counted loops: unrolled by JAX, or a `stablehlo.while` the import keeps as a
    runtime `for` (tests/jax/test_import_loops.py has more)."""

    def scanned(p: Any, x: Any) -> Any:
        step = lambda c, row: (c + row * p["w"], c * 2.0)  # noqa: E731
        return lax.scan(step, jnp.zeros(4), x, unroll=unroll)

    def looped(p: Any, x: Any) -> Any:
        return lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c * p["w"] + 1.0), x, unroll=unroll)

    params = {"w": normal(4)}
    result = check(scanned, params, (normal(3, 4),), tmp_path / "scan")
    assert unroll or any("kept as a runtime `for` scan" in n for n in result.notes)
    result = check(looped, params, (normal(3, 4),), tmp_path / "fori")
    assert result.source.count("tanh(") == (3 if unroll else 1)


def test_data_dependent_loops_and_sorting_are_refused(tmp_path: Path) -> None:
    def grow(p: Any, x: Any) -> Any:
        return lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c * p["w"], x)

    def rank(p: Any, x: Any) -> Any:  # lexicographic sorts: not imported
        return lax.sort((x * p["w"], x), num_keys=2), lax.sort((x, x * 2.0), num_keys=2)

    folder = tmp_path / "out"
    messages = []
    for fn in (grow, rank):
        with pytest.raises(ImportRefusedError) as err:
            export_linnet(
                fn, {"w": normal(4)}, (normal(4),), output=folder / "m.linnet", weights=folder
            )
        messages.append(str(err.value))
    assert "(Loop) at test_import_stablehlo.py:" in messages[0], messages[0]
    assert "the loop condition must be known at import time" in messages[0], messages[0]
    assert "stablehlo.sort (2)" in messages[1], messages[1]  # every such op, at once
    assert not folder.exists()


def test_dynamic_shapes_are_refused(tmp_path: Path) -> None:
    (batch,) = jax.export.symbolic_shape("b")
    params = {"w": normal(4, 3)}
    spec = jax.ShapeDtypeStruct((batch, 4), jnp.float32)
    text = jax.export.export(jax.jit(lambda p, x: x @ p["w"]))(params, spec).mlir_module()
    with pytest.raises(ImportRefusedError, match=r"input `\w+` has a dynamic shape"):
        import_stablehlo(text, params, output=tmp_path / "m.linnet")
    assert not (tmp_path / "m.linnet").exists()


def test_bad_params_are_named(tmp_path: Path) -> None:
    text = jax.export.export(jax.jit(mlp))(mlp_params(), normal(1, 8)).mlir_module()
    wrong = mlp_params()
    wrong["norm"]["scale"] = normal(3)
    with pytest.raises(LinnetError, match=r"norm\.scale"):
        import_stablehlo(text, wrong, output=tmp_path / "m.linnet")
    assert not (tmp_path / "m.linnet").exists()


# ---------------------------------------------------------------- linnet stablehlo round trips


def stablehlo_text(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> str:
    status = main(
        ["--no-color", "stablehlo", "--std", str(STD), "--optionals", "present", *argv, str(path)]
    )
    out, err = capsys.readouterr()
    assert (status, err) == (0, ""), err
    return out


def compiled(text: str) -> Any:
    client = jax.devices("cpu")[0].client
    return client.compile_and_load(text, jax.devices("cpu")[:1])


LLAMA_SIZES = [
    "Vocab=11",
    "H=8",
    "Heads=2",
    "KvHeads=1",
    "Inner=16",
    "Layers=2",
    "Batch=1",
    "MaxSeq=8",
    "B=2",
    "S=5",
]
CLIP_SIZES = [
    "Vocab=11",
    "TextH=4",
    "TextHeads=2",
    "TextInner=8",
    "TextLayers=2",
    "MaxPos=16",
    "Channels=3",
    "VisionH=4",
    "VisionHeads=2",
    "VisionInner=8",
    "VisionLayers=2",
    "Patch=2",
    "Grid=2",
    "Proj=4",
]
ENCODER_SIZES = ["Vocab=11", "H=8", "NumHeads=2", "Inner=16", "Layers=2", "B=2", "S=5"]
VIT_SIZES = ["Channels=3", "H=8", "Heads=2", "Inner=16", "Layers=2", "Patch=2", "Grid=2", "B=2"]


def binds(sizes: list[str]) -> list[str]:
    return [a for size in sizes for a in ("--bind", size)]


ROUND_TRIPS = {
    "01-linear": ("01-linear", ["--root", "Linear", *binds(["In=4", "Out=3", "S=2,5"])]),
    "01-llama": ("01-llama", ["--entry", "forward", *binds([*LLAMA_SIZES, "T=f32"])]),
    "02-attention": (
        "02-attention",
        ["--entry", "causal", *binds(["H=8", "Heads=2", "B=2", "S=5"])],
    ),
    "03-tiny-transformer": (
        "03-tiny-transformer",
        binds(["Vocab=11", "H=8", "Heads=2", "Inner=16", "Layers=2", "B=2", "S=5"]),
    ),
    "tiny": ("tiny", binds(["H=8", "Inner=16", "Depth=2", "Classes=3", "B=2"])),
    "gpt2": (
        "gpt2",
        [
            "--entry",
            "forward",
            *binds(
                ["Batch=1", "Vocab=11", "H=8", "Heads=2", "Layers=2", "Positions=8", "B=2", "S=5"]
            ),
        ],
    ),
    "bert": ("bert", binds(ENCODER_SIZES)),
    "vit": ("vit", ["--root", "ViTModel", *binds(VIT_SIZES)]),
    "clip-text": ("clip", ["--entry", "encode_text", *binds([*CLIP_SIZES, "B=2", "S=5"])]),
    "clip-image": ("clip", ["--entry", "encode_image", *binds([*CLIP_SIZES, "I=2"])]),
    "phi3": ("phi3", ["--entry", "forward", *binds(LLAMA_SIZES)]),
    "qwen2": ("qwen2", ["--entry", "forward", *binds(LLAMA_SIZES)]),
    "qwen3": ("qwen3", ["--entry", "forward", *binds(LLAMA_SIZES)]),
}


RECOVERED = {
    "01-llama": "rms_norm",
    "03-tiny-transformer": "rms_norm",
    "qwen3": "rms_norm",
    "bert": "layer_norm",
    "gpt2": "layer_norm",
    "vit": "softmax",
}
"""A std op each example's import must read back (the norms Linnet's lowering spells out)."""


def example_array(dtype: str | None, shape: tuple[int, ...]) -> np.ndarray:
    if dtype in ("i32", "i64"):
        return RNG.integers(0, 2, shape).astype(np.int32 if dtype == "i32" else np.int64)
    return (0.3 * RNG.standard_normal(shape)).astype(np.float32)


@pytest.mark.parametrize("example", sorted(ROUND_TRIPS))
def test_linnet_stablehlo_imports_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, example: str
) -> None:
    """Every example entry printed by `linnet stablehlo` imports back with its parameter
    paths and equals the text itself compiled by XLA (1e-5)."""
    from linnet.jax.dtypes import x64_scope
    from linnet.jax.importer.mlir import functions, parse_module, tensor_type
    from linnet.jax.stablehlo import parse_contract

    folder, argv = ROUND_TRIPS[example]
    text = stablehlo_text(capsys, ROOT / "examples" / folder / "src/lib.linnet", *argv)
    module = parse_module(text)
    contract = parse_contract(module)
    formals = functions(module)["main"].regions[0].blocks[0].arguments
    types = [tensor_type(a.type) for a in formals]
    arrays = [example_array(*t) for t in types if t is not None]
    args = arrays[: len(contract.inputs)]
    params = dict(zip(contract.params, arrays[len(contract.inputs) :], strict=True))
    result = import_stablehlo(
        text, params, output=tmp_path / "model.linnet", weights=tmp_path / "weights"
    )
    # Every float parameter binds by its path; an integer buffer (BERT's position ids)
    # the source reads at fixed positions is folded into the source as constants.
    floats = {p for p, a in params.items() if a.dtype == np.float32}
    assert floats <= set(result.parameters.values()) <= set(contract.params)
    assert all(
        path == stored or result.bindings[path] == stored
        for path, stored in result.parameters.items()
    )
    assert result.entry == contract.entry
    if example in RECOVERED:
        assert f"recovered `{RECOVERED[example]}`" in "\n".join(result.notes), result.notes
    with x64_scope(True):
        expected = compiled(text).execute([jax.device_put(a) for a in arrays])
    got = run(result, tuple(args))
    for g, e in zip(got, expected[: contract.results], strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-5, atol=1e-5)
