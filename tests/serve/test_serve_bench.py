"""bench/serve.py runs (tiny shape): every server answers every client, the table prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve.py"
SERVERS = [
    "transformers serve",
    "linnet serve (onnx)",
    "linnet serve (torch)",
    "linnet serve (torch/1)",
]
SMALL = ["--shape", "tiny", "--clients", "1,3", "--new-tokens", "3", "--prompt-tokens", "4",
         "--threads", "1"]  # fmt: skip


def run_bench(*extra: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, str(BENCH), *SMALL, *extra],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout  # fmt: skip
    assert "failed" not in out
    return out[out.index("\nserver ") + 1 :].splitlines()[2:]


def rows(table: list[str]) -> list[tuple[str, str]]:
    """(server, clients) of each table line."""
    return [(line[:24].strip(), line.split()[-8]) for line in table]


@pytest.mark.slow
def test_bench_smoke() -> None:
    """Three servers (the torch one choosing its threads and fixed at 1), 1 and 3 clients,
    3 tokens each: a stream short of its tokens, or a server that fails, would show in the
    table."""
    table = run_bench("--torch-threads", "auto,1")
    assert rows(table) == [(server, clients) for server in SERVERS for clients in ("1", "3")]


def llamacpp_server_path() -> str | None:
    """The PYTHONPATH under which `llama_cpp.server` imports (LLAMACPP_PYTHONPATH), or None."""
    path = os.environ.get("LLAMACPP_PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": path}
    found = subprocess.run([sys.executable, "-c", "import llama_cpp.server.app"], env=env,
                           capture_output=True)  # fmt: skip
    return path if found.returncode == 0 else None


@pytest.mark.slow
def test_bench_llamacpp_peer() -> None:
    """llama.cpp's server on the GGUF that linnet.gguf.export writes: every client gets its
    tokens (its SentencePiece vocabulary reads the prompts as the same token count)."""
    path = llamacpp_server_path()
    if path is None:
        pytest.skip("llama_cpp.server does not import (set LLAMACPP_PYTHONPATH to a build)")
    table = run_bench("--servers", "onnx,llamacpp", "--llamacpp-path", path)
    assert rows(table) == [
        (server, clients)
        for server in ("linnet serve (onnx)", "llama.cpp server")
        for clients in ("1", "3")
    ]
