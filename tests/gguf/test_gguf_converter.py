"""`linnet.gguf.export` against llama.cpp's own converter, on the same transformers folder.

Slow, and only where both llama.cpp tools exist: `llama_cpp` (llama-cpp-python,
built from source) importable, and `LINNET_LLAMA_CPP_CONVERTER` naming the folder
that holds `convert_hf_to_gguf.py` with its `gguf-py` (the `vendor/llama.cpp`
folder of llama-cpp-python's source package); otherwise the tests skip, saying why.

Per family the converter reads (llama, phi3: a SentencePiece `tokenizer.model`,
which it knows; its BPE path refuses a tokenizer whose pre-tokenizer it has no
hash for), a random-initialised transformers folder with block-sized rows goes
two ways: `convert_hf_to_gguf.py --outtype f32|f16|q8_0`, and for q4_0 (which
the converter does not write) its f32 file through llama.cpp's quantiser
(`llama_model_quantize`, all tensors Q4_0, as `llama-quantize --pure`); and
`linnet.convert` -> `linnet.gguf.export` at each outtype. Checked: every tensor
has the converter's name, type and bytes; llama.cpp runs both files with the
same logits, so our quantisation error against transformers' f32 logits is the
converter's (and small), and 16 greedy tokens through llama.cpp's cache agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("sentencepiece")

import family_support as fs  # noqa: E402

import linnet.gguf  # noqa: E402
from linnet.convert import convert  # noqa: E402

Array = np.ndarray[Any, Any]
CONVERTER_VARIABLE = "LINNET_LLAMA_CPP_CONVERTER"
OUTTYPES = ("f32", "f16", "q8_0", "q4_0")
FAMILIES = ("llama", "phi3")
# Rows of 64 and 128: every matrix splits into 32-element blocks.
SIZES = {
    "vocab_size": 64,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "max_position_embeddings": 64,
}
# RMS(logits - transformers' f32 logits) / RMS(transformers' logits) allowed: a sanity
# bound only (measured: f32 9e-7, f16 2e-3, q8_0 4e-2, q4_0 0.55 on these random weights,
# with llama.cpp rounding activations to 8 bits for q8_0 and q4_0); the check that
# matters is that the converter's file is no closer.
BOUNDS = {"f32": 1e-5, "f16": 5e-3, "q8_0": 0.1, "q4_0": 0.8}
PROMPT = 12
# llama.cpp looks up Phi-3's `<|end|>` token when `general.name` says phi3, which this
# small tokenizer lacks: both files get another name.
NAME = "linnet-test"
STEPS = 16


def converter_folder() -> Path:
    where = os.environ.get(CONVERTER_VARIABLE)
    if not where:
        pytest.skip(f"{CONVERTER_VARIABLE} does not name llama.cpp's converter folder")
    folder = Path(where)
    if not (folder / "convert_hf_to_gguf.py").is_file() or not (folder / "gguf-py").is_dir():
        pytest.skip(f"{folder} holds no convert_hf_to_gguf.py with its gguf-py")
    return folder


def saved_folder(family: str, folder: Path) -> Any:
    """A random-initialised transformers model of `family` saved with a SentencePiece
    tokenizer (the converter's phi3 path reads `tokenizer_class`)."""
    common = {
        **SIZES,
        "rms_norm_eps": 1e-5,
        "initializer_range": 0.15,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": None,
        "attn_implementation": "eager",
    }
    if family == "llama":
        config: Any = transformers.LlamaConfig(
            **common, head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}
        )
        model_class: Any = transformers.LlamaForCausalLM
    else:
        config = transformers.Phi3Config(**common)
        model_class = transformers.Phi3ForCausalLM
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.add_(0.2 * torch.randn_like(value))
    model.save_pretrained(folder)
    fs.save_sentencepiece(folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({**settings, "tokenizer_class": "LlamaTokenizer"})
    )
    return model


