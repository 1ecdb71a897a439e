"""The model nodes: load a model or a card, run an entry, describe it, reset it, generate text.

Stage: the node pack's model half (issue 19). Each class follows ComfyUI's node
contract: a classmethod `INPUT_TYPES` returning `{"required": ..., "optional": ...}`,
`RETURN_TYPES` / `RETURN_NAMES` tuples, `FUNCTION` naming the method ComfyUI calls
with the inputs as keyword arguments, `CATEGORY`, and a tuple (or, for nodes that
show text, `{"ui": ..., "result": tuple}`) coming back.

ComfyUI caches a node's outputs while its inputs are unchanged. Reset state
reports itself changed on every run (`IS_CHANGED` returns NaN, which equals
nothing), so a stateful model wired through it starts from zero state on each
queued prompt and the nodes after it run again.
"""

from __future__ import annotations

from typing import Any

import torch

from linnet.comfyui.contract import (
    CATEGORY,
    MODEL,
    TENSOR,
    choice,
    flag,
    integer,
    json_object,
    number,
    optional_path,
    reported,
    socket,
    string,
)
from linnet.comfyui.model import BACKENDS, DEVICES, LinnetModel, load_model
from linnet.errors import LinnetError

SLOTS = 4
"""Tensor inputs and results of the Run entry node."""

SEED_MAX = 2**63 - 1


def required_model(model: object) -> LinnetModel:
    """The `model` input, which a workflow in API format may give as anything."""
    if not isinstance(model, LinnetModel):
        raise LinnetError(
            f"`model` must come from a Linnet loader node, got {type(model).__name__}"
        )
    return model


class LoadModel:
    """Load Linnet model: a source, its generics and weights, on torch or ONNX Runtime."""

    DESCRIPTION = (
        "Loads a Linnet model: a .linnet file or package folder (or a card folder), "
        "the root block's generics as JSON and a SafeTensors file or folder."
    )
    RETURN_TYPES = (MODEL,)
    RETURN_NAMES = ("model",)
    FUNCTION = "load"
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {
            "required": {
                "source": string(tooltip="a .linnet file, a package folder or a card folder"),
                "generics": string(
                    "{}", multiline=True, tooltip='the root generics, e.g. {"H": 64, "T": "f32"}'
                ),
                "weights": string(tooltip="a SafeTensors file or sharded folder; empty: none"),
                "backend": choice(BACKENDS, "torch: linnet.torch; onnx: ONNX Runtime"),
                "device": choice(DEVICES, "auto: CUDA when torch sees it, else the CPU"),
            },
            "optional": {
                "root": string(tooltip="the root block, when the source has several"),
                "compile": flag(True, "torch: run generated Python instead of the IR"),
            },
        }

    @reported
    def load(
        self,
        source: str,
        generics: str,
        weights: str,
        backend: str,
        device: str,
        root: str = "",
        compile: bool = True,
    ) -> tuple[LinnetModel]:
        path = optional_path(source)
        if path is None:
            raise LinnetError("`source` is empty: give a .linnet file, package or card folder")
        model = load_model(
            path,
            generics=json_object(generics, "generics"),
            weights=optional_path(weights),
            backend=backend,
            device=device,
            root=root.strip() or None,
            compile=compile,
        )
        return (model,)


class LoadCard:
    """Load card: a model card folder (`nest.toml`) on torch or ONNX Runtime."""

    DESCRIPTION = (
        "Loads a model card folder (nest.toml): its source, generics, weights, entry "
        "and tokenizer. Generics given here override the card's."
    )
    RETURN_TYPES = (MODEL,)
    RETURN_NAMES = ("model",)
    FUNCTION = "load"
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {
            "required": {
                "card": string(tooltip="a folder holding nest.toml"),
                "backend": choice(BACKENDS, "torch: linnet.torch; onnx: ONNX Runtime"),
                "device": choice(DEVICES, "auto: CUDA when torch sees it, else the CPU"),
            },
            "optional": {
                "generics": string(
                    "{}",
                    multiline=True,
                    tooltip='overrides of the card\'s generics, e.g. {"Batch": 1}',
                ),
            },
        }

    @reported
    def load(
        self, card: str, backend: str, device: str, generics: str = "{}"
    ) -> tuple[LinnetModel]:
        from linnet.card import CARD_NAME, is_card

        path = optional_path(card)
        if path is None or not is_card(path):
            raise LinnetError(f"`card`: `{card}` is not a folder holding {CARD_NAME}")
        overrides = json_object(generics, "generics")
        model = load_model(path, generics=overrides or None, backend=backend, device=device)
        return (model,)


