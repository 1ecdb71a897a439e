"""The examples as Flax NNX modules (`linnet.jax.load_nnx`) against the references of the
other JAX-backend tests.

01-linear (`torch.nn.Linear`), 02-attention (NumPy f64, both entries as methods),
03-tiny-transformer (the f64 PyTorch model) and, as slow checks, ViT, BERT and
CLIP (transformers' `ViTModel`, `BertModel`, `CLIPModel`); Llama and
GPT-2 (transformers' causal LMs): `__call__` logits within 1e-4 with the
same argmax, `nnx.state` paths equal to the checkpoint's parameter paths (and
the caches' state paths), and `prefill` + 8 `decode` steps through the
module's methods, the KV caches kept in its `StateVar`s, equal greedy
`generate(max_new_tokens=9)`. For Llama, `nnx.grad` of a cross-entropy
equals `jax.grad` through `load_source` for every parameter.
"""

# The Llama and GPT-2 fixtures are imported from their JAX tests; the tests take them by name.
# ruff: noqa: F811

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")

import test_bert as bert  # noqa: E402
import test_clip as clip  # noqa: E402
import test_small_examples as small  # noqa: E402
import test_vit as vit  # noqa: E402
from jax_backends import JaxNnxBackend  # noqa: E402
from test_gpt2 import SOURCE as GPT2  # noqa: E402
from test_jax_gpt2 import gpt2, prompt  # noqa: E402, F401
from test_jax_llama import NEW_TOKENS, generated, numpy_weights, reference  # noqa: E402, F401
from test_llama import (  # noqa: E402
    SIZES,
    assert_logits,
    demo,
    generics,
    reference_logits,
    tokens_of,
)
from test_llama import SOURCE as LLAMA  # noqa: E402
from vision_support import assert_close, read_weights  # noqa: E402

import linnet.jax as lj  # noqa: E402
from linnet.jax.flax_nnx import StateVar  # noqa: E402


def paths(module: Any, kind: type | None = None) -> set[str]:
    state = nnx.state(module) if kind is None else nnx.state(module, kind)
    return {".".join(str(p) for p in path) for path, _ in nnx.to_flat_state(state)}


# -- 01-linear, 02-attention, 03-tiny-transformer, ViT (slow) ---------------------------------


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_linear(tmp_path: Path, bias: bool) -> None:
    path = small.example_script("01-linear").make_weights(
        tmp_path, features_in=small.IN, features_out=small.OUT, bias=bias, seed=1
    )
    arrays = read_weights(path)
    module = lj.load_nnx(small.LINEAR, generics={"In": small.IN, "Out": small.OUT}, weights=path)
    assert paths(module) == paths(module, nnx.Param) == set(arrays)
    reference = torch.nn.Linear(small.IN, small.OUT, bias=bias)
    reference.load_state_dict(small.tensors(arrays), strict=True)
    rng = np.random.default_rng(2)
    for shape in [(small.IN,), (5, small.IN), (2, 3, small.IN)]:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            assert_close(module(x), reference(torch.from_numpy(x)), small.F32, f"linear {shape}")


def test_attention(tmp_path: Path) -> None:
    path = small.example_script("02-attention").make_weights(
        tmp_path, hidden=small.H, heads=small.HEADS, seed=3
    )
    f64 = {name: a.astype(np.float64) for name, a in read_weights(path).items()}
    module = lj.load_nnx(
        small.ATTENTION, generics={"H": small.H, "Heads": small.HEADS}, weights=path
    )
    assert paths(module) == set(f64)
    x = np.random.default_rng(4).standard_normal((2, 5, small.H)).astype(np.float32)
    x64 = x.astype(np.float64)
    assert_close(module(x), small.attention_f64(x64, f64, False), small.F32, "forward")
    assert_close(module.causal(x), small.attention_f64(x64, f64, True), small.F32, "causal")