def run_converter(converter: Path, folder: Path, outtype: str, output: Path) -> None:
    paths = [str(converter / "gguf-py"), str(converter), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    done = subprocess.run(
        [sys.executable, str(converter / "convert_hf_to_gguf.py"), str(folder),
         "--outtype", outtype, "--outfile", str(output), "--model-name", NAME],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def quantize_q4_0(llama_cpp: Any, source: Path, output: Path) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0
    params.pure = True
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(source).encode(), str(output).encode(), params) == 0


@pytest.fixture(scope="module", params=FAMILIES)
def files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(family, transformers model, {outtype: (our file, the converter's file)})."""
    llama_cpp = pytest.importorskip("llama_cpp")
    converter = converter_folder()
    family = request.param
    where = tmp_path_factory.mktemp(f"converter-{family}")
    model = saved_folder(family, where / family)
    for outtype in ("f32", "f16", "q8_0"):
        run_converter(converter, where / family, outtype, where / f"peer-{outtype}.gguf")
    quantize_q4_0(llama_cpp, where / "peer-f32.gguf", where / "peer-q4_0.gguf")
    card = convert(where / family, output=where / "card")
    pairs = {}
    for outtype in OUTTYPES:
        ours = where / f"ours-{outtype}.gguf"
        linnet.gguf.export(
            card.source, ours, generics=card.generics, weights=card.weights,
            bindings=card.bindings, outtype=outtype, tokenizer=where / family,
            name=NAME, modelfile=False,
        )  # fmt: skip
        pairs[outtype] = (ours, where / f"peer-{outtype}.gguf")
    return family, model, pairs


@pytest.mark.parametrize("outtype", OUTTYPES)
def test_every_tensor_is_the_converters(files: Any, outtype: str) -> None:
    _, _, pairs = files
    ours, theirs = ({t.name: t for t in gguf.GGUFReader(p).tensors} for p in pairs[outtype])
    assert set(ours) == set(theirs)
    kinds = {t.tensor_type.name for t in ours.values()}
    assert outtype.upper() in kinds
    for name, tensor in theirs.items():
        assert ours[name].tensor_type == tensor.tensor_type, name
        assert np.array_equal(np.asarray(ours[name].data), np.asarray(tensor.data)), name


def llama_cpp_run(path: Path, prompt: Array) -> tuple[Array, list[int]]:
    """llama.cpp's logits of `prompt` (f32 KV cache, 2 threads) and `STEPS` greedy tokens."""
    import llama_cpp

    model = llama_cpp.Llama(
        str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=2, type_k=0, type_v=0
    )
    model.eval(prompt.tolist())
    logits = np.asarray(model.scores[: len(prompt)]).copy()
    chosen = [int(logits[-1].argmax())]
    for _ in range(1, STEPS):
        model.eval([chosen[-1]])
        chosen.append(int(np.asarray(model.scores[model.n_tokens - 1]).argmax()))
    return logits, chosen


def relative_error(logits: Array, reference: Array) -> float:
    return float(np.sqrt(((logits - reference) ** 2).mean() / (reference**2).mean()))


@pytest.mark.parametrize("outtype", OUTTYPES)
def test_llama_cpp_error_is_the_converters(files: Any, outtype: str) -> None:
    _, model, pairs = files
    prompt = fs.tokens_of((1, PROMPT), seed=3, vocab=60)
    reference = fs.hf_logits(model, prompt)[0]
    (ours, our_tokens), (theirs, their_tokens) = (
        llama_cpp_run(p, prompt[0]) for p in pairs[outtype]
    )
    ours_error, their_error = relative_error(ours, reference), relative_error(theirs, reference)
    assert ours_error <= their_error + 1e-7, f"ours {ours_error:.3e}, converter {their_error:.3e}"
    assert ours_error <= BOUNDS[outtype], f"{ours_error:.3e}"
    np.testing.assert_array_equal(ours.argmax(-1), theirs.argmax(-1))
    assert our_tokens == their_tokens
    if outtype == "f32":
        np.testing.assert_array_equal(ours.argmax(-1), reference.argmax(-1))
