"""The Llama example with quantised linears: `lib.linnet` with `std.quant` blocks.

`quantised_source(bits, group)` rewrites the example's source so that every
projection (`q/k/v/o_proj`, `gate/up/down_proj`) and `lm_head` is an
`Int4GroupLinear<In, Out, group, T>` (bits 4), an `Int8Linear<In, Out, T>`
(bits 8), an `Fp8Linear` or an `Mxfp4Linear` (`scheme`); the group's
divisibility facts go into the `where` clauses of the blocks that hold them. The parameter paths stay transformers' names, so
`linnet.quant.quantize_checkpoint` with `PATTERNS` turns the float checkpoint
into one this source binds. Generated rather than copied: the model's code
stays in one file.

    python examples/01-llama/quantised.py OUT.linnet --bits 4 [--group 128] [--scheme int|fp8|mxfp4]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src" / "lib.linnet"
PATTERNS = ("*_proj.weight", "lm_head.weight")
"""The float tensors the quantised source reads in the std.quant layouts."""

_HOLDERS = ("LlamaAttention", "LlamaDecoderLayer", "LlamaModel", "LlamaForCausalLM")
_LINEAR = re.compile(r"(sub \w+: )Linear<([^,]+), ([^,]+), T>")
_PROJECTION = re.compile(r"(sub (?!lm_head:)\w+: )Linear<([^,]+), ([^,]+), T>")


def quantised_source(
    bits: int,
    group: int = 128,
    source: Path = SOURCE,
    *,
    lm_head: bool = True,
    scheme: str = "int",
) -> str:
    """The example's source with quantised linears: `scheme` `int` with `bits` 4 (groups of
    `group` inputs) or 8 (per row), `fp8` (E4M3 rows) or `mxfp4` (blocks of 32);
    `lm_head=False` keeps `lm_head` a float `Linear`, as GPTQ and AWQ checkpoints do."""
    text = source.read_text()
    linear = _LINEAR if lm_head else _PROJECTION
    if scheme == "fp8":
        block = "Fp8Linear"
        text = linear.sub(r"\1Fp8Linear<\2, \3, T>", text)
    elif scheme == "mxfp4":
        block = "Mxfp4Linear"
        text = _divisible(linear.sub(r"\1Mxfp4Linear<\2, \3, T>", text), 32)
    elif scheme != "int":
        raise ValueError(f"scheme must be int, fp8 or mxfp4, not {scheme}")
    elif bits == 8:
        block = "Int8Linear"
        text = linear.sub(r"\1Int8Linear<\2, \3, T>", text)
    elif bits == 4:
        block = "Int4GroupLinear"
        text = _divisible(linear.sub(rf"\1Int4GroupLinear<\2, \3, {group}, T>", text), group)
    else:
        raise ValueError(f"bits must be 4 or 8, not {bits}")
    text = _without_training_entries(text)
    uses = "use std.nn.rope::{rope, rope_rows}\n"
    text = text.replace(uses, uses + f"use std.quant::{{{block}}}\n")
    return text.replace("use std.nn.linear::{Linear}\n", "") if lm_head else text


def _divisible(text: str, group: int) -> str:
    """`text` with the facts `H`, `Inner` and `Heads * HeadDim` divisible by `group` in the
    `where` clauses of the blocks that hold grouped linears."""
    facts = f"    H % {group} == 0,\n    Inner % {group} == 0,\n"
    attention = f"    H % {group} == 0,\n    (Heads * HeadDim) % {group} == 0,\n"
    for name in _HOLDERS:
        extra = attention if name == "LlamaAttention" else facts
        if name != "LlamaAttention":
            extra += f"    (Heads * HeadDim) % {group} == 0,\n"
        start = text.index(f"pub block {name}<")
        at = text.index("\nwhere\n", start) + len("\nwhere\n")
        text = text[:at] + extra + text[at:]
    mlp = "pub block LlamaMlp<H: Dim, Inner: Dim, T: Float> {"
    return text.replace(
        mlp,
        "pub block LlamaMlp<H: Dim, Inner: Dim, T: Float>\n"
        f"where\n    H % {group} == 0,\n    Inner % {group} == 0\n{{",
    )


_TRAINING_ENTRY = re.compile(r"\n    pub entry (?:log_probs|loss)_packed<.*?\n    }\n", re.S)


def _without_training_entries(text: str) -> str:
    """The source less the entries that read `lm_head.weight` as a float matrix (the chunked
    training losses): a quantised model is for inference; `hidden_packed` stays."""
    text = _TRAINING_ENTRY.sub("", text)
    return text.replace("use std.nn.loss::{linear_cross_entropy, linear_token_log_probs}\n", "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--bits", type=int, choices=(4, 8), default=4)
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--scheme", choices=("int", "fp8", "mxfp4"), default="int")
    args = parser.parse_args(argv)
    args.output.write_text(quantised_source(args.bits, args.group, scheme=args.scheme))
    return 0


if __name__ == "__main__":
    sys.exit(main())
