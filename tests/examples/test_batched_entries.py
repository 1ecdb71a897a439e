"""`prefill_slots`, `decode_rows` and `decode_slots` of the decoder examples (continuous batching).

Each example runs a staggered schedule on a 3-row cache: two prompts of
different lengths prefilled together into rows 2 and 0 (right-padded, with a
padding member whose slot lists no row), decode steps with row 1 free, a third
prompt admitted into row 1 while the others decode, and a fourth prompt reusing
row 0 after its first sequence ended (its stale, longer cache left in place).
Every sequence's logits are compared with transformers' logits of that sequence
alone (so rows cannot have leaked into each other) and its greedy tokens with
`generate(do_sample=False)`; on `linnet.torch` (generated source) and ONNX
Runtime. Every family (Llama, GPT-2, Qwen2, Qwen3, Phi-3) runs the schedule again
with `decode_slots` (only the busy rows, listed in another order than the
cache's, plus a padding member whose slot is no row) in place of `decode_rows`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import decoder_cases

Array = np.ndarray[Any, Any]
Call = Callable[[str, list[Array]], Array]
BATCH, MAX_SEQ = 3, 32


def torch_call(decoder: decoder_cases.Decoder) -> Call:
    import torch

    import linnet.torch as lt

    model = lt.load(decoder.source, generics=decoder.generics(BATCH, MAX_SEQ),
                    weights=decoder.weights, compile=True)  # fmt: skip

    def call(entry: str, inputs: list[Array]) -> Array:
        with torch.no_grad():
            out = model.run_entry(entry, [torch.from_numpy(x) for x in inputs])
        assert isinstance(out, torch.Tensor)
        return out.numpy()

    return call


def onnx_call(decoder: decoder_cases.Decoder) -> Call:
    from linnet.onnx.runtime.model import load_model

    model = load_model(decoder.source, generics=decoder.generics(BATCH, MAX_SEQ),
                       weights=decoder.weights)  # fmt: skip

    def call(entry: str, inputs: list[Array]) -> Array:
        out: Array = model.run_entry(entry, inputs)
        return out

    return call


class Rows:
    """The schedule's bookkeeping: per sequence its tokens and the logits that chose them."""

    def __init__(self, call: Call, slotted: bool = False) -> None:
        self.call = call
        self.slotted = slotted
        self.row_of: dict[int, int] = {}
        self.tokens: dict[int, list[int]] = {}
        self.prompt_length: dict[int, int] = {}
        self.logits: dict[int, list[Array]] = {}

    def admit(self, prompts: dict[int, Array], rows: list[int], width: int, pad: int) -> None:
        """Prefill `prompts` (sequence id -> tokens) into `rows`, plus `pad` padding members."""
        ids = list(prompts)
        members = len(ids) + pad
        tokens = np.zeros((members, width), np.int32)
        slots = np.array([*rows, *range(-1, -1 - pad, -1)], np.int32)
        lengths = np.ones(members, np.int32)
        for m, seq in enumerate(ids):
            tokens[m, : len(prompts[seq])] = prompts[seq]
            lengths[m] = len(prompts[seq])
        out = self.call("prefill_slots", [tokens, slots, lengths])
        assert out.shape[0] == members
        for m, seq in enumerate(ids):
            self.row_of[seq] = rows[m]
            self.prompt_length[seq] = len(prompts[seq])
            self.tokens[seq] = [*map(int, prompts[seq]), int(out[m].argmax())]
            self.logits[seq] = [out[m]]

    def step(self) -> None:
        if self.slotted:
            self.step_slots()
            return
        tokens = np.zeros((BATCH, 1), np.int32)
        positions = np.zeros(BATCH, np.int32)
        for seq, row in self.row_of.items():
            tokens[row, 0] = self.tokens[seq][-1]
            positions[row] = len(self.tokens[seq]) - 1
        out = self.call("decode_rows", [tokens, positions])
        assert out.shape[0] == BATCH
        for seq, row in self.row_of.items():
            self.tokens[seq].append(int(out[row].argmax()))
            self.logits[seq].append(out[row])

    def step_slots(self) -> None:
        """`decode_slots` over the busy rows, last admitted first, and one padding member."""
        busy = sorted(self.row_of.items(), reverse=True)
        tokens = np.array([[self.tokens[seq][-1]] for seq, _ in busy] + [[0]], np.int32)
        slots = np.array([row for _, row in busy] + [-1], np.int32)
        positions = np.array([len(self.tokens[seq]) - 1 for seq, _ in busy] + [0], np.int32)
        out = self.call("decode_slots", [tokens, slots, positions])
        assert out.shape[0] == len(busy) + 1
        for m, (seq, _) in enumerate(busy):
            self.tokens[seq].append(int(out[m].argmax()))
            self.logits[seq].append(out[m])

    def finish(self, seq: int) -> None:
        del self.row_of[seq]


def schedule_cases() -> list[Any]:
    """(family or family/decode_slots, backend) for every family on both backends. For
    Qwen2, Qwen3 and Phi-3 (same code paths as Llama) the pairs the engine does not run,
    `decode_rows` on linnet.torch and `decode_slots` on ONNX Runtime, are slow."""
    cases: list[Any] = []
    for name in ("llama", "gpt2", "qwen2", "qwen3", "phi3"):
        for family in (name, f"{name}/decode_slots"):
            for backend in ("torch", "onnx"):
                unused = (backend == "torch") != family.endswith("decode_slots")
                slow = name in ("qwen2", "qwen3", "phi3") and unused
                marks = [pytest.mark.slow] if slow else []
                cases.append(pytest.param(family, backend, marks=marks))
    return cases


