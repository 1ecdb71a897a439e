"""API-format workflows of the node pack, run by the stand-in executor (`standin`), checked
against NumPy f64 and `linnet.torch` called directly.

An image goes through Image to tensor, Run entry and Argmax on torch and on ONNX
Runtime, loaded from source + generics + weights and from a card; the logits
equal NumPy's; an image-to-image entry comes back as the expected IMAGE; entry
generics given as JSON; a stateful entry keeps its state across nodes until
Reset state; Model info counts the parameters. Each bad input stops the run with
a `LinnetError` whose message says what is wrong, with no chained traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import comfy_cases  # noqa: E402
from standin import Executor, InvalidPrompt, NodeFailure, load_custom_node  # noqa: E402

import linnet.torch as lt  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402

IMAGE_NODE = "StandInImage"
PREVIEW_NODE = "StandInPreviewImage"


class StandInImage:
    """Stands in for ComfyUI's LoadImage: an IMAGE `[B, H, W, 3]` float32 in [0, 1]."""

    IMAGES: ClassVar[dict[str, Any]] = {}
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "load"
    CATEGORY = "test"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"name": ("STRING", {"default": ""})}}

    def load(self, name: str) -> tuple[Any]:
        return (self.IMAGES[name],)


class StandInPreviewImage:
    """Stands in for ComfyUI's PreviewImage: an output node that takes an IMAGE."""

    RETURN_TYPES = ()
    FUNCTION = "preview"
    OUTPUT_NODE = True
    CATEGORY = "test"

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {"images": ("IMAGE",)}}

    def preview(self, images: Any) -> dict[str, Any]:
        assert images.dtype == torch.float32 and images.dim() == 4 and images.shape[-1] == 3
        return {"ui": {"images": [tuple(images.shape)]}, "result": ()}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return comfy_cases.model_folder(tmp_path_factory.mktemp("comfy"))


@pytest.fixture
def executor() -> Executor:
    registry = load_custom_node(str(comfy_cases.PACK))
    registry.classes[IMAGE_NODE] = StandInImage
    registry.classes[PREVIEW_NODE] = StandInPreviewImage
    return Executor(registry)


def image(seed: int, b: int = 2, h: int = 4, w: int = 6) -> Any:
    rng = np.random.default_rng(seed)
    pixels = rng.random((b, h, w, 3)).astype(np.float32)
    StandInImage.IMAGES[f"image{seed}"] = torch.from_numpy(pixels)
    return pixels


def loader(files: dict[str, str], backend: str = "torch", **extra: Any) -> dict[str, Any]:
    inputs = {"source": files["source"], "generics": files["generics"],
              "weights": files["weights"], "backend": backend, "device": "cpu", **extra}  # fmt: skip
    return {"class_type": "LinnetLoadModel", "inputs": inputs}


def classify(model: dict[str, Any], seed: int) -> dict[str, Any]:
    return {
        "1": model,
        "2": {"class_type": IMAGE_NODE, "inputs": {"name": f"image{seed}"}},
        "3": {"class_type": "LinnetImageToTensor", "inputs": {"image": ["2", 0], "dtype": "f32"}},
        "4": {"class_type": "LinnetRunEntry",
              "inputs": {"model": ["1", 0], "entry": "", "generics": "{}", "input_1": ["3", 0]}},
        "5": {"class_type": "LinnetArgmax", "inputs": {"tensor": ["4", 0], "axis": -1}},
    }  # fmt: skip


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_classify_an_image_equals_numpy(
    executor: Executor, files: dict[str, str], backend: str
) -> None:
    pixels = image(1)
    out = executor.run(classify(loader(files, backend), 1))
    logits, *rest = out["4"]
    assert rest == [None, None, None]
    want = comfy_cases.reference_logits(pixels, comfy_cases.weights())
    np.testing.assert_allclose(logits.numpy(), want, rtol=1e-5, atol=1e-5)
    indices, first, text = out["5"]
    assert indices.tolist() == np.argmax(want, axis=-1).tolist()
    assert first == int(np.argmax(want[0])) and json.loads(text) == indices.tolist()
    assert executor.ui["5"] == {"text": [text]}