def test_tiny_transformer(tmp_path: Path) -> None:
    g = small.TINY_GENERICS
    path = small.example_script("03-tiny-transformer").make_weights(tmp_path, seed=5, **g)
    reference = small.TinyTransformer(g["Vocab"], g["H"], g["Heads"], g["Inner"], g["Layers"])
    reference.load_state_dict(small.tensors(read_weights(path)), strict=True)
    reference = reference.double().eval()
    module = lj.load_nnx(small.TINY, generics=g, weights=path)
    assert paths(module) == set(read_weights(path))
    assert isinstance(module.layers, nnx.List) and len(module.layers) == g["Layers"]
    ids = np.random.default_rng(6).integers(0, g["Vocab"], (2, 7))
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids))
    assert_close(module(ids.astype(np.int32)), expected, small.TINY_TOLERANCE, "logits")


@pytest.mark.slow  # ~13 s; test_jax_examples.py runs ViT's generated source by default
def test_vit(tmp_path: Path) -> None:
    path = vit.write(tmp_path)
    reference = vit.reference(path, transformers.ViTModel, vit.vit_config())
    module = lj.load_nnx(vit.SOURCE, root="ViTModel", generics=vit.GENERICS, weights=path)
    x = vit.pixels(2, 0)
    last, pooled = module(x.numpy())
    with torch.no_grad():
        expected = reference(pixel_values=x)
    assert_close(last, expected.last_hidden_state, vit.TOLERANCE, "last_hidden_state")
    assert_close(pooled, expected.pooler_output, vit.TOLERANCE, "pooler_output")


# -- BERT and CLIP (slow: ~12-25 s each, as through load_source) ------------------------------


@pytest.mark.slow
def test_bert(tmp_path: Path) -> None:
    bert.example_script("make_weights").write(tmp_path)
    reference = transformers.BertModel.from_pretrained(tmp_path, attn_implementation="eager")
    module = lj.load_nnx(
        bert.SOURCE,
        generics=json.loads((tmp_path / "generics.json").read_text()),
        weights=tmp_path / "model.safetensors",
        bindings=bert.BINDINGS,
    )
    ids, types, mask = bert.padded_batch()
    inputs = [t.numpy() for t in (ids, types, mask)]
    with torch.no_grad():
        out = reference.eval()(
            input_ids=ids.long(), token_type_ids=types.long(), attention_mask=mask.long()
        )
    assert_close(module(*inputs), out.last_hidden_state, 1e-4, "last_hidden_state")
    assert_close(module.pooled(*inputs), out.pooler_output, 1e-4, "pooler_output")
    want = bert.mean_pool(out.last_hidden_state, mask)
    assert_close(module.embed(*inputs), want, 1e-4, "mean-pooled embedding")


@pytest.mark.slow
def test_clip(tmp_path: Path) -> None:
    path = clip.example_script("clip").make_weights(tmp_path, seed=11, **clip.GENERICS)
    reference = transformers.CLIPModel(clip.clip_config())
    state = {name: torch.from_numpy(a) for name, a in read_weights(path).items()}
    state["logit_scale"] = state["logit_scale"].reshape(())
    reference.load_state_dict(state, strict=True)
    reference.eval()
    module = lj.load_nnx(clip.SOURCE, generics=clip.GENERICS, weights=path)
    assert paths(module) == set(read_weights(path))
    ids, images = clip.token_ids(), clip.pixels(2)
    per_image, per_text, text_embeds, image_embeds = module(ids.numpy(), images.numpy())
    with torch.no_grad():
        expected = reference(input_ids=ids, pixel_values=images)
        tower = reference.text_model(input_ids=ids)
    assert_close(per_image, expected.logits_per_image, clip.TOLERANCE, "logits_per_image")
    assert_close(per_text, expected.logits_per_text, clip.TOLERANCE, "logits_per_text")
    assert_close(text_embeds, expected.text_embeds, clip.TOLERANCE, "text_embeds")
    assert_close(image_embeds, expected.image_embeds, clip.TOLERANCE, "image_embeds")
    last, pooled = module.encode_text(ids.numpy())
    assert_close(last, tower.last_hidden_state, clip.TOLERANCE, "text last_hidden_state")
    assert_close(pooled, tower.pooler_output, clip.TOLERANCE, "text pooler_output")


