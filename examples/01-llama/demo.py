"""`make demo`: the Llama example end to end on the bundled default model.

Checks `src/lib.linnet`, writes seeded random weights (make_weights.py) as
SafeTensors, loads the model with `linnet.torch` (generated source,
`compile=True`; interpreted if that fails), runs a prompt through `prefill`
and greedy `decode` over the KV cache, and prints the tokens and timings. It
then verifies the cached path against the `forward` entry (no cache) over the
whole generated sequence, and with `--transformers` against transformers'
`LlamaForCausalLM.generate(do_sample=False)` on the same weights.

Then text in, text out (`text_demo.py`, skipped with `--no-text`): a model card
with a real tokenizer, a prompt's completion streamed through `linnet.serve`'s
engine with tokens/s, and one request through the OpenAI-compatible HTTP server
on 127.0.0.1 with the `openai` client, which must answer the streamed text.

    python examples/01-llama/demo.py [--seed N] [--prompt-length N] [--new-tokens N]
        [--interpreted | --numpy] [--transformers] [--out DIR] [--bind G=V]...
        [--no-text] [--prompt TEXT]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

HERE = Path(__file__).resolve().parent


def load_sibling(name: str) -> ModuleType:
    """A module of this folder, imported under a name no other example's file takes
    (every example has a `make_weights.py`; the folder is not a package)."""
    unique = f"llama_example_{name}"
    if unique in sys.modules:
        return sys.modules[unique]
    spec = importlib.util.spec_from_file_location(unique, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return module


weights_maker = load_sibling("make_weights")
text_demo = load_sibling("text_demo")
DEFAULT_CONFIG: dict[str, object] = weights_maker.DEFAULT_CONFIG
SOURCE: Path = weights_maker.SOURCE
make_weights = weights_maker.make_weights
parameter_count = weights_maker.parameter_count
parse_binds = weights_maker.parse_binds

Array = np.ndarray[Any, Any]


class Backend(Protocol):
    """The three entries of the example, on NumPy arrays in and out."""

    description: str

    def forward(self, tokens: Array) -> Array: ...
    def prefill(self, tokens: Array, start: int) -> Array: ...
    def decode(self, token: Array, position: int) -> Array: ...
    def reset(self) -> None: ...


class TorchBackend:
    """`linnet.torch.load`: the model as an `nn.Module`, state kept between calls."""

    def __init__(
        self,
        config: Mapping[str, object],
        weights: Path | Mapping[str, Any],
        *,
        compile: bool,
        threads: int | None = None,
    ) -> None:
        import torch

        import linnet.torch

        if threads is not None:
            torch.set_num_threads(threads)
        self.torch = torch
        self.module = linnet.torch.load(
            SOURCE, generics=dict(config), weights=weights, compile=compile
        )
        mode = "generated Python source" if compile else "interpreted Core IR"
        count = torch.get_num_threads()
        self.description = f"linnet.torch, compile={compile} ({mode}), {count} thread(s)"

    def _call(self, entry: str, inputs: Sequence[object]) -> Array:
        with self.torch.no_grad():
            result = self.module.run_entry(entry, list(inputs))
        assert isinstance(result, self.torch.Tensor)
        if result.dtype == self.torch.bfloat16:  # NumPy has no bf16: widen, exactly
            result = result.float()
        return result.numpy()

    def forward(self, tokens: Array) -> Array:
        return self._call("forward", [self.torch.from_numpy(tokens)])

    def prefill(self, tokens: Array, start: int) -> Array:
        return self._call("prefill", [self.torch.from_numpy(tokens), start])

    def decode(self, token: Array, position: int) -> Array:
        return self._call("decode", [self.torch.from_numpy(token), position])

    def reset(self) -> None:
        self.module.reset_state()


class InterpreterBackend:
    """`linnet.pipeline` + the NumPy reference interpreter; state kept here."""

    description = "NumPy reference interpreter (linnet.ir.interp)"

    def __init__(self, config: Mapping[str, object], weights: Path | Mapping[str, Any]) -> None:
        from linnet import pipeline

        self.pipeline = pipeline
        self.model = pipeline.load_model(SOURCE, generics=dict(config))
        source = (
            weights if isinstance(weights, Path) else {k: np.asarray(v) for k, v in weights.items()}
        )
        bound = pipeline.bind_weights(self.model, source)
        self.arrays = dict(bound.arrays)
        self.present = frozenset(bound.arrays)
        self.lowered: dict[tuple[object, ...], Any] = {}
        self.state: dict[str, Array] = {}
        self.reset()

    def reset(self) -> None:
        from linnet.ir.core import numpy_dtype

        self.state = {
            path: np.zeros(t.type.shape, numpy_dtype(t.type.dtype))
            for path, t in self.model.tensors.items()
            if t.kind == "state"
        }

    def _call(self, entry: str, inputs: Sequence[Array | np.int32]) -> Array:
        from linnet.ir.core import TensorType, dtype_of_numpy
        from linnet.ir.interp import run_function

        types = [TensorType(np.shape(x), dtype_of_numpy(np.asarray(x).dtype)) for x in inputs]
        key = (entry, tuple(types))
        fn = self.lowered.get(key)
        if fn is None:
            fn = self.pipeline.optimize(self.pipeline.lower(self.model, entry, types, self.present))
            self.lowered[key] = fn
        results, self.state = run_function(fn, self.arrays, self.state, list(inputs))
        logits: Array = results[0]
        return logits

    def forward(self, tokens: Array) -> Array:
        return self._call("forward", [tokens])

    def prefill(self, tokens: Array, start: int) -> Array:
        return self._call("prefill", [tokens, np.int32(start)])

    def decode(self, token: Array, position: int) -> Array:
        return self._call("decode", [token, np.int32(position)])


def timed(call: Callable[[], Array]) -> tuple[Array, float]:
    start = time.perf_counter()
    value = call()
    return value, time.perf_counter() - start


class Generation:
    """Greedy tokens `[Batch, N]`, the logits `[Batch, N, Vocab]` that chose them, and
    the time of each call in seconds."""

    def __init__(self) -> None:
        self.tokens: list[Array] = []
        self.logits: list[Array] = []
        self.prefill_first = 0.0
        self.prefill_warm = 0.0
        self.decode_times: list[float] = []

    @property
    def generated(self) -> Array:
        return np.stack(self.tokens, axis=1).astype(np.int32)

    @property
    def chosen_from(self) -> Array:
        return np.stack(self.logits, axis=1)


def greedy(backend: Backend, prompt: Array, new_tokens: int, *, warm: bool = True) -> Generation:
    """`prefill` the prompt at position 0, then `decode` one token per step.

    The first new token comes from the prefill's last logits, each later one
    from `decode` at the next position: `new_tokens - 1` decode steps, as
    `generate(max_new_tokens=new_tokens)` does. With `warm`, the prefill runs
    three more times (it rewrites the same cache positions) and the fastest of
    those is its time without lowering.
    """
    run = Generation()
    backend.reset()
    logits, run.prefill_first = timed(partial(backend.prefill, prompt, 0))
    if warm:
        repeats = [timed(partial(backend.prefill, prompt, 0)) for _ in range(3)]
        logits, run.prefill_warm = min(repeats, key=lambda pair: pair[1])
    run.logits.append(logits[:, -1])
    token = np.argmax(logits[:, -1], axis=-1).astype(np.int32)
    run.tokens.append(token)
    position = prompt.shape[1]
    for _ in range(new_tokens - 1):
        step, seconds = timed(partial(backend.decode, token, position))
        run.decode_times.append(seconds)
        run.logits.append(step)
        token = np.argmax(step, axis=-1).astype(np.int32)
        run.tokens.append(token)
        position += 1
    return run


def verify_with_forward(backend: Backend, prompt: Array, run: Generation) -> float:
    """Run `forward` (no cache) over prompt + generated tokens: its greedy choices must be
    the decoded tokens. Returns the largest |logit difference| to the cached path."""
    generated = run.generated
    sequence = np.concatenate([prompt, generated[:, :-1]], axis=1)
    logits = backend.forward(sequence)[:, prompt.shape[1] - 1 :]
    chosen = np.argmax(logits, axis=-1)
    if not np.array_equal(chosen, generated):
        raise SystemExit(f"forward disagrees with prefill/decode:\n{chosen}\n{generated}")
    return float(np.abs(logits - run.chosen_from).max())


def transformers_generate(
    config: Mapping[str, object], arrays: Mapping[str, Array], prompt: Array, new_tokens: int
) -> Array:
    """transformers' greedy `generate` on the same weights (f32, eager attention)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    h, heads = dim(config, "H"), dim(config, "Heads")
    hf_config = LlamaConfig(
        vocab_size=dim(config, "Vocab"),
        hidden_size=h,
        num_attention_heads=heads,
        num_key_value_heads=dim(config, "KvHeads"),
        head_dim=h // heads,
        intermediate_size=dim(config, "Inner"),
        num_hidden_layers=dim(config, "Layers"),
        max_position_embeddings=dim(config, "MaxSeq"),
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(hf_config)
    model.eval()
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()})
    ids = torch.from_numpy(prompt.astype(np.int64))
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=new_tokens,
            eos_token_id=None,
            pad_token_id=0,
        )
    generated: Array = out[:, prompt.shape[1] :].numpy().astype(np.int32)
    return generated