def test_run_entry_equals_linnet_torch_called_directly(
    executor: Executor, files: dict[str, str]
) -> None:
    pixels = image(2, b=1, h=3, w=3)
    out = executor.run(classify(loader(files, compile=False), 2))
    direct = lt.load(files["source"], generics=json.loads(files["generics"]),
                     weights=files["weights"])  # fmt: skip
    want = direct(torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous())
    assert torch.equal(out["4"][0], want)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_card_loads_with_its_entry(executor: Executor, files: dict[str, str], backend: str) -> None:
    pixels = image(3)
    card = {"class_type": "LinnetLoadCard",
            "inputs": {"card": files["card"], "backend": backend, "device": "cpu"}}  # fmt: skip
    workflow = classify(card, 3)
    workflow["6"] = {"class_type": "LinnetModelInfo", "inputs": {"model": ["1", 0]}}
    out = executor.run(workflow)
    want = comfy_cases.reference_logits(pixels, comfy_cases.weights())
    np.testing.assert_allclose(out["4"][0].numpy(), want, rtol=1e-5, atol=1e-5)
    info, parameters = out["6"]
    place = "cpu" if backend == "torch" else "CPUExecutionProvider"
    assert info.startswith(f"tiny-vision: Tiny<C = 3, K = 5> on {backend} ({place})\n")
    assert "entry forward<B, H, W>(image: Tensor[B, C, H, W; f32]) -> Tensor[B, K; f32]" in info
    assert "entry repeat<N>(x: Tensor[K; f32]) -> (Tensor[N, K; f32], Tensor[K; f32])" in info
    assert "state: 5 values in 1 tensors" in info
    assert parameters == str(sum(a.size for a in comfy_cases.weights().values()))


def test_image_round_trip_and_an_image_entry(executor: Executor, files: dict[str, str]) -> None:
    pixels = image(4, b=1, h=5, w=7)
    mean, std = "0.485, 0.456, 0.406", "0.229, 0.224, 0.225"
    workflow = {
        "1": loader(files),
        "2": {"class_type": IMAGE_NODE, "inputs": {"name": "image4"}},
        "3": {"class_type": "LinnetImageToTensor",
              "inputs": {"image": ["2", 0], "dtype": "f32", "mean": mean, "std": std}},
        "4": {"class_type": "LinnetTensorToImage",
              "inputs": {"tensor": ["3", 0], "mean": mean, "std": std}},
        "5": {"class_type": "LinnetImageToTensor", "inputs": {"image": ["2", 0], "dtype": "f32"}},
        "6": {"class_type": "LinnetRunEntry",
              "inputs": {"model": ["1", 0], "entry": "invert", "generics": "", "input_1": ["5", 0]}},
        "7": {"class_type": "LinnetTensorToImage", "inputs": {"tensor": ["6", 0]}},
        "8": {"class_type": "LinnetArgmax", "inputs": {"tensor": ["3", 0], "axis": 1}},
        "9": {"class_type": PREVIEW_NODE, "inputs": {"images": ["4", 0]}},
        "10": {"class_type": PREVIEW_NODE, "inputs": {"images": ["7", 0]}},
    }  # fmt: skip
    out = executor.run(workflow)
    normalised = out["3"][0]
    m = np.array([0.485, 0.456, 0.406])
    s = np.array([0.229, 0.224, 0.225])
    want = ((pixels.astype(np.float64) - m) / s).transpose(0, 3, 1, 2)
    assert normalised.shape == (1, 3, 5, 7) and normalised.dtype == torch.float32
    np.testing.assert_allclose(normalised.numpy(), want, rtol=1e-6, atol=1e-6)
    (back,) = out["4"]
    assert back.shape == (1, 5, 7, 3) and back.dtype == torch.float32
    np.testing.assert_allclose(back.numpy(), pixels, atol=1e-6)
    (inverted,) = out["7"]
    np.testing.assert_allclose(inverted.numpy(), 1.0 - pixels, atol=1e-6)
    assert out["8"][0].tolist() == np.argmax(want, axis=1).tolist()


