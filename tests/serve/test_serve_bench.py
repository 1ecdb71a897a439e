"""bench/serve.py runs (tiny shape): every server answers every client, the table prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("transformers")
pytest.importorskip("onnxruntime")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve.py"
SERVERS = ["transformers serve", "linnet serve (onnx)", "linnet serve (torch)"]


@pytest.mark.slow
def test_bench_smoke() -> None:
    """Three servers, 1 and 3 clients, 3 tokens each: a stream short of its tokens, or a
    server that fails, would show in the table."""
    out = subprocess.run(
        [sys.executable, str(BENCH), "--shape", "tiny", "--clients", "1,3", "--new-tokens", "3",
         "--prompt-tokens", "4", "--threads", "1"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout  # fmt: skip
    table = out[out.index("server ") :].splitlines()[2:]
    assert [(line[:24].strip(), line.split()[-7]) for line in table] == [
        (server, clients) for server in SERVERS for clients in ("1", "3")
    ]
    assert "failed" not in out
