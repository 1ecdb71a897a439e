"""A `linnet.serve` HTTP server on 127.0.0.1 for tests: a random free port, stopped at the end.

The model is the tiny Llama example with transformers' twin (`decoder_cases`),
its vocabulary that of a byte-level BPE trained for the test (`tokenizer_cases`).
uvicorn runs on a thread of the test process (`linnet.serve.server.background`),
on a socket bound before it starts, so the port is known and free.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import decoder_cases
from tokenizer_cases import bpe_folder

from linnet.serve import Engine
from linnet.serve.protocol import Limits
from linnet.serve.server import Server, background
from linnet.serve.tokenizer import Tokenizer

VOCAB = 320
ROWS, MAX_SEQ = 8, 64


@dataclass
class Running:
    url: str
    server: Server
    decoder: decoder_cases.Decoder
    tokenizer: Tokenizer


def make_server(folder: Path, *, rows: int = ROWS, max_seq: int = MAX_SEQ,
                api_key: str | None = None,
                limits: Limits | None = None) -> tuple[Server, decoder_cases.Decoder]:  # fmt: skip
    import linnet.torch as lt

    tokenizer = Tokenizer.from_folder(bpe_folder(folder))
    assert tokenizer.vocab_size <= VOCAB
    decoder = decoder_cases.llama(vocab=VOCAB)
    model = lt.load(decoder.source, generics=decoder.generics(rows, max_seq),
                    weights=decoder.weights, compile=True)  # fmt: skip
    engine = Engine(model, eos=[])  # random weights: eos would end requests at random
    return Server(
        engine, tokenizer, model_name="tiny-llama", api_key=api_key, limits=limits
    ), decoder


@contextlib.contextmanager
def running(server: Server, decoder: decoder_cases.Decoder) -> Iterator[Running]:
    with background(server) as url:
        yield Running(url, server, decoder, server.tokenizer)