def load_backend(
    config: Mapping[str, object], weights: Path, mode: str, threads: int | None = None
) -> tuple[Backend, list[str]]:
    """The requested backend, falling back (and saying why) when one cannot load."""
    notes: list[str] = []
    choices: dict[str, list[bool | None]] = {
        "compiled": [True, False, None],
        "interpreted": [False, None],
        "numpy": [None],
    }
    order = choices[mode]
    for compile in order:
        try:
            backend: Backend
            if compile is None:
                backend = InterpreterBackend(config, weights)
            else:
                backend = TorchBackend(config, weights, compile=compile, threads=threads)
            return backend, notes
        except Exception as error:  # report and fall back; the last one re-raises
            if compile is None:
                raise
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            notes.append(f"linnet.torch compile={compile} failed: {first}")
    raise AssertionError("unreachable")


def dim(config: Mapping[str, object], name: str) -> int:
    value = config[name]
    if not isinstance(value, int):
        raise SystemExit(f"generic {name} must be an integer, got {value!r}")
    return value


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt-length", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--out", type=Path, help="folder for model.safetensors (default: temp)")
    parser.add_argument("--bind", action="append", default=[], metavar="G=V")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: the bundled model is too small to gain from more, "
        "and spinning threads on a busy machine make timings erratic); 0 keeps torch's default",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--interpreted", action="store_true", help="linnet.torch, compile=False")
    group.add_argument("--numpy", action="store_true", help="the NumPy reference interpreter")
    parser.add_argument(
        "--transformers", action="store_true", help="also compare with transformers' generate"
    )
    parser.add_argument("--no-text", action="store_true", help="skip the card and server part")
    parser.add_argument("--prompt", default=text_demo.DEFAULT_PROMPT, help="the text prompt")
    args = parser.parse_args(argv)
    config = parse_binds(args.bind, DEFAULT_CONFIG)
    length, new_tokens = args.prompt_length, args.new_tokens
    vocab, batch, max_seq = (dim(config, k) for k in ("Vocab", "Batch", "MaxSeq"))
    if length < 1 or new_tokens < 1 or length + new_tokens - 1 > max_seq:
        raise SystemExit(f"need 1 <= prompt + new tokens - 1 <= MaxSeq={max_seq}")

    shown = (
        SOURCE.relative_to(HERE.parent.parent)
        if SOURCE.is_relative_to(HERE.parent.parent)
        else SOURCE
    )
    print(f"Linnet Llama demo: {shown}")
    print("  model      LlamaForCausalLM<" + ", ".join(f"{k}={v}" for k, v in config.items()) + ">")

    from linnet.pipeline import check_paths

    start = time.perf_counter()
    program = check_paths([SOURCE])
    seconds = time.perf_counter() - start
    errors = [d for d in program.diagnostics if d.is_error]
    warnings = len(program.diagnostics) - len(errors)
    print(f"  check      {len(errors)} errors, {warnings} warnings ({ms(seconds)})")
    if errors:
        for d in errors:
            print(f"    {d.code}: {d.message}")
        return 1

    from linnet.weights import save_safetensors

    with tempfile.TemporaryDirectory(prefix="linnet-llama-") as temp:
        folder = args.out or Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "model.safetensors"
        start = time.perf_counter()
        arrays = make_weights(config, args.seed)
        save_safetensors(arrays, path, metadata={"format": "pt", "seed": str(args.seed)})
        print(
            f"  weights    {len(arrays)} tensors, {parameter_count(arrays):,} parameters, "
            f"seed {args.seed} -> {path.name} ({ms(time.perf_counter() - start)})"
        )
        mode = "numpy" if args.numpy else "interpreted" if args.interpreted else "compiled"
        start = time.perf_counter()
        backend, notes = load_backend(config, path, mode, args.threads or None)
        for note in notes:
            print(f"  note       {note}")
        print(
            f"  backend    {backend.description}, loaded in {ms(time.perf_counter() - start)} "
            "(framework import included)"
        )

        rng = np.random.default_rng(args.seed + 1)
        prompt = rng.integers(0, vocab, (batch, length)).astype(np.int32)
        for row in prompt:
            print(f"  prompt     {row.tolist()}")
        run = greedy(backend, prompt, new_tokens)
        print(
            f"  prefill    {length} tokens: {ms(run.prefill_first)} first call (lowering "
            f"included), {ms(run.prefill_warm)} warm"
        )
        if run.decode_times:
            first, rest = run.decode_times[0], run.decode_times[1:]
            steady = float(np.median(rest)) if rest else first
            print(
                f"  decode     {len(run.decode_times)} steps: {ms(first)} first step (lowering "
                f"included), {ms(steady)}/token warm, median ({1.0 / steady:.0f} tokens/s)"
            )
        for row in run.generated:
            print(f"  generated  {row.tolist()}")

        start = time.perf_counter()
        gap = verify_with_forward(backend, prompt, run)
        print(
            f"  verify     forward (no cache) over prompt + generated picks the same "
            f"{new_tokens} tokens, max |logit diff| {gap:.1e} ({ms(time.perf_counter() - start)})"
        )
        if args.transformers:
            expected = transformers_generate(config, arrays, prompt, new_tokens)
            same = np.array_equal(expected, run.generated)
            verdict = "identical tokens" if same else f"DIFFERENT tokens: {expected.tolist()}"
            print(
                f"  verify     transformers LlamaForCausalLM.generate(do_sample=False): {verdict}"
            )
            if not same:
                return 1
        if not args.no_text:
            print("Text in, text out: a model card, the engine and the HTTP server")
            card_config = text_demo.card_config(config)
            text = text_demo.run(folder / "card", card_config, make_weights, seed=args.seed,
                                 prompt=args.prompt)  # fmt: skip
            if text.problems or text.served != text.streamed:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
