"""`bind_weights` (weights.py, language.md 12.8-12.9) end to end.

Checkpoints are written by the reference `safetensors` package (NumPy and
PyTorch writers); dtype conversions are compared with PyTorch's own casts.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from linnet.errors import LinnetError
from linnet.weights import (
    BoundWeights,
    Checkpoint,
    StoredTensor,
    TensorSpec,
    bind_weights,
    open_checkpoint,
)

F32 = np.float32


def _llama_like(folder: Path, layers: int = 2) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(10, 4, generator=gen).bfloat16()}
    for i in range(layers):
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = torch.randn(
            4, 4, generator=gen
        ).bfloat16()
        tensors[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(4).bfloat16()
    tensors["model.norm.weight"] = torch.ones(4).bfloat16()
    safetensors.torch.save_file(tensors, str(folder / "model.safetensors"))
    return tensors


def _llama_specs(layers: int = 2) -> dict[str, TensorSpec]:
    specs = {"embed.weight": TensorSpec((10, 4), "bf16"), "norm.weight": TensorSpec((4,), "bf16")}
    for i in range(layers):
        specs[f"layers.{i}.attn.q.weight"] = TensorSpec((4, 4), "bf16")
        specs[f"layers.{i}.norm.weight"] = TensorSpec((4,), "bf16")
    specs["head.weight"] = TensorSpec((10, 4), "bf16")  # tied to the embedding
    return specs


LLAMA_BINDINGS = {
    "embed.weight": "model.embed_tokens.weight",
    "head.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "layers.{i}.attn.q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.norm.weight": "model.layers.{i}.input_layernorm.weight",
}


def _bits(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()


def test_binds_torch_bf16_checkpoint_with_placeholders_and_tied_weights(tmp_path: Path) -> None:
    stored = _llama_like(tmp_path)
    bound = bind_weights(_llama_specs(), tmp_path / "model.safetensors", bindings=LLAMA_BINDINGS)
    assert set(bound.arrays) == set(_llama_specs())
    for path, name in bound.names.items():
        assert bound.arrays[path].dtype == ml_dtypes.bfloat16
        assert _bits(bound.arrays[path]) == stored[name].view(torch.int16).numpy().tobytes()
    assert bound.names["layers.1.attn.q.weight"] == "model.layers.1.self_attn.q_proj.weight"
    # Tied: both paths read the same memory-mapped bytes, with no copy made.
    assert np.shares_memory(bound.arrays["head.weight"], bound.arrays["embed.weight"])
    assert not bound.arrays["embed.weight"].flags.owndata
    assert bound.present == frozenset() and bound.groups == frozenset()


def test_bindings_json_next_to_the_checkpoint_is_used(tmp_path: Path) -> None:
    _llama_like(tmp_path)
    (tmp_path / "bindings.json").write_text(json.dumps(LLAMA_BINDINGS))
    bound = bind_weights(_llama_specs(), tmp_path)
    assert bound.names["embed.weight"] == "model.embed_tokens.weight"
    # An explicit mapping takes the place of the file.
    with pytest.raises(LinnetError, match=r"missing: `norm\.weight`"):
        bind_weights(_llama_specs(), tmp_path, bindings={"embed.weight": "x"})


class _CountingCheckpoint(Checkpoint):
    loads = 0

    def load(self, name: str) -> np.ndarray:
        type(self).loads += 1
        return super().load(name)


def test_every_problem_is_reported_at_once_before_loading(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    safetensors.torch.save_file(
        {
            "model.layers.0.self_attn.q_proj.weight": torch.zeros(4, 5),  # wrong shape
            "model.layers.1.self_attn.q_proj.weight": torch.zeros(4, 4, dtype=torch.float16),
            "model.layers.0.input_layernorm.weight": torch.zeros(4, dtype=torch.int32),
            "model.layers.1.input_layernorm.weight": torch.zeros(4, dtype=torch.float8_e5m2),
            "model.norm.weight": torch.zeros(4, dtype=torch.bfloat16),
            "stray.tensor": torch.zeros(1),
            "adapter.b": torch.zeros(4, dtype=torch.bfloat16),
        },
        str(path),
    )
    specs = _llama_specs()
    specs["adapter.a"] = TensorSpec((4,), "bf16", group="adapter")
    specs["adapter.b"] = TensorSpec((4,), "bf16", group="adapter")
    bindings = {**LLAMA_BINDINGS, "unused.{i}.x": "nothing.{i}"}
    base = open_checkpoint(path)
    counting = _CountingCheckpoint(base.label, base.tensors, base.load, base.folder)
    with pytest.raises(LinnetError) as info:
        bind_weights(specs, counting, bindings=bindings)
    assert _CountingCheckpoint.loads == 0  # nothing was read: headers only
    message = str(info.value)
    expected = [
        f"weights from {path} do not match the model (10 problems)",
        "missing: `embed.weight` (checkpoint name `model.embed_tokens.weight`)",
        "missing: `head.weight` (checkpoint name `model.embed_tokens.weight`)",
        "wrong shape: `layers.0.attn.q.weight` (checkpoint name "
        f"`model.layers.0.self_attn.q_proj.weight` in {path}): stored [4, 5], declared [4, 4]",
        "wrong dtype: `layers.0.attn.q.weight`",
        "stored f32, declared bf16; pass cast_dtype=True to convert",
        "wrong dtype: `layers.1.attn.q.weight`",
        "wrong dtype: `layers.0.norm.weight` (checkpoint name "
        f"`model.layers.0.input_layernorm.weight` in {path}): stored i32, declared bf16; "
        "cast_dtype converts only between floats or between integers",
        "unsupported dtype: `layers.1.norm.weight`",
        "stored F8_E5M2, declared bf16",
        "incomplete optional sub `adapter`: `adapter.a` (checkpoint name `adapter.a`) missing "
        "while `adapter.b` stored",
        f"unexpected tensor `stray.tensor` in {path}: no parameter path binds it",
        "unused binding: key `unused.{i}.x` of bindings matches no parameter path",
    ]
    for fragment in expected:
        assert fragment in message, fragment
    # With cast_dtype and strict=False only the problems that remain are listed.
    with pytest.raises(LinnetError) as info:
        bind_weights(specs, path, bindings=bindings, cast_dtype=True, strict=False)
    message = str(info.value)
    assert "(5 problems)" in message
    assert "stored f32" not in message and "stray" not in message and "adapter" not in message


def test_optional_params() -> None:
    specs = {
        "w": TensorSpec((2, 2), "f32"),
        "b": TensorSpec((2,), "f32", optional=True),
        "scale": TensorSpec((2,), "f32", optional=True),
    }
    arrays = {"w": np.eye(2, dtype=F32), "b": np.ones(2, F32)}
    bound = bind_weights(specs, arrays)
    assert set(bound.arrays) == {"w", "b"} and bound.present == {"b"}
    assert bound.arrays["w"] is arrays["w"]
    with pytest.raises(LinnetError, match=r"wrong shape: `b` \(checkpoint name `b`\)"):
        bind_weights(specs, {**arrays, "b": np.ones(3, F32)})


def _sub_specs() -> dict[str, TensorSpec]:
    """A Tower (12.4) with an optional `extra` sub that holds a nested optional `inner`."""
    return {
        "stem.gain": TensorSpec((3,), "f32"),
        "extra.gain": TensorSpec((3,), "f32", group="extra"),
        "extra.bias": TensorSpec((3,), "f32", optional=True, group="extra"),
        "extra.inner.gain": TensorSpec((3,), "f32", group="extra.inner"),
        "layers.1.adapter.w": TensorSpec((3,), "f32", group="layers.1.adapter"),
    }


def test_optional_subs_present_iff_all_mandatory_tensors_are() -> None:
    one = np.ones(3, F32)
    bound = bind_weights(_sub_specs(), {"stem.gain": one})
    assert set(bound.arrays) == {"stem.gain"} and bound.present_groups == frozenset()
    assert not bound.sub_present("extra") and not bound.sub_present("extra.inner")

    bound = bind_weights(_sub_specs(), {"stem.gain": one, "extra.gain": one})
    assert bound.present_groups == {"extra"} and bound.present == {"extra.gain"}
    assert bound.sub_present("extra") and not bound.sub_present("extra.inner")

    full = {n: one for n in _sub_specs()}
    bound = bind_weights(_sub_specs(), full)
    assert bound.present_groups == {"extra", "extra.inner", "layers.1.adapter"}
    assert bound.present == set(_sub_specs()) - {"stem.gain"}
    # An optional sub with no tensors of its own follows the subs around it.
    assert bound.sub_present("extra.empty") and bound.sub_present("unrelated")
    # A nested sub is absent whenever its parent is, even if its tensors are stored.
    partial = {"stem.gain": one, "extra.inner.gain": one}
    bound = bind_weights(_sub_specs(), partial, strict=False)
    assert bound.present_groups == frozenset() and set(bound.arrays) == {"stem.gain"}
    assert not bound.sub_present("extra.inner.deeper")
    with pytest.raises(LinnetError) as info:
        bind_weights(_sub_specs(), partial)
    message = str(info.value)
    assert "(1 problem)" in message
    assert "incomplete optional sub `extra`: `extra.gain` (checkpoint name `extra.gain`)" in message
    assert "`extra.inner.gain` stored" in message


def test_present_optional_sub_checks_shapes() -> None:
    arrays = {"stem.gain": np.ones(3, F32), "extra.gain": np.ones(4, F32)}
    with pytest.raises(
        LinnetError, match=r"wrong shape: `extra.gain`.*stored \[4\], declared \[3\]"
    ):
        bind_weights(_sub_specs(), arrays)


def test_cast_dtype_matches_torch_rounding(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(3)
    stored = {"w": torch.randn(64, 33, generator=gen) * 100, "ids": torch.arange(7) - 3}
    path = tmp_path / "f32.safetensors"
    safetensors.torch.save_file(stored, str(path))
    specs = {"w": TensorSpec((64, 33), "bf16"), "ids": TensorSpec((7,), "i8")}
    with pytest.raises(LinnetError, match="cast_dtype=True"):
        bind_weights(specs, path)
    bound = bind_weights(specs, path, cast_dtype=True)
    assert bound.arrays["w"].dtype == ml_dtypes.bfloat16
    reference = stored["w"].to(torch.bfloat16).view(torch.int16).numpy()
    assert _bits(bound.arrays["w"]) == reference.tobytes()
    np.testing.assert_array_equal(bound.arrays["ids"], np.arange(7, dtype=np.int8) - 3)
    for precise in ("f16", "f64"):
        bound = bind_weights(
            {"w": TensorSpec((64, 33), precise)}, {"w": stored["w"].numpy()}, cast_dtype=True
        )
        torch_dtype = torch.float16 if precise == "f16" else torch.float64
        np.testing.assert_array_equal(bound.arrays["w"], stored["w"].to(torch_dtype).numpy())


def test_cast_dtype_refuses_lossy_values() -> None:
    with pytest.raises(LinnetError) as info:
        bind_weights(
            {"big": TensorSpec((2,), "f16"), "ids": TensorSpec((2,), "u8")},
            {"big": np.array([1.0, 1e6], F32), "ids": np.array([0, 300], np.int64)},
            cast_dtype=True,
        )
    message = str(info.value)
    assert "(2 problems)" in message
    assert "`big` (checkpoint name `big`): 1 finite value(s) overflow f16" in message
    assert "`ids` (checkpoint name `ids`): values [0, 300] do not fit u8" in message
    # Infinities that were stored stay infinities; that is not an overflow.
    inf = bind_weights(
        {"x": TensorSpec((1,), "bf16")}, {"x": np.array([np.inf], F32)}, cast_dtype=True
    )
    assert np.isinf(inf.arrays["x"][0].astype(F32))


def test_tied_weights_share_one_converted_copy() -> None:
    specs = {"embed": TensorSpec((2, 2), "bf16"), "head": TensorSpec((2, 2), "bf16")}
    bound = bind_weights(
        specs,
        {"table": np.eye(2, dtype=F32)},
        bindings={"embed": "table", "head": "table"},
        cast_dtype=True,
    )
    assert bound.arrays["embed"] is bound.arrays["head"]


def test_shards_through_bind_weights(tmp_path: Path) -> None:
    safetensors.numpy.save_file({"a": np.ones(2, F32)}, str(tmp_path / "m-1.safetensors"))
    safetensors.numpy.save_file({"b": np.zeros(3, F32)}, str(tmp_path / "m-2.safetensors"))
    index = {"weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    bound = bind_weights(
        {"x.a": TensorSpec((2,), "f32"), "x.b": TensorSpec((3,), "f32")},
        tmp_path,
        bindings={"x.a": "a", "x.b": "b"},
    )
    assert isinstance(bound, BoundWeights)
    np.testing.assert_array_equal(bound.arrays["x.b"], np.zeros(3, F32))


def test_stored_tensor_record() -> None:
    stored = StoredTensor("w", "BF16", (2,), Path("f.safetensors"), 8, 12)
    assert stored.linnet_dtype == "bf16"
    assert StoredTensor("w", "F4", (2,), Path("f"), 8, 9).linnet_dtype is None


def test_docstring_examples_run() -> None:
    import doctest

    import linnet.weights.bind
    import linnet.weights.bindings
    import linnet.weights.safetensors

    for module in (linnet.weights.bind, linnet.weights.bindings, linnet.weights.safetensors):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def _problems_of(
    specs: dict[str, TensorSpec], arrays: dict[str, np.ndarray], **kw: bool
) -> list[str]:
    with pytest.raises(LinnetError) as info:
        bind_weights(specs, arrays, **kw)
    return [line.strip()[2:] for line in str(info.value).splitlines()[1:]]


def test_a_transposed_matrix_is_called_transposed() -> None:
    """Issue 11: `stored [32, 5], declared [5, 32]` says what happened and the fix."""
    specs = {"fc1.weight": TensorSpec((5, 32), "f32"), "conv.weight": TensorSpec((2, 3, 4), "f32")}
    arrays = {"fc1.weight": np.zeros((32, 5), F32), "conv.weight": np.zeros((4, 3, 2), F32)}
    problems = _problems_of(specs, arrays)
    assert problems == [
        "wrong shape: `fc1.weight` (checkpoint name `fc1.weight`): stored [32, 5], declared "
        "[5, 32]; the stored tensor is the declared one transposed: store its transpose "
        "(`.T` when converting)",
        "wrong shape: `conv.weight` (checkpoint name `conv.weight`): stored [4, 3, 2], declared "
        "[2, 3, 4]; the stored axes are the declared ones in another order: permute them when "
        "converting",
    ]
    # Shapes with other extents get no such hint.
    assert _problems_of(specs | {}, arrays | {"fc1.weight": np.zeros((32, 6), F32)})[0].endswith(
        "stored [32, 6], declared [5, 32]"
    )


def test_a_key_one_edit_away_is_linked_to_its_path() -> None:
    """A misspelt checkpoint key is one problem naming both, not missing + unexpected."""
    specs = {
        "fc1.weight": TensorSpec((2, 2), "f32"),
        "fc1.bias": TensorSpec((2,), "f32", optional=True),
        "fc2.weight": TensorSpec((2, 2), "f32"),
    }
    arrays = {
        "fc1.wieght": np.zeros((2, 2), F32),
        "fc1.bais": np.zeros(2, F32),
        "fc2.weight": np.zeros((2, 2), F32),
        "other.tensor": np.zeros(1, F32),
    }
    problems = _problems_of(specs, arrays)
    assert problems == [
        "missing: `fc1.weight` (checkpoint name `fc1.weight`): the checkpoint stores "
        "`fc1.wieght`, one edit away; did you mean it? Rename the tensor, or bind the path to "
        'it in bindings.json: {"fc1.weight": "fc1.wieght"}',
        "missing: `fc1.bias` (checkpoint name `fc1.bias`): the checkpoint stores `fc1.bais`, "
        "one edit away; did you mean it? Rename the tensor, or bind the path to it in "
        'bindings.json: {"fc1.bias": "fc1.bais"}',
        "unexpected tensor `other.tensor`: no parameter path binds it",
    ]
    # Without strict, stored extras are allowed: only the required path is linked.
    assert _problems_of(specs, arrays, strict=False) == problems[:1]
    # The suggested binding works.
    bound = bind_weights(specs, arrays, bindings={"fc1.weight": "fc1.wieght"}, strict=False)
    assert bound.names["fc1.weight"] == "fc1.wieght"
