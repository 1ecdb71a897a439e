"""A `linnet.serve` HTTP server on 127.0.0.1 for tests: a random free port, stopped at the end.

The model is the tiny Llama example with transformers' twin (`decoder_cases`),
its vocabulary that of a byte-level BPE trained for the test (`tokenizer_cases`).
uvicorn runs on a thread of the test process, on a socket bound before it
starts, so the port is known and free.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import decoder_cases
from tokenizer_cases import bpe_folder

from linnet.serve import Engine
from linnet.serve.protocol import Limits
from linnet.serve.server import Server, create_app
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
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(server), log_level="warning", timeout_keep_alive=5)
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield Running(f"http://127.0.0.1:{port}", server, decoder, server.tokenizer)
    finally:
        instance.should_exit = True
        thread.join(timeout=30)
        sock.close()