class RunEntry:
    """Run entry: tensors in, tensors out, the inputs checked against the entry first."""

    DESCRIPTION = (
        "Runs one entry of the model. Inputs go to the entry's inputs in order (or as "
        "named in input_names); results come out in order, unused outputs empty."
    )
    RETURN_TYPES = (TENSOR,) * SLOTS
    RETURN_NAMES = tuple(f"result_{i}" for i in range(1, SLOTS + 1))
    FUNCTION = "run"
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        optional: dict[str, Any] = {
            f"input_{i}": socket(TENSOR, f"the entry's input {i}") for i in range(1, SLOTS + 1)
        }
        optional["input_names"] = string(
            tooltip="the entry inputs the connected tensors are for, comma-separated; "
            "empty: in order"
        )
        return {
            "required": {
                "model": socket(MODEL),
                "entry": string(tooltip="the entry to run; empty: the card's, or forward"),
                "generics": string(
                    "{}", multiline=True, tooltip="entry generics no input determines, as JSON"
                ),
            },
            "optional": optional,
        }

    @reported
    def run(
        self,
        model: LinnetModel,
        entry: str,
        generics: str,
        input_1: torch.Tensor | None = None,
        input_2: torch.Tensor | None = None,
        input_3: torch.Tensor | None = None,
        input_4: torch.Tensor | None = None,
        input_names: str = "",
    ) -> tuple[torch.Tensor | None, ...]:
        handle = required_model(model)
        name = entry.strip() or handle.default_entry()
        slots = [input_1, input_2, input_3, input_4]
        last = max((i for i, t in enumerate(slots) if t is not None), default=-1)
        inputs: list[torch.Tensor] = []
        for i, tensor in enumerate(slots[: last + 1]):
            if not isinstance(tensor, torch.Tensor):
                got = "nothing" if tensor is None else type(tensor).__name__
                raise LinnetError(
                    f"Run entry: `input_{i + 1}` is {got} while `input_{last + 1}` is "
                    "connected; connect the inputs in order from input_1 (an empty tensor "
                    "comes from a result the entry does not have)"
                )
            inputs.append(tensor)
        names = [n.strip() for n in input_names.split(",") if n.strip()]
        own = json_object(generics, "generics")
        results = handle.run(name, inputs, names, own or None)
        if len(results) > SLOTS:
            raise LinnetError(
                f"entry `{name}` returns {len(results)} results; the node has {SLOTS} outputs"
            )
        return tuple(results) + (None,) * (SLOTS - len(results))


class ModelInfo:
    """Model info: entries, generics and the parameter count, as text."""

    DESCRIPTION = "Shows the model's root block, generics, tensor counts and entries."
    RETURN_TYPES = ("STRING", "STRING")
    RETURN_NAMES = ("info", "parameters")
    FUNCTION = "describe"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {"required": {"model": socket(MODEL)}}

    @reported
    def describe(self, model: LinnetModel) -> dict[str, Any]:
        handle = required_model(model)
        info = handle.describe()
        return {"ui": {"text": [info]}, "result": (info, str(handle.parameter_count))}


class ResetState:
    """Reset state: zero a stateful model's state (a decoder's cache) and pass it on."""

    DESCRIPTION = (
        "Zeroes the model's state members (and the text engine's cache rows) and passes "
        "the model on; runs on every queued prompt."
    )
    RETURN_TYPES = (MODEL,)
    RETURN_NAMES = ("model",)
    FUNCTION = "reset"
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {"required": {"model": socket(MODEL)}}

    @classmethod
    def IS_CHANGED(cls, **inputs: Any) -> float:
        return float("nan")

    @reported
    def reset(self, model: LinnetModel) -> tuple[LinnetModel]:
        handle = required_model(model)
        handle.reset_state()
        return (handle,)


class GenerateText:
    """Generate text over `linnet.serve.Engine`: prompt in, completion out."""

    DESCRIPTION = (
        "Generates text with a decoder that has the prefill_slots and decode_rows entries "
        "(the Llama, Qwen, Phi-3 and GPT-2 examples). Temperature 0 is greedy."
    )
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("text",)
    FUNCTION = "generate"
    OUTPUT_NODE = True
    CATEGORY = CATEGORY

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, dict[str, Any]]:
        return {
            "required": {
                "model": socket(MODEL),
                "prompt": string(multiline=True),
                "max_tokens": integer(32, 1, 32768, "new tokens at most"),
                "temperature": number(0.8, 0.0, 4.0, 0.05, "0: greedy"),
                "seed": integer(0, 0, SEED_MAX, "the sampling seed"),
            },
            "optional": {
                "tokenizer": string(tooltip="a folder with tokenizer.json; empty: the card's"),
                "chat": flag(False, "render the prompt through the chat template"),
                "top_k": integer(0, 0, 1_000_000, "keep the k most likely tokens; 0: all"),
                "top_p": number(1.0, 0.01, 1.0, 0.01, "nucleus sampling; 1: all"),
            },
        }

    @reported
    def generate(
        self,
        model: LinnetModel,
        prompt: str,
        max_tokens: int,
        temperature: float,
        seed: int,
        tokenizer: str = "",
        chat: bool = False,
        top_k: int = 0,
        top_p: float = 1.0,
    ) -> dict[str, Any]:
        from linnet.serve import Request

        handle = required_model(model)
        tokens = handle.tokenizer_at(optional_path(tokenizer))
        engine = handle.engine()
        if chat:
            ids = tokens.encode_chat([{"role": "user", "content": prompt}])
        else:
            ids = tokens.encode(prompt)
        if not ids:
            raise LinnetError("`prompt` is empty: it encodes to no tokens")
        room = engine.max_seq - len(ids) + 1
        if room < 1:
            raise LinnetError(
                f"the prompt has {len(ids)} tokens; the model's MaxSeq is {engine.max_seq}"
            )
        request = Request(
            ids,
            max_new_tokens=min(max_tokens, room),
            eos=sorted(tokens.eos_ids),
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
        )
        (completion,), _ = engine.run([request])
        text: str = tokens.decode(completion.tokens)
        return {"ui": {"text": [text]}, "result": (text,)}
