"""`linnet.serve.Engine` on the tiny Llama and GPT-2 examples, against transformers.

Greedy completions equal transformers' `generate` of each prompt alone, with
more requests than cache rows (so rows are freed and reused mid-run), on
`linnet.torch` and ONNX Runtime. Seeded sampling gives the same tokens alone, in
a batch and on both backends; the log-probabilities are transformers'
log-softmax; stop sequences are never released; cancelling frees a row without
disturbing the others; `load_weights` swaps the weights in place, and
`copy_weights` copies torch tensors by path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import decoder_cases  # noqa: E402

import linnet.torch as lt  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.onnx.runtime.model import load_model  # noqa: E402
from linnet.serve import Engine, Request, TokenEvent  # noqa: E402
from linnet.weights import save_safetensors  # noqa: E402

ROWS, MAX_SEQ = 4, 32
IDENTITY = """module identity
pub block Identity {
    pub entry forward(x: Tensor[2; f32]) -> Tensor[2; f32] {
        return x
    }
}
"""
LENGTHS = [5, 9, 7, 4, 12, 3]


@pytest.fixture(scope="module")
def llama() -> decoder_cases.Decoder:
    return decoder_cases.llama()


def torch_engine(decoder: decoder_cases.Decoder, weights: Any = None) -> Engine:
    model = lt.load(decoder.source, generics=decoder.generics(ROWS, MAX_SEQ),
                    weights=decoder.weights if weights is None else weights, compile=True)  # fmt: skip
    return Engine(model)


def onnx_engine(decoder: decoder_cases.Decoder, weights: Any = None) -> Engine:
    model = load_model(decoder.source, generics=decoder.generics(ROWS, MAX_SEQ),
                       weights=decoder.weights if weights is None else weights)  # fmt: skip
    return Engine(model)


def sampled(prompts: list[Any], **options: Any) -> list[Request]:
    return [
        Request(p, max_new_tokens=8, temperature=0.9, top_k=20, top_p=0.9, seed=100 + i, **options)
        for i, p in enumerate(prompts)
    ]


@pytest.mark.parametrize(
    ("family", "backend"),
    [
        ("llama", "torch"),
        ("gpt2", "torch"),
        ("qwen2", "torch"),
        ("qwen3", "onnx"),
        ("phi3", "onnx"),
    ],
)
def test_greedy_completions_equal_generate_with_rows_reused(family: str, backend: str) -> None:
    """Every decoder example's streams, batched through `decode_slots`, decode as each
    alone in transformers."""
    decoder = getattr(decoder_cases, family)()
    prompts = decoder_cases.prompts(decoder.vocab, LENGTHS, seed=3)
    engine = (torch_engine if backend == "torch" else onnx_engine)(decoder)
    assert engine.decoder.slotted
    completions, stats = engine.run([Request(p, max_new_tokens=10, temperature=0) for p in prompts])
    for prompt, completion in zip(prompts, completions, strict=True):
        assert completion.tokens == decoder.generate(prompt, 10)
        assert completion.finish_reason == "length"
        assert completion.ttft is not None and len(completion.inter_token) == 9
    assert stats.completed == 6 and stats.generated_tokens == 60
    assert stats.prefill_calls >= 2  # six requests through four rows: admitted in waves
    assert stats.busy_rows <= stats.decode_calls * ROWS
    if backend == "onnx":  # only the full-batch decode pre-packs, within its share (OnnxDecoder)
        model = engine.decoder.model
        packed = [s for s in model.sessions if s.constant_paths]
        assert [(s.entry, s.contract.result_types[0].shape[0]) for s in packed] == [
            ("decode_slots", ROWS)
        ]
        assert packed[0].runs > 0
        size = sum(model.weights[p].numpy().nbytes for p in packed[0].constant_paths)
        assert 0 < size <= engine.decoder.prepack < model.weight_bytes


def test_prepack_is_a_checked_share_of_an_onnx_models_weights(
    llama: decoder_cases.Decoder,
) -> None:
    model = load_model(llama.source, generics=llama.generics(ROWS, MAX_SEQ), weights=llama.weights)
    with pytest.raises(LinnetError, match="from 0 to 1"):
        Engine(model, prepack=1.5)
    prompts = decoder_cases.prompts(llama.vocab, LENGTHS[:ROWS], seed=8)
    completions, _ = Engine(model, prepack=0).run(
        [Request(p, max_new_tokens=4, temperature=0) for p in prompts]
    )
    assert [c.tokens for c in completions] == [llama.generate(p, 4) for p in prompts]
    assert not any(s.constant_paths for s in model.sessions)  # 0: nothing pre-packed
    on_torch = lt.load(llama.source, generics=llama.generics(ROWS, MAX_SEQ), weights=llama.weights)
    with pytest.raises(LinnetError, match="ONNX Runtime"):
        Engine(on_torch, prepack=0.5)


def test_onnx_engine_greedy_and_seeded_equal_torch(llama: decoder_cases.Decoder) -> None:
    prompts = decoder_cases.prompts(llama.vocab, LENGTHS, seed=4)
    on_torch, on_onnx = torch_engine(llama), onnx_engine(llama)
    greedy = [Request(p, max_new_tokens=6, temperature=0) for p in prompts]
    completions, _ = on_onnx.run(greedy)
    assert [c.tokens for c in completions] == [llama.generate(p, 6) for p in prompts]
    a, _ = on_torch.run(sampled(prompts))
    b, _ = on_onnx.run(sampled(prompts))
    assert [c.tokens for c in a] == [c.tokens for c in b]


def test_a_seeded_request_is_the_same_alone_and_in_any_batch(llama: decoder_cases.Decoder) -> None:
    prompts = decoder_cases.prompts(llama.vocab, LENGTHS, seed=5)
    engine = torch_engine(llama)
    together, _ = engine.run(sampled(prompts))
    alone = [engine.run([r])[0][0] for r in sampled(prompts)]
    reversed_order, _ = engine.run(sampled(prompts)[::-1])
    assert [c.tokens for c in together] == [c.tokens for c in alone]
    assert [c.tokens for c in together] == [c.tokens for c in reversed_order[::-1]]
    distinct = {tuple(c.tokens) for c in together}
    assert len(distinct) == len(prompts)


def test_logprobs_are_the_models_log_softmax(llama: decoder_cases.Decoder) -> None:
    prompt = decoder_cases.prompts(llama.vocab, [6], seed=6)[0]
    engine = torch_engine(llama)
    (completion,), _ = engine.run(sampled([prompt], logprobs=3))
    assert completion.logprobs is not None and len(completion.logprobs) == 8
    sequence = [*map(int, prompt), *completion.tokens]
    logits = torch.from_numpy(llama.logits(np.array(sequence[:-1])))[len(prompt) - 1 :]
    want = torch.log_softmax(logits, dim=-1)
    for step, entry in enumerate(completion.logprobs):
        assert entry.token == completion.tokens[step]
        assert abs(entry.logprob - float(want[step, entry.token])) < 1e-4
        top = torch.topk(want[step], 3)
        assert [t for t, _ in entry.top] == top.indices.tolist()
        np.testing.assert_allclose([v for _, v in entry.top], top.values.numpy(), atol=1e-4)


def test_stop_sequences_end_the_request_unreleased(llama: decoder_cases.Decoder) -> None:
    prompt = decoder_cases.prompts(llama.vocab, [7], seed=7)[0]
    engine = torch_engine(llama)
    (free,), _ = engine.run([Request(prompt, max_new_tokens=12, temperature=0)])
    stop = free.tokens[4:6]
    events: list[TokenEvent] = []
    request = Request(prompt, max_new_tokens=12, temperature=0, stop=[stop, [999]],
                      on_token=events.append)  # fmt: skip
    (stopped,), _ = engine.run([request])
    first = next(i for i in range(len(free.tokens)) if free.tokens[i : i + 2] == stop)
    assert stopped.tokens == free.tokens[:first]
    assert stopped.finish_reason == "stop"
    streamed = [t for e in events for t in e.tokens]
    assert streamed == stopped.tokens  # the stop's first token was held, never streamed
    assert events[-1].finished and events[-1].finish_reason == "stop"

    eos = free.tokens[3]
    (ended,), _ = engine.run([Request(prompt, max_new_tokens=12, temperature=0, eos=[eos])])
    assert ended.tokens == free.tokens[: free.tokens.index(eos) + 1]
    assert ended.finish_reason == "stop"


def test_cancel_frees_the_row_and_leaves_the_others(llama: decoder_cases.Decoder) -> None:
    prompts = decoder_cases.prompts(llama.vocab, [5, 6, 7, 8, 9], seed=8)
    engine = torch_engine(llama)
    ids = [engine.submit(Request(p, max_new_tokens=10, temperature=0)) for p in prompts]
    done = {c.request_id: c for c in engine.step()}
    assert engine.active_rows == ROWS  # the fifth waits for a row
    assert engine.cancel(ids[1])
    assert not engine.cancel(12345)
    while engine.busy:
        done |= {c.request_id: c for c in engine.step()}
    assert done[ids[1]].finish_reason == "cancelled"
    for i in (0, 2, 3, 4):
        assert done[ids[i]].tokens == llama.generate(prompts[i], 10)
    assert engine.stats.cancelled == 1


def test_a_failing_callback_cancels_only_its_request(llama: decoder_cases.Decoder) -> None:
    prompts = decoder_cases.prompts(llama.vocab, [5, 6], seed=9)

    def broken(event: TokenEvent) -> None:
        raise ConnectionError("client went away")

    engine = torch_engine(llama)
    requests = [Request(prompts[0], max_new_tokens=6, temperature=0, on_token=broken),
                Request(prompts[1], max_new_tokens=6, temperature=0)]  # fmt: skip
    (a, b), _ = engine.run(requests)
    assert a.finish_reason == "cancelled"
    assert b.tokens == llama.generate(prompts[1], 6)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_load_weights_copies_new_weights_in_place(
    llama: decoder_cases.Decoder, backend: str, tmp_path: Path
) -> None:
    other = decoder_cases.llama(seed=1)
    path = tmp_path / "model.safetensors"
    save_safetensors(llama.weights, path)  # memory-mapped read-only by the loader
    make = torch_engine if backend == "torch" else onnx_engine
    engine = make(llama, weights=path)
    prompts = decoder_cases.prompts(llama.vocab, [5, 8], seed=10)
    greedy = [Request(p, max_new_tokens=8, temperature=0) for p in prompts]
    before, _ = engine.run(greedy)
    assert [c.tokens for c in before] == [llama.generate(p, 8) for p in prompts]
    engine.load_weights(other.weights)
    after, _ = engine.run(greedy)
    assert [c.tokens for c in after] == [other.generate(p, 8) for p in prompts]
    assert [c.tokens for c in after] != [c.tokens for c in before]
    with pytest.raises(LinnetError):
        engine.load_weights({"lm_head.weight": np.zeros((3, 3), np.float32)})


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_copy_weights_takes_tensors_by_path(llama: decoder_cases.Decoder, backend: str) -> None:
    """Torch tensors (how a trainer hands over its parameters) or arrays, no binding."""
    other = decoder_cases.llama(seed=1)
    # copies: ONNX Runtime on the CPU binds the arrays it is given and writes into them
    own = {k: v.copy() for k, v in llama.weights.items()}
    engine = (torch_engine if backend == "torch" else onnx_engine)(llama, weights=own)
    prompts = decoder_cases.prompts(llama.vocab, [5, 8], seed=12)
    greedy = [Request(p, max_new_tokens=8, temperature=0) for p in prompts]
    engine.copy_weights({k: torch.from_numpy(v.copy()) for k, v in other.weights.items()})
    after, _ = engine.run(greedy)
    assert [c.tokens for c in after] == [other.generate(p, 8) for p in prompts]
    engine.copy_weights(llama.weights)
    again, _ = engine.run(greedy)
    assert [c.tokens for c in again] == [llama.generate(p, 8) for p in prompts]
    with pytest.raises(LinnetError, match=r"`lm_head\.weight` has shape"):
        engine.copy_weights({"lm_head.weight": torch.zeros(3, 3)})
    with pytest.raises(LinnetError, match=r"no (bound )?weight at `nowhere`"):
        engine.copy_weights({"nowhere": torch.zeros(3)})


def test_warmup_reset_and_bad_requests(llama: decoder_cases.Decoder) -> None:
    engine = torch_engine(llama)
    engine.warmup(prompt_lengths=[4, 12])
    prompt = decoder_cases.prompts(llama.vocab, [4], seed=11)[0]
    (c,), stats = engine.run([Request(prompt, max_new_tokens=5, temperature=0)])
    assert c.tokens == llama.generate(prompt, 5) and stats.requests == 1
    engine.submit(Request(prompt, max_new_tokens=5))
    with pytest.raises(LinnetError, match="idle"):
        engine.warmup()
    engine.reset()
    assert not engine.busy and engine.stats.requests == 0
    with pytest.raises(LinnetError, match="MaxSeq = 32"):
        engine.submit(Request(list(range(30)), max_new_tokens=5))
    for bad in ({"prompt": []}, {"max_new_tokens": 0}, {"temperature": -1.0},
                {"top_p": 0.0}, {"top_k": -2}, {"logprobs": -1}, {"stop": [[]]}):  # fmt: skip
        with pytest.raises(LinnetError):
            Request(**{"prompt": [1, 2], **bad})
    with pytest.raises(LinnetError, match="prefill_slots"):
        Engine(lt.load(IDENTITY))


def test_prefill_token_budget_splits_a_group(llama: decoder_cases.Decoder) -> None:
    model = lt.load(llama.source, generics=llama.generics(ROWS, MAX_SEQ), weights=llama.weights,
                    compile=True)  # fmt: skip
    engine = Engine(model, max_prefill_tokens=24)  # 8-token buckets: two prompts per call
    prompts = decoder_cases.prompts(llama.vocab, [3, 5, 8, 6], seed=12)
    completions, stats = engine.run([Request(p, max_new_tokens=4, temperature=0) for p in prompts])
    assert stats.prefill_calls == 2
    assert stats.prefill_padding == 2 * 2 * 8 - sum(len(p) for p in prompts)
    assert [c.tokens for c in completions] == [llama.generate(p, 4) for p in prompts]