@pytest.mark.parametrize(("family", "backend"), schedule_cases())
def test_rows_decode_as_their_sequences_alone(family: str, backend: str) -> None:
    decoder = getattr(decoder_cases, family.split("/")[0])()
    call = torch_call(decoder) if backend == "torch" else onnx_call(decoder)
    prompts = dict(enumerate(decoder_cases.prompts(decoder.vocab, [5, 9, 7, 4], seed=3)))
    rows = Rows(call, slotted=family.endswith("decode_slots"))
    rows.admit({0: prompts[0], 1: prompts[1]}, [2, 0], width=12, pad=1)
    for _ in range(4):
        rows.step()
    rows.admit({2: prompts[2]}, [1], width=8, pad=0)
    for _ in range(3):
        rows.step()
    rows.finish(1)
    rows.admit({3: prompts[3]}, [0], width=4, pad=0)
    for _ in range(5):
        rows.step()

    distinct: set[int] = set()
    for seq, prompt in prompts.items():
        sequence = rows.tokens[seq]
        n = rows.prompt_length[seq]
        chosen = np.stack(rows.logits[seq])
        want = decoder.logits(np.array(sequence[:-1]))[n - 1 :]
        assert chosen.shape == want.shape
        gap = float(np.abs(chosen - want).max())
        assert gap <= 1e-4, f"sequence {seq}: max |logit difference| {gap:.2e}"
        generated = sequence[n:]
        assert generated == decoder.generate(prompt, len(generated))
        distinct |= set(generated)
    assert len(distinct) >= 6  # the sequences differ: the rows' comparison means something


@pytest.mark.parametrize("entry", ["decode_rows", "decode_slots"])
def test_onnx_cache_writes_update_the_state_in_place(entry: str) -> None:
    """`write_rows` and `write_slots` become scatters into the state buffer
    (`onnx.runtime.inplace`): neither `prefill_slots` nor a decode step moves or copies
    the cache, and out-of-range positions or slots write nothing."""
    from linnet.onnx.runtime.model import load_model

    decoder = decoder_cases.llama()
    model = load_model(decoder.source, generics=decoder.generics(BATCH, MAX_SEQ),
                       weights=decoder.weights)  # fmt: skip
    path = "model.layers.0.self_attn.k_cache"
    prompt = decoder_cases.prompts(decoder.vocab, [6], seed=4)[0]
    model.run_entry(
        "prefill_slots", [prompt[None], np.array([1], np.int32), np.array([6], np.int32)]
    )
    address = model.state_address(path)
    before = model.state[path]
    if entry == "decode_rows":
        tokens = np.array([[3], [int(prompt[-1])], [5]], np.int32)
        logits = model.run_entry(entry, [tokens, np.array([-1, 6, MAX_SEQ], np.int32)])
        row = 1
    else:
        tokens = np.array([[int(prompt[-1])], [3]], np.int32)
        inputs = [tokens, np.array([1, -1], np.int32), np.array([6, 2], np.int32)]
        logits = model.run_entry(entry, inputs)
        row = 0
    assert model.swaps == 0 and model.state_address(path) == address
    after = model.state[path]
    changed = np.argwhere((after != before).any(axis=(1, 3)))
    assert changed.tolist() == [[1, 6]]  # row 1 at position 6; the other writes go nowhere
    want = decoder.logits(np.append(prompt, prompt[-1]))[-1]
    assert float(np.abs(logits[row] - want).max()) <= 1e-4


@pytest.mark.parametrize("entry", ["decode_rows", "decode_slots"])
def test_torch_cache_writes_update_the_state_in_place(entry: str) -> None:
    """Generated source writes a donated cache into the state's tensor (no copy per step);
    the logits still equal transformers', and out-of-range writes change nothing."""
    import torch

    import linnet.torch as lt

    decoder = decoder_cases.llama()
    model = lt.load(decoder.source, generics=decoder.generics(BATCH, MAX_SEQ),
                    weights=decoder.weights, compile=True)  # fmt: skip
    path = "model.layers.0.self_attn.k_cache"
    prompt = decoder_cases.prompts(decoder.vocab, [6], seed=4)[0]
    as_torch = [torch.from_numpy(x) for x in (prompt[None], np.array([1], np.int32),
                                                np.array([6], np.int32))]  # fmt: skip
    model.run_entry("prefill_slots", as_torch)
    cache = model.tensor(path)
    before = cache.clone()
    if entry == "decode_rows":
        tokens = np.array([[3], [int(prompt[-1])], [5]], np.int32)
        inputs = [tokens, np.array([-1, 6, MAX_SEQ], np.int32)]
        row = 1
    else:
        tokens = np.array([[int(prompt[-1])], [3]], np.int32)
        inputs = [tokens, np.array([1, -1], np.int32), np.array([6, 2], np.int32)]
        row = 0
    with torch.no_grad():
        logits = model.run_entry(entry, [torch.from_numpy(x) for x in inputs]).numpy()
    assert model.tensor(path).data_ptr() == cache.data_ptr()  # the same memory, written in place
    changed = np.argwhere((cache != before).any(dim=3).any(dim=1).numpy())
    assert changed.tolist() == [[1, 6]]  # row 1 at position 6; the other writes go nowhere
    want = decoder.logits(np.append(prompt, prompt[-1]))[-1]
    np.testing.assert_allclose(logits[row], want, atol=1e-4)
