"""`linnet generate` and `linnet serve` on the tiny Llama example and a trained BPE tokenizer.

`generate` prints transformers' greedy text for the prompt and ends with tokens/s;
`serve` runs as its own process on 127.0.0.1 (the default host) and a free port,
answers the `openai` client with the API key from `$LINNET_API_KEY`, and is
stopped at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

import decoder_cases  # noqa: E402
from tokenizer_cases import bpe_folder  # noqa: E402

from linnet.cli import main  # noqa: E402
from linnet.serve.tokenizer import Tokenizer  # noqa: E402
from linnet.weights import save_safetensors  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Any, Tokenizer]:
    folder = tmp_path_factory.mktemp("cli")
    decoder = decoder_cases.llama(vocab=320)
    save_safetensors(decoder.weights, folder / "model.safetensors")
    generics = {k: v for k, v in decoder.generics(4, 64).items() if k != "Batch"}
    (folder / "generics.json").write_text(json.dumps(generics))
    tokenizer_dir = bpe_folder(folder / "tokenizer")
    args = ["--source", str(decoder.source), "--weights", str(folder / "model.safetensors"),
            "--tokenizer", str(tokenizer_dir), "--generics", str(folder / "generics.json"),
            "--bind", "Batch=4"]  # fmt: skip
    return args, decoder, Tokenizer.from_folder(tokenizer_dir)


@pytest.mark.parametrize("backend", ["torch", "onnx", "jax"])
def test_generate_streams_the_greedy_text(
    model_files: Any, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args, decoder, tokenizer = model_files
    command = ["generate", *args, "--prompt", "hello world", "--max-tokens", "12"]
    status = main([*command, "--backend", backend])
    out, err = capsys.readouterr()
    assert status == 0, err
    ids = tokenizer.encode("hello world")
    assert out == tokenizer.decode(decoder.generate(np.array(ids), 12)) + "\n"
    assert "12 tokens in" in err and "tokens/s" in err


def test_generate_usage_errors(model_files: Any, capsys: pytest.CaptureFixture[str]) -> None:
    args, _, _ = model_files
    assert main(["generate", *args]) == 2
    assert "--prompt" in capsys.readouterr().err
    assert main(["generate", "--prompt", "x"]) == 2
    assert "needs --source" in capsys.readouterr().err
    assert main(["generate", *args, "--prompt", "x", "--temperature", "hot"]) == 2
    assert main(["serve", *args, "--port", "99999"]) == 2
    assert main(["generate", *args, "--prompt", "x", "--threads", "0"]) == 2
    assert "`--threads` takes a count of at least 1" in capsys.readouterr().err
    assert main(["generate", *args, "--prompt", "x", "--threads", "1", "--backend", "onnx"]) == 1
    assert "threads= is the intra-op thread count" in capsys.readouterr().err
    jax = ["--backend", "jax", "--int8-activations"]
    assert main(["generate", *args, "--prompt", "x", *jax]) == 1
    assert "`--int8-activations` needs `--backend torch` or `onnx`" in capsys.readouterr().err


def test_generate_passes_int8_activations_to_the_backend(
    model_files: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flag reaches `linnet.torch.load` (this float model has no quantised linear, so
    the text is the greedy one: tests/native/test_native_llama.py runs a quantised one)."""
    import linnet.torch

    seen: list[bool] = []
    load = linnet.torch.load

    def spy(*given: Any, **options: Any) -> Any:
        seen.append(options["int8_activations"])
        return load(*given, **options)

    monkeypatch.setattr(linnet.torch, "load", spy)
    args, decoder, tokenizer = model_files
    command = ["generate", *args, "--prompt", "hello", "--max-tokens", "4", "--int8-activations"]
    assert main(command) == 0
    out, _ = capsys.readouterr()
    assert seen == [True]
    assert out == tokenizer.decode(decoder.generate(np.array(tokenizer.encode("hello")), 4)) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_serve_runs_on_localhost_with_the_api_key(model_files: Any) -> None:
    args, decoder, tokenizer = model_files
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC), "LINNET_API_KEY": "k-123",
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "linnet", "serve", *args, "--port", str(port),
                                "--name", "tiny"], env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert json.load(r) == {"status": "ok"}
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k-123",
                               max_retries=0)  # fmt: skip
        out = client.completions.create(model="tiny", prompt="hello", max_tokens=8, temperature=0)
        ids = tokenizer.encode("hello")
        assert out.choices[0].text == tokenizer.decode(decoder.generate(np.array(ids), 8))
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="nope",
                          max_retries=0).models.list()  # fmt: skip
    finally:
        process.terminate()
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
    assert f"http://127.0.0.1:{port}/v1" in err and "an API key required" in err
