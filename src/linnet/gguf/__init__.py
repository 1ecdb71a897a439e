"""GGUF files for llama.cpp and Ollama: `export` writes one file with llama.cpp's tensor
names, the Q/K permutation and metadata it expects, and the tokenizer's vocabulary
(`linnet.gguf.writer`); `write_modelfile` writes an Ollama Modelfile beside it.

Needs the `gguf` package (the `gguf` extra), imported when a function runs.
"""

from __future__ import annotations

from linnet.gguf.modelfile import Modelfile, write_modelfile
from linnet.gguf.writer import OUTTYPES, GgufExported, export, permute_rows

__all__ = ["OUTTYPES", "GgufExported", "Modelfile", "export", "permute_rows", "write_modelfile"]
