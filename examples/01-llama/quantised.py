"""The Llama example with quantised linears: `lib.linnet` with `std.quant` blocks.

`quantised_source(bits, group)` rewrites the example's source so that every
projection (`q/k/v/o_proj`, `gate/up/down_proj`) and `lm_head` is an
`Int4GroupLinear<In, Out, group, T>` (bits 4), an `Int8Linear<In, Out, T>`
(bits 8), an `Fp8Linear` or an `Mxfp4Linear` (`scheme`); the group's
divisibility facts go into the `where` clauses of the blocks that hold them. The
rewrite is the library's, `linnet.quant.quantize_source`, which serves every
decoder family the same way. The parameter paths stay transformers' names, so
`linnet.quant.quantize_checkpoint` with `PATTERNS` turns the float checkpoint
into one this source binds. Generated rather than copied: the model's code
stays in one file.

    python examples/01-llama/quantised.py OUT.linnet --bits 4 [--group 128] [--scheme int|fp8|mxfp4]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from linnet.errors import LinnetError
from linnet.quant import quantize_source

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "src" / "lib.linnet"
PATTERNS = ("*_proj.weight", "lm_head.weight")
"""The float tensors the quantised source reads in the std.quant layouts."""


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
    keep = () if lm_head else ("lm_head",)
    text = source.read_text()
    return quantize_source(
        text, scheme=scheme, bits=bits, group=group, keep=keep, path=str(source)
    ).text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--bits", type=int, choices=(4, 8), default=4)
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--scheme", choices=("int", "fp8", "mxfp4"), default="int")
    args = parser.parse_args(argv)
    try:
        text = quantised_source(args.bits, args.group, scheme=args.scheme)
    except LinnetError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