# -- Llama ------------------------------------------------------------------------------------


def test_llama_forward_and_paths(reference: Any) -> None:
    weights = numpy_weights(reference)
    module = lj.load_nnx(LLAMA, generics=generics(SIZES, batch=2, max_seq=32), weights=weights)
    assert paths(module, nnx.Param) == set(weights)
    assert "model.layers.0.self_attn.q_proj.weight" in weights
    caches = paths(module, StateVar)
    assert "model.layers.1.self_attn.v_cache" in caches
    assert paths(module) == set(weights) | caches
    tokens = tokens_of((3, 11), seed=1)
    assert_logits(np.asarray(module(tokens)), reference_logits(reference, tokens))


def test_llama_prefill_and_decode_equal_generate(
    reference: Any, generated: tuple[np.ndarray, np.ndarray]
) -> None:
    runner = JaxNnxBackend(LLAMA, generics(SIZES, batch=2, max_seq=32), numpy_weights(reference))
    prompt, expected = generated
    run = demo.greedy(runner, prompt, NEW_TOKENS, warm=False)
    np.testing.assert_array_equal(run.generated, expected)
    history = np.concatenate([prompt, expected], axis=1)
    assert_logits(run.chosen_from, reference_logits(reference, history)[:, 5 : 5 + NEW_TOKENS])
    cache = np.asarray(runner.module.model.layers[0].self_attn.k_cache[...])
    length = prompt.shape[1] + NEW_TOKENS - 1  # the last token was chosen, not yet decoded
    assert cache[:, :, :length].any() and not cache[:, :, length:].any()


@pytest.mark.slow  # ~20 s: the gradient's compile; tests/jax/test_nnx.py checks the same by default
def test_llama_nnx_grad_equals_jax_grad_through_load_source(reference: Any) -> None:
    import jax.numpy as jnp

    config = generics(SIZES, batch=2, max_seq=16)
    weights = numpy_weights(reference)
    tokens = tokens_of((2, 9), seed=21)
    targets = jnp.asarray(tokens_of((2, 9), seed=22)[..., None])

    def cross_entropy(logits: Any) -> Any:
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(log_probs, targets, -1))

    module = lj.load_nnx(LLAMA, generics=config, weights=weights)
    got = nnx.jit(nnx.grad(lambda m: cross_entropy(m(tokens))))(module)
    f = lj.load_source(LLAMA, generics=config, weights=weights)
    want = jax.jit(jax.grad(lambda p: cross_entropy(f.apply(p, tokens))))(f.parameters)
    flat = {".".join(str(p) for p in path): v[...] for path, v in nnx.to_flat_state(got)}
    assert set(flat) == set(want) == set(weights)
    for name, value in want.items():
        np.testing.assert_allclose(
            np.asarray(flat[name]), np.asarray(value), rtol=1e-6, atol=1e-6, err_msg=name
        )


# -- GPT-2 ------------------------------------------------------------------------------------


def test_gpt2_logits_paths_prefill_and_decode(gpt2: Any) -> None:
    weights, config, reference = gpt2
    runner = JaxNnxBackend(GPT2, config, weights)
    module = runner.module
    assert paths(module, nnx.Param) == set(read_weights(weights))
    ids = prompt(11, seed=0)
    with torch.no_grad():
        want = reference(torch.from_numpy(ids).long()).logits.numpy()
    got = np.asarray(module(ids))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    start = prompt(6, seed=2)
    with torch.no_grad():
        long = torch.from_numpy(start).long()
        out = reference.generate(long, attention_mask=torch.ones_like(long),
                                 max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)  # fmt: skip
    run = demo.greedy(runner, start, NEW_TOKENS, warm=False)
    np.testing.assert_array_equal(run.generated, out[:, 6:].numpy())
