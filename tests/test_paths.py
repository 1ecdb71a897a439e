"""Every public function that takes a path accepts `str` and `os.PathLike`.

Each is called twice on the same files: with plain strings and with a
minimal `os.PathLike` that is not a `pathlib.Path` (so no code may rely on
`isinstance(x, Path)` or on `Path` methods of its argument), and both calls
must give the same result. Covered: `linnet.weights`, `linnet.pipeline`,
`linnet.onnx` (export, save, `save_together`, load, import), `linnet.torch`
and `linnet.atomic`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import linnet.onnx as lonnx
import linnet.pipeline as pipeline
import linnet.weights as weights
from linnet import atomic
from linnet.check.modules import default_std_root
from linnet.target import Target

SOURCE = """\
module lin

pub block Lin<N: Dim> {
    param w: Tensor[N; f32]

    pub entry forward(x: Tensor[N; f32]) -> Tensor[N; f32] {
        return x * w
    }
}

pub fn twice<N: Dim>(x: Tensor[N; f32]) -> Tensor[N; f32] {
    return x * 2.0
}
"""
W = np.array([1.0, 2.0, 3.0], np.float32)
X = np.array([0.5, -1.0, 4.0], np.float32)


class FsPath:
    """The least an `os.PathLike` has to offer."""

    def __init__(self, path: Path) -> None:
        self._path = str(path)

    def __fspath__(self) -> str:
        return self._path


Kind = Callable[[Path], Any]
KINDS: dict[str, Kind] = {"str": str, "PathLike": FsPath}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    source = tmp_path / "lin.linnet"
    source.write_text(SOURCE, encoding="utf-8")
    checkpoint = tmp_path / "w.safetensors"
    weights.save_safetensors({"weight": W}, checkpoint)
    bindings = tmp_path / "bindings.json"  # also found beside the checkpoint in the folder
    bindings.write_text(json.dumps({"w": "weight"}), encoding="utf-8")
    return {
        "source": source,
        "checkpoint": checkpoint,
        "bindings": bindings,
        "std": default_std_root(),
        "tmp": tmp_path,
    }


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_weights_functions(files: dict[str, Path], kind: str) -> None:
    p = KINDS[kind]
    out = files["tmp"] / f"saved-{kind}.safetensors"
    weights.save_safetensors({"a": W}, p(out))
    np.testing.assert_array_equal(weights.read_safetensors(p(out))["a"], W)
    assert list(weights.SafeTensorsFile(p(out)).tensors) == ["a"]
    assert set(weights.open_checkpoint(p(files["checkpoint"])).tensors) == {"weight"}
    assert set(weights.open_checkpoint(p(files["tmp"])).tensors) >= {"weight"}
    assert weights.load_bindings(p(files["bindings"])).resolve("w") == "weight"
    model = pipeline.load_model(p(files["source"]), generics={"N": 3}, std_root=p(files["std"]))
    bound = weights.bind_model_weights(model, p(files["checkpoint"]), bindings=p(files["bindings"]))
    np.testing.assert_array_equal(np.asarray(bound.arrays["w"]), W)
    again = pipeline.bind_weights(model, p(files["checkpoint"]), bindings=p(files["bindings"]))
    np.testing.assert_array_equal(np.asarray(again.arrays["w"]), W)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pipeline_functions(files: dict[str, Path], kind: str) -> None:
    p = KINDS[kind]
    std = p(files["std"])
    assert not pipeline.check_paths([p(files["source"])], std).has_errors
    assert not pipeline.check_paths([p(files["tmp"])], std).has_errors
    assert not pipeline.check_source(SOURCE, "lin.linnet", std).has_errors
    assert not pipeline.check_program(p(files["source"]), std).has_errors
    target = Target(generics={"N": 3}, std=files["std"])  # a record field, not an argument
    compiled = pipeline.load_entry(p(files["source"]), target, weights=p(files["tmp"]))
    assert compiled.function.name == "forward"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_onnx_functions(files: dict[str, Path], kind: str) -> None:
    p, tmp = KINDS[kind], files["tmp"]
    common: dict[str, Any] = {"generics": {"N": 3}, "std_root": p(files["std"])}
    exported = lonnx.export_model(
        p(files["source"]), weights=p(files["checkpoint"]), bindings=p(files["bindings"]), **common
    )
    saved = exported.save(p(tmp / f"m-{kind}.onnx"))
    assert onnx.load(str(saved)).graph.initializer
    exported.save(p(tmp / f"x-{kind}.onnx"), external_data=True)
    folder = tmp / f"together-{kind}"
    folder.mkdir()
    paths = lonnx.save_together({"forward": exported}, p(folder))
    assert paths["forward"].exists()
    model = lonnx.load_model(
        p(files["source"]), weights=p(files["checkpoint"]), bindings=p(files["bindings"]), **common
    )
    np.testing.assert_allclose(model.run_entry("forward", [X]), X * W)
    function = lonnx.export_function(p(files["source"]), "twice", **common)  # N given
    assert function.inputs[0].name == "x"
    result = lonnx.import_onnx(
        p(saved),
        output=p(tmp / f"imported-{kind}" / "m.linnet"),
        weights=p(tmp / f"imported-{kind}" / "w"),
        std_root=p(files["std"]),
    )
    assert result.output.exists() and result.weights is not None and result.weights.exists()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_torch_functions(files: dict[str, Path], kind: str) -> None:
    torch = pytest.importorskip("torch")
    import linnet.torch as ltorch

    p = KINDS[kind]
    common: dict[str, Any] = {"generics": {"N": 3}, "std_root": p(files["std"])}
    module = ltorch.load(
        p(files["source"]), weights=p(files["checkpoint"]), bindings=p(files["bindings"]), **common
    )
    out = module.forward(torch.from_numpy(X))
    np.testing.assert_allclose(out.numpy(), X * W)
    twice = ltorch.load_function(p(files["source"]), "twice", std_root=p(files["std"]))
    np.testing.assert_allclose(twice(torch.from_numpy(X)).numpy(), X * 2)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_atomic_functions(tmp_path: Path, kind: str) -> None:
    p = KINDS[kind]
    folder = atomic.ensure_folder(p(tmp_path / "a" / "b"))
    atomic.write_bytes(p(folder / "x.bin"), b"x")
    with atomic.atomic_write(p(folder / "y.bin")) as out:
        out.write(b"y")
    assert (folder / "x.bin").read_bytes() == b"x" and (folder / "y.bin").read_bytes() == b"y"