def test_one_channel_tensor_becomes_grey(executor: Executor) -> None:
    workflow = {
        "1": {"class_type": "LinnetTensorFromValues",
              "inputs": {"values": "[[[[0.25, 2.0], [-1.0, 0.5]]]]", "dtype": "f32"}},
        "2": {"class_type": "LinnetTensorToImage", "inputs": {"tensor": ["1", 0]}},
        "3": {"class_type": PREVIEW_NODE, "inputs": {"images": ["2", 0]}},
    }  # fmt: skip
    out = executor.run(workflow)
    assert executor.ui["3"] == {"images": [(1, 2, 2, 3)]}
    (picture,) = out["2"]
    assert picture.shape == (1, 2, 2, 3)
    grey = np.array([[0.25, 1.0], [0.0, 0.5]], np.float32)
    for channel in range(3):
        np.testing.assert_array_equal(picture[0, :, :, channel].numpy(), grey)


def test_entry_generics_and_two_results(executor: Executor, files: dict[str, str]) -> None:
    workflow = {
        "1": loader(files),
        "2": {"class_type": "LinnetTensorFromValues",
              "inputs": {"values": "[1, -2, 3.5, 0, 4]", "dtype": "f32"}},
        "3": {"class_type": "LinnetRunEntry",
              "inputs": {"model": ["1", 0], "entry": "repeat", "generics": '{"N": 3}',
                         "input_1": ["2", 0], "input_names": "x"}},
        "4": {"class_type": "LinnetArgmax", "inputs": {"tensor": ["3", 1], "axis": 0}},
    }  # fmt: skip
    out = executor.run(workflow)
    x = np.array([1, -2, 3.5, 0, 4], np.float32)
    repeated, doubled, third, fourth = out["3"]
    np.testing.assert_array_equal(repeated.numpy(), np.tile(x, (3, 1)))
    np.testing.assert_array_equal(doubled.numpy(), 2 * x)
    assert third is None and fourth is None
    assert out["4"][1] == 4


def test_state_carries_between_nodes_until_reset(executor: Executor, files: dict[str, str]) -> None:
    x = [0.5, 1.0, -1.0, 2.0, 0.0]
    workflow = {
        "1": loader(files),
        "2": {"class_type": "LinnetTensorFromValues", "inputs": {"values": json.dumps(x), "dtype": "f32"}},
        "3": {"class_type": "LinnetResetState", "inputs": {"model": ["1", 0]}},
        "4": {"class_type": "LinnetRunEntry",
              "inputs": {"model": ["3", 0], "entry": "add", "generics": "{}", "input_1": ["2", 0]}},
        "5": {"class_type": "LinnetArgmax", "inputs": {"tensor": ["4", 0], "axis": 0}},
    }  # fmt: skip
    first = executor.run(workflow)
    np.testing.assert_array_equal(first["4"][0].numpy(), np.array(x, np.float32))
    # Queued again: Reset state reports a change, so it and the Run entry after it run again
    # and the sum starts from zero; the loader is cached (the same model object).
    second = executor.run(workflow)
    assert executor.executed == ["3", "4", "5"]
    np.testing.assert_array_equal(second["4"][0].numpy(), np.array(x, np.float32))
    assert second["1"][0] is first["1"][0]
    # Without a reset in between, a second add on the same model continues the sum:
    # x + (the first add's result, x).
    workflow["6"] = {"class_type": "LinnetRunEntry",
                     "inputs": {"model": ["3", 0], "entry": "add", "generics": "{}",
                                "input_1": ["4", 0]}}  # fmt: skip
    workflow["7"] = {"class_type": "LinnetArgmax", "inputs": {"tensor": ["6", 0], "axis": 0}}
    third = executor.run(workflow)
    np.testing.assert_array_equal(third["6"][0].numpy(), 2 * np.array(x, np.float32))


# -- bad input: a clean message --------------------------------------------------------------


def failure(executor: Executor, workflow: dict[str, Any]) -> NodeFailure:
    with pytest.raises(NodeFailure) as caught:
        executor.run(workflow)
    failed = caught.value
    assert isinstance(failed.exception, LinnetError)
    assert failed.exception.__cause__ is None and failed.exception.__suppress_context__
    assert "Traceback" not in failed.message
    return failed


def test_bad_generics_json(executor: Executor, files: dict[str, str]) -> None:
    failed = failure(executor, {"1": loader(files) | {"inputs": {**loader(files)["inputs"],
                                "generics": "{C: 3}"}},
                                "2": {"class_type": "LinnetModelInfo", "inputs": {"model": ["1", 0]}}})  # fmt: skip
    assert failed.node_id == "1" and failed.class_type == "LinnetLoadModel"
    assert failed.message.startswith("`generics` is not valid JSON: Expecting property name")


def test_missing_source_and_unknown_generic(executor: Executor, files: dict[str, str]) -> None:
    info = {"class_type": "LinnetModelInfo", "inputs": {"model": ["1", 0]}}
    missing = loader(files)
    missing["inputs"]["source"] = files["source"] + ".gone"
    failed = failure(executor, {"1": missing, "2": info})
    assert (
        failed.message
        == f"`source`: {files['source']}.gone does not exist (a .linnet file, package or card)"
    )
    wrong = loader(files)
    wrong["inputs"]["generics"] = '{"C": 3, "K": 5, "Q": 1}'
    assert "`Q`" in failure(executor, {"1": wrong, "2": info}).message


def test_a_source_error_shows_its_diagnostic(
    executor: Executor, files: dict[str, str], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.linnet"
    broken.write_text(comfy_cases.SOURCE.replace("return logits + bias", "return logits + nope"))
    bad = loader(files)
    bad["inputs"]["source"] = str(broken)
    failed = failure(
        executor, {"1": bad, "2": {"class_type": "LinnetModelInfo", "inputs": {"model": ["1", 0]}}}
    )
    assert failed.message.startswith("the Linnet program has errors")
    assert "nope" in failed.message and "error E" in failed.message


def run_with(files: dict[str, str], entry: str, tensor: str, dtype: str = "f32",
             generics: str = "{}", names: str = "") -> dict[str, Any]:  # fmt: skip
    return {
        "1": loader(files),
        "2": {"class_type": "LinnetTensorFromValues", "inputs": {"values": tensor, "dtype": dtype}},
        "3": {"class_type": "LinnetRunEntry",
              "inputs": {"model": ["1", 0], "entry": entry, "generics": generics,
                         "input_1": ["2", 0], "input_names": names}},
        "4": {"class_type": "LinnetArgmax", "inputs": {"tensor": ["3", 0], "axis": -1}},
    }  # fmt: skip


SIGNATURE_CASES = [
    ("forward", "[[1.0, 2.0]]", "f32", "{}", "",
     "entry `forward`: input `image` has rank 2 but `Tensor[B, C, H, W; f32]` needs 4 axes\n"
     "the entry: entry forward<B, H, W>(image: Tensor[B, C, H, W; f32]) -> Tensor[B, K; f32]\n"
     "with C = 3, K = 5"),
    ("forward", "[[[[1.0]], [[2.0]]]]", "f32", "{}", "",
     "entry `forward`: input `image`: axis 1 is 2 but `C` = 3 is required"),
    ("add", "[1, 2, 3, 4, 5]", "f16", "{}", "",
     "entry `add`: input `x` has dtype f16 but f32 is required"),
    ("repeat", "[1, 2, 3, 4, 5]", "f32", "{}", "",
     "entry `repeat`: cannot bind generic `N` from the inputs; pass it explicitly"),
    ("add", "[1, 2, 3, 4, 5]", "f32", "{}", "y",
     "entry `add` has no input `y` (inputs: `x`)"),
    ("backward", "[1]", "f32", "{}", "",
     "the model has no entry `backward` (entries: `forward`, `invert`, `add`, `repeat`)"),
    ("repeat", "[1, 2, 3, 4, 5]", "f32", '{"N": 0.5}', "", "`N`"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "values", "dtype", "generics", "names", "message"), SIGNATURE_CASES
)
def test_signature_checked_before_running(
    executor: Executor, files: dict[str, str], entry: str, values: str, dtype: str,
    generics: str, names: str, message: str,
) -> None:  # fmt: skip
    failed = failure(executor, run_with(files, entry, values, dtype, generics, names))
    assert failed.node_id == "3"
    assert message in failed.message


def test_signature_failure_runs_nothing(executor: Executor, files: dict[str, str]) -> None:
    """The state of `add` is untouched by a refused call (the check comes first)."""
    failure(executor, run_with(files, "add", "[1, 2, 3]", "f32"))
    handle = executor.cache["1"][1][0]
    assert handle.runner.tensor("total").abs().sum().item() == 0


def test_empty_result_and_gaps(executor: Executor, files: dict[str, str]) -> None:
    workflow = run_with(files, "add", "[1, 2, 3, 4, 5]")
    workflow["4"]["inputs"]["tensor"] = ["3", 1]  # `add` has one result
    failed = failure(executor, workflow)
    assert failed.node_id == "4"
    assert failed.message.startswith("`tensor` is empty: it is linked to a Run entry output")
    gap = run_with(files, "add", "[1, 2, 3, 4, 5]")
    gap["3"]["inputs"]["input_2"] = gap["3"]["inputs"].pop("input_1")
    assert "`input_1` is nothing while `input_2` is connected" in failure(executor, gap).message


@pytest.mark.parametrize(
    ("values", "dtype", "message"),
    [("[1, 2.5]", "i32", "`values` holds fractions, which i32 cannot hold"),
     ("[300]", "i8", "`values` holds numbers outside i8 (-128..127)"),
     ("[[1, 2], [3]]", "f32", "`values` must be a number or nested lists"),
     ("[1,", "f32", "`values` is not valid JSON")],
)  # fmt: skip
def test_bad_values(executor: Executor, values: str, dtype: str, message: str) -> None:
    workflow = {
        "1": {"class_type": "LinnetTensorFromValues", "inputs": {"values": values, "dtype": dtype}},
        "2": {"class_type": "LinnetArgmax", "inputs": {"tensor": ["1", 0], "axis": -1}},
    }
    assert failure(executor, workflow).message.startswith(message)


def test_bad_image_options(executor: Executor, files: dict[str, str]) -> None:
    image(5)
    workflow = classify(loader(files), 5)
    workflow["3"]["inputs"]["mean"] = "0.5, 0.5"
    assert failure(executor, workflow).message == "`mean` has 2 values but the image has 3 channels"
    workflow["3"]["inputs"]["mean"] = "half"
    assert failure(executor, workflow).message.startswith(
        "`mean` takes numbers separated by commas"
    )


def test_the_stand_in_validates_like_comfyui(executor: Executor, files: dict[str, str]) -> None:
    image(6)
    workflow = classify(loader(files, backend="jax"), 6)
    with pytest.raises(InvalidPrompt, match=r"'jax' not among \['torch', 'onnx'\]"):
        executor.run(workflow)
    workflow = classify(loader(files), 6)
    workflow["5"]["inputs"]["tensor"] = ["2", 0]  # an IMAGE into a LINNET_TENSOR input
    with pytest.raises(InvalidPrompt, match="IMAGE into LINNET_TENSOR"):
        executor.run(workflow)
    del workflow["5"]
    with pytest.raises(InvalidPrompt, match="the prompt has no outputs"):
        executor.run(workflow)
