"""The `linnet` command (language.md 18): check, lint, fmt, inspect, plan, torch, jax,
stablehlo, onnx, triton, init, spec-test, and serve / generate (linnet.serve).

Stage: the outermost shell. In: a command line. Out: text on stdout/stderr
and an exit status:

    0   success (warnings allowed unless `--strict` / `lint`)
    1   the input has errors, `--strict` saw warnings, `fmt --check` found a
        file to reformat, or a file could not be read or written
    2   the command line is wrong: `linnet: <problem>` then the usage, on stderr
    70  an internal error, a bug in linnet (EX_SOFTWARE of sysexits.h, so
        scripts can tell a crash from a program with errors). No traceback is
        shown unless LINNET_TRACEBACK=1; the message asks for a report.

Global options work anywhere before `--`: `--no-color`, `-h`/`--help` (also the
command `help`), `-V`/`--version`. Options take their value as `--std DIR` or
`--std=DIR`; `--` ends the options. `--bind G=V` may be repeated (18.3: `H=64`,
packs `S=2,3`, the empty pack `S=`, dtypes `T=f32`).

Every command imports what it needs when it runs, so `linnet check` never
loads NumPy or a framework and starts about as fast as the interpreter.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from linnet import __version__
from linnet.errors import LinnetError

if TYPE_CHECKING:
    from linnet.quant.source import QuantizedSource
    from linnet.target import Target

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70

USAGE = """\
usage: linnet <command> [options]

commands:
  check [--strict] [--json] [--std DIR] PATH...   check files and directories (and their imports)
  lint [--json] [--std DIR] PATH...                check with warnings failing (check --strict)
  fmt PATH... | fmt --check PATH... | fmt -        format files in place, check them, or stdin
  inspect --parameters [--json] [--std DIR] FILE  the parameter manifest of each block in FILE
  inspect --tokens FILE | inspect --ast FILE       debugging views of the lexer and the parser
  inspect --ir [--entry NAME] [--bind G=V]... [--root BLOCK] [--optionals present|absent]
          [--no-optimize] [--std DIR] FILE         the Core IR of one entry, every generic bound
  plan [--root BLOCK] [--numerics exact|equivalent] [--no-optimize] [--std DIR] FILE
                                                   the plan JSON of the root block
  torch [--entry NAME] [--bind G=V]... [--root BLOCK] [--optionals present|absent]
          [--grad] [--std DIR] FILE                the PyTorch source generated for one entry
  jax [--entry NAME] [--bind G=V]... [--root BLOCK] [--optionals present|absent]
          [--grad] [--std DIR] FILE                the jax.numpy source generated for one entry
  stablehlo [--entry NAME] [--bind G=V]... [--root BLOCK] [--optionals present|absent]
          [--grad] [--std DIR] FILE                one entry as StableHLO MLIR text, static shapes
  onnx [--entry NAME] [--bind G=V]... [--root BLOCK] [--optionals present|absent]
          [--provider cpu|cuda] [--fused] [--grad] [--dynamic G,G...] [--output FILE]
          [--std DIR] FILE                         one entry as ONNX (opset 20) text, or a file
  triton --weights W [--bind G=V]... [--backend onnx|python] [--name NAME] [...] SOURCE OUTPUT
                                                   one model of a Triton Inference Server repository
  init [DIR]                                       create a package (linnet.toml, src/lib.linnet)
  convert FOLDER [-o DIR] [--context N]            a transformers folder -> a model card (nest.toml)
  quantize WEIGHTS -o FILE --pattern GLOB... [--bits 4|8] [--group N] [--method rtn]
          [--scheme int|fp8|mxfp4] [--scale-dtype D]
                                                   float checkpoint -> std.quant layouts
  quantize WEIGHTS -o FILE --source FILE --source-output FILE [--keep NAME]... [...]
                                                   the same, with the source that binds it
  quantize FOLDER -o FILE --import [--scale-dtype D]
                                                   GPTQ / AWQ / compressed-tensors / MXFP4 -> std.quant
  spec-test [--std DIR] DIR                        run a conformance directory
  nest check CARD                                  every problem of a model card (or folder)
  serve CARD | --source FILE --weights W --tokenizer DIR [--generics FILE.json]
          [--bind G=V]... [--backend torch|onnx|jax] [--device D] [--host 127.0.0.1]
          [--port 8000] [--api-key KEY] [--name NAME] [--warmup N] [--root BLOCK] [--std DIR]
          [--int8-activations]
                                                   an OpenAI-compatible server of a decoder
  generate CARD | --source FILE --weights W --tokenizer DIR --prompt TEXT [--chat]
          [--max-tokens N] [--temperature T] [--seed S] (and serve's model options)
                                                   stream a completion, then tokens/s

options:
  --no-color      never colour diagnostics
  -h, --help      show this help (also: linnet help)
  -V, --version   show the version

The standard library comes from --std DIR, else $LINNET_STD, else the copy shipped with linnet.
`linnet <command> --help` shows the options of one command.
"""


_STD_OPTION = "  --std DIR       the standard library (else $LINNET_STD, else the shipped copy)\n"
_TARGET_OPTIONS = """\
  --entry NAME    the entry to compile (needed when there are several)
  --bind G=V      bind a generic: `H=64`, a pack `S=2,3`, the empty pack `S=`, a dtype `T=f32`
                  (repeatable)
  --root BLOCK    the root block (default: the only block with entries; without one,
                  a module-level entry)
  --optionals present|absent
                  whether optional params and subs are present (default: present)
"""

# `linnet <command> --help`: each command's own usage (18.2), on stdout.
_GRAD_OPTION = "  --grad          the loss and its gradients (language-extensions 6)\n"
_MODEL_HELP = (
    "  CARD            a model card folder (nest.toml), or a transformers folder of a known\n"
    "                  family; it gives the source, weights, tokenizer and generics\n"
    "  --source FILE   without a card: the decoder's Linnet source\n"
    "  --weights W     its SafeTensors file or folder (overrides the card's)\n"
    "  --tokenizer DIR a folder with tokenizer.json (overrides the card's)\n"
    "  --generics F    a JSON file of generic values; --bind G=V adds or overrides one\n"
    "  --backend B     torch (default), onnx or jax; --device D for torch\n"
    "  --root BLOCK    the root block; --std DIR the standard library\n"
    "  --threads N     torch on the CPU: every model call's intra-op threads (default: 1 or\n"
    "                  the process's count, whichever each call shape measures faster)\n"
    "  --int8-activations\n"
    "                  torch and onnx: std.quant's int8 / int4 linears round their inputs to\n"
    "                  int8 per block and multiply integers (faster; another function)\n"
)
COMMAND_HELP: dict[str, str] = {
    "check": "usage: linnet check [--strict] [--json] [--std DIR] PATH...\n\n"
    "Check files and directories (searched recursively for *.linnet) and every module\n"
    "they import. Diagnostics go to stderr; on a terminal a one-line summary follows\n"
    "on stdout. Exit status 1 when there are errors.\n\noptions:\n"
    "  --strict        warnings fail too (exit 1)\n"
    "  --json          one JSON document on stdout instead (language.md 16.4)\n" + _STD_OPTION,
    "lint": "usage: linnet lint [--json] [--std DIR] PATH...\n\n"
    "`check --strict`: check, and fail on warnings as well as errors.\n\noptions:\n"
    "  --json          one JSON document on stdout (language.md 16.4)\n" + _STD_OPTION,
    "fmt": "usage: linnet fmt PATH... | linnet fmt --check PATH... | linnet fmt -\n\n"
    "Format files in place (atomically), or stdin to stdout with `-`. Files with\n"
    "syntax errors are reported and left untouched.\n\noptions:\n"
    "  --check         write nothing; print `would reformat PATH` and exit 1 if any would change\n",
    "inspect": "usage: linnet inspect --parameters [--json] [--std DIR] FILE\n"
    "       linnet inspect --tokens FILE | linnet inspect --ast FILE\n"
    "       linnet inspect --ir [--entry NAME] [--bind G=V]... [--root BLOCK]\n"
    "                      [--optionals present|absent] [--no-optimize] [--std DIR] FILE\n\n"
    "Show one view of FILE: the parameter manifest of each top-level block, the tokens,\n"
    "the syntax tree, or the Core IR of one entry with every generic bound.\n\noptions:\n"
    "  --json          the manifest as JSON (only with --parameters)\n"
    "  --no-optimize   the Core IR before optimisation (only with --ir)\n"
    + _TARGET_OPTIONS
    + _STD_OPTION,
    "plan": "usage: linnet plan [--root BLOCK] [--numerics exact|equivalent] [--no-optimize]\n"
    "                   [--std DIR] FILE\n\n"
    "Check and lower FILE and print the plan JSON of its root block (language.md 19).\n\n"
    "options:\n"
    "  --root BLOCK    the root block\n"
    "  --numerics exact|equivalent\n"
    "                  which implementations may replace a library op (default: equivalent)\n"
    "  --no-optimize   skip the Core IR optimisation passes\n" + _STD_OPTION,
    "torch": "usage: linnet torch [--entry NAME] [--bind G=V]... [--root BLOCK]\n"
    "                    [--optionals present|absent] [--grad] [--std DIR] FILE\n\n"
    "Print the PyTorch source generated for one entry, every generic bound.\n\noptions:\n"
    + _TARGET_OPTIONS
    + _GRAD_OPTION
    + _STD_OPTION,
    "jax": "usage: linnet jax [--entry NAME] [--bind G=V]... [--root BLOCK]\n"
    "                  [--optionals present|absent] [--grad] [--std DIR] FILE\n\n"
    "Print the jax.numpy source generated for one entry, every generic bound\n"
    "(what linnet.jax.load_source runs under jax.jit).\n\noptions:\n"
    + _TARGET_OPTIONS
    + _GRAD_OPTION
    + _STD_OPTION,
    "stablehlo": "usage: linnet stablehlo [--entry NAME] [--bind G=V]... [--root BLOCK]\n"
    "                        [--optionals present|absent] [--grad] [--std DIR] FILE\n\n"
    "Print one entry as StableHLO MLIR text with static shapes; the calling contract\n"
    "(inputs, params by path, state in and out) is in the module's linnet.* attributes.\n\n"
    "options:\n" + _TARGET_OPTIONS + _GRAD_OPTION + _STD_OPTION,
    "onnx": "usage: linnet onnx [--entry NAME] [--bind G=V]... [--root BLOCK]\n"
    "                   [--optionals present|absent] [--provider cpu|cuda] [--fused]\n"
    "                   [--grad] [--dynamic G,G...] [--output FILE] [--std DIR] FILE\n\n"
    "Export one entry as ONNX (opset 20): printed as text, or written to --output.\n\n"
    "options:\n" + _TARGET_OPTIONS + "  --provider cpu|cuda\n"
    "                  the ONNX Runtime provider the graph is prepared for (default: cpu)\n"
    "  --fused         use the fused kernels of the provider\n"
    "  --grad          export the loss and its gradients (outputs loss, grad0, grad1, ...)\n"
    "  --dynamic G,G   leave these entry generics symbolic: one graph for every size\n"
    "  --output FILE   write a .onnx file instead of printing text\n" + _STD_OPTION,
    "triton": "usage: linnet triton --weights W [--bind G=V]... [--generics FILE.json]\n"
    "                     [--entry NAME] [--root BLOCK] [--bindings FILE] [--backend onnx|python]\n"
    "                     [--runtime torch|onnx] [--name NAME] [--version N] [--dynamic G,G...]\n"
    "                     [--max-batch-size N] [--idle-seconds S] [--std DIR] SOURCE OUTPUT\n\n"
    "Write one model of a Triton Inference Server repository: OUTPUT/NAME/config.pbtxt and\n"
    "the version folder. --backend onnx (default) writes model.onnx for Triton's ONNX Runtime\n"
    "backend (stateless entries); --backend python writes model.py with the source and the\n"
    "weights, and serves a decoder (prefill_slots/decode_rows) through the sequence batcher.\n\n"
    "options:\n"
    "  --weights W     the SafeTensors file or folder; --bindings FILE maps paths to its names\n"
    "  --bind G=V      bind a generic (repeatable); --generics F a JSON file of generic values\n"
    "  --entry NAME    the entry (python: none, or a serving entry, for a decoder)\n"
    "  --root BLOCK    the root block\n"
    "  --backend B     onnx (default) or python\n"
    "  --runtime R     what model.py runs the entries on: torch (default) or onnx\n"
    "  --name NAME     the model's name (default: from SOURCE)\n"
    "  --version N     the version folder (default: 1)\n"
    "  --dynamic G,G   leave these entry generics symbolic (-1 axes; a batch axis batches)\n"
    "  --max-batch-size N\n"
    "                  the batch limit when the entry batches (default: 8)\n"
    "  --idle-seconds S\n"
    "                  free a decoder sequence idle this long (default: 60)\n" + _STD_OPTION,
    "init": "usage: linnet init [DIR]\n\n"
    "Create a package in DIR (default: the current directory): linnet.toml and, when\n"
    "absent, src/lib.linnet. An existing linnet.toml stops the command.\n",
    "spec-test": "usage: linnet spec-test [--std DIR] DIR\n\n"
    "Run a conformance directory: print `FAIL <file>: <reason>` per failure and\n"
    "`<n> cases, <m> failed`; exit 1 if any failed.\n\noptions:\n" + _STD_OPTION,
    "convert": "usage: linnet convert FOLDER [-o DIR] [--context N]\n\n"
    "Turn a local transformers folder (llama, mistral, qwen2, qwen3, phi3, gpt2) into a model\n"
    "card: nest.toml, the family's Linnet source with the generics config.json sets, and\n"
    "the weights referenced in place. Anything it cannot reproduce exactly is refused,\n"
    "every reason listed.\n\noptions:\n"
    "  -o, --output DIR  the card's folder (default: FOLDER-linnet beside it)\n"
    "  --context N       the KV cache length (default: the config's, at most 4096)\n",
    "quantize": "usage: linnet quantize WEIGHTS -o FILE --pattern GLOB... [--bits 4|8] [--group N]\n"
    "                       [--method rtn] [--scheme int|fp8|mxfp4] [--scale-dtype f32|f16|bf16]\n"
    "       linnet quantize WEIGHTS -o FILE --source FILE --source-output FILE [--keep NAME]...\n\n"
    "Quantise the linear weights of a float SafeTensors checkpoint (a file, a sharded\n"
    "folder or its index) whose names match a glob into the tensors of std.quant's\n"
    "Int4GroupLinear (bits 4) or Int8Linear (bits 8), round to nearest, or of Fp8Linear or\n"
    "Mxfp4Linear (--scheme); every other tensor is copied. The output is written\n"
    "atomically. With --source, the model's float source is rewritten with those blocks\n"
    "in place of its linears (linnet.quant.quantize_source) and the weights it names are\n"
    "quantised (Conv1D weights, [In, Out], transposed first).\n\noptions:\n"
    "  -o, --output FILE      the SafeTensors file to write\n"
    "  --pattern GLOB         tensor names to quantise, e.g. '*_proj.weight' (repeatable)\n"
    "  --source FILE          the float .linnet source: quantise every linear it declares\n"
    "                         (instead of --pattern)\n"
    "  --source-output FILE   where the quantised source goes (with --source)\n"
    "  --keep NAME            a sub member left float, e.g. lm_head (repeatable)\n"
    "  --bits 4|8             int4 groups or int8 rows (default: 4)\n"
    "  --group N              inputs per int4 group (default: 128)\n"
    "  --method rtn           the quantiser (default: rtn, round to nearest)\n"
    "  --scheme S             int (--bits, --group), fp8 (E4M3 rows, Fp8Linear) or mxfp4\n"
    "                         (blocks of 32, Mxfp4Linear) (default: int)\n"
    "  --scale-dtype D        the int4 scales' dtype, the model's T (default: the weight's)\n"
    "  --import               FOLDER is a quantised transformers checkpoint (config.json's\n"
    "                         quantization_config: gptq or awq 4-bit, compressed-tensors\n"
    "                         int4 / fp8 / mxfp4, gpt-oss mxfp4):\n"
    "                         its linears are converted exactly, without --pattern\n",
    "nest": "usage: linnet nest check CARD\n\n"
    "List every problem of a model card (a folder with nest.toml) at once: the card's\n"
    "fields (name, license), README.md, the source's diagnostics, the root block and its\n"
    "generics, the entry, every parameter bound with its shape and dtype, tensors and\n"
    "bindings that bind nothing, and the tokenizer. A transformers folder of a known family\n"
    "is converted first. Exit status 1 when there is a problem.\n",
    "serve": "usage: linnet serve CARD [--bind G=V]... [--backend torch|onnx|jax] [--port PORT] ...\n"
    "       linnet serve --source FILE --weights W --tokenizer DIR [--generics FILE.json]\n"
    "                    [--bind G=V]... [--backend torch|onnx|jax] [--device D] [--host HOST]\n"
    "                    [--port PORT] [--api-key KEY] [--name NAME] [--warmup N] [--root BLOCK]\n"
    "                    [--std DIR] [--prepack SHARE] [--threads N] [--int8-activations]\n\n"
    "Serve a decoder with `prefill_slots` / `decode_rows` entries behind an OpenAI-compatible\n"
    "HTTP server (completions, chat completions, streaming). It binds 127.0.0.1 unless\n"
    "--host says otherwise; with --api-key (or $LINNET_API_KEY) every /v1 route needs\n"
    "`Authorization: Bearer KEY`.\n\noptions:\n"
    + _MODEL_HELP
    + "  --host HOST     the address to bind (default: 127.0.0.1)\n"
    "  --port PORT     the port (default: 8000)\n"
    "  --api-key KEY   require this bearer token on /v1 routes\n"
    "  --name NAME     the model name /v1/models reports\n"
    "  --warmup N      lower every shape for prompts up to N tokens first (default 256; 0: none)\n"
    "  --prepack SHARE --backend onnx: the share of the weights (0 to 1, default 0.3) that\n"
    "                  the decode of every row at once holds again, pre-packed (faster\n"
    "                  batches for that much more memory)\n",
    "generate": "usage: linnet generate CARD --prompt TEXT [--max-tokens N] ...\n"
    "       linnet generate --source FILE --weights W --tokenizer DIR --prompt TEXT\n"
    "                       [--chat] [--max-tokens N] [--temperature T] [--seed S]\n"
    "                       [--generics FILE.json] [--bind G=V]... [--backend torch|onnx|jax]\n\n"
    "Stream a completion of TEXT to the terminal, then the tokens per second.\n\noptions:\n"
    + _MODEL_HELP
    + "  --prompt TEXT   the prompt\n"
    "  --chat          render the prompt with the tokenizer's chat template\n"
    "  --max-tokens N  the most tokens to generate\n"
    "  --temperature T sampling temperature (0: greedy)\n"
    "  --seed S        the sampling seed\n",
}


class UsageError(Exception):
    """A malformed command line: exit status 2 with the usage text."""


class Invocation:
    """A parsed command line: the command, its flags, valued options and operands.

    `values` keeps the last value of each option; `lists` every value of the
    options a command allows more than once (`--bind`).
    """

    __slots__ = ("color", "command", "flags", "lists", "operands", "values")

    def __init__(self, command: str) -> None:
        self.command = command
        self.flags: set[str] = set()
        self.values: dict[str, str] = {}
        self.lists: dict[str, list[str]] = {}
        self.operands: list[str] = []
        self.color = True

    @property
    def std(self) -> Path | None:
        value = self.values.get("--std")
        return Path(value) if value is not None else None


class CommandSpec:
    """A command's function, its flags, its options that take a value, and which repeat."""

    __slots__ = ("flags", "repeated", "run", "valued")

    def __init__(
        self,
        run: Callable[[Invocation], int],
        flags: frozenset[str] = frozenset(),
        valued: frozenset[str] = frozenset(),
        repeated: frozenset[str] = frozenset(),
    ) -> None:
        self.run = run
        self.flags = flags
        self.valued = valued | repeated
        self.repeated = repeated


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; returns the exit status (the console script exits with it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _tolerate_unencodable_output()
    try:
        return _dispatch(args)
    except UsageError as exc:
        sys.stderr.write(f"linnet: {exc}\n\n{USAGE}")
        return EXIT_USAGE
    except LinnetError as exc:
        _report_linnet_error(exc)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        sys.stderr.write("linnet: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (`linnet inspect ... | head`): stop quietly.
        _silence_stdout()
        return EXIT_FAILURE
    except Exception as exc:  # a bug in linnet: never a bare traceback (style.md 7)
        _report_internal_error(exc, args)
        return EXIT_INTERNAL


def _dispatch(args: list[str]) -> int:
    options_end = args.index("--") if "--" in args else len(args)
    head, tail = args[:options_end], args[options_end:]
    words = [a for a in head if a != "--no-color"]
    if words[:1] == ["help"] or any(a in ("-h", "--help") for a in head):
        # `linnet CMD --help` and `linnet help CMD` show the command's own help.
        named = words[1:2] if words[:1] == ["help"] else words[:1]
        sys.stdout.write(COMMAND_HELP.get(named[0], USAGE) if named else USAGE)
        return EXIT_OK
    if any(a in ("-V", "--version") for a in head):
        sys.stdout.write(f"linnet {__version__}\n")
        return EXIT_OK
    color = "--no-color" not in head
    args = [a for a in head if a != "--no-color"] + tail
    if not args:
        raise UsageError("no command given")
    command = args[0]
    spec = _COMMANDS.get(command)
    if spec is None:
        raise UsageError(f"unknown command `{command}`")
    invocation = _parse(command, args[1:], spec)
    invocation.color = color
    return spec.run(invocation)


def _parse(command: str, args: list[str], spec: CommandSpec) -> Invocation:
    """Split the arguments of one command into flags, `--opt value` pairs and operands."""
    invocation = Invocation(command)
    index = 0
    only_operands = False
    while index < len(args):
        arg = args[index]
        index += 1
        if only_operands or arg == "-" or not arg.startswith("-"):
            invocation.operands.append(arg)
        elif arg == "--":
            only_operands = True
        elif arg in spec.flags:
            invocation.flags.add(arg)
        elif arg.split("=", 1)[0] in spec.valued:
            name, has_value, value = arg.partition("=")
            if not has_value:
                if index >= len(args):
                    raise UsageError(f"option `{name}` needs a value")
                value = args[index]
                index += 1
            if not value:
                raise UsageError(f"option `{name}` needs a value")
            invocation.values[name] = value
            if name in spec.repeated:
                invocation.lists.setdefault(name, []).append(value)
        else:
            raise UsageError(f"unknown option `{arg}` for `{command}`")
    return invocation


# -- check / lint ----------------------------------------------------------------------


def _run_check(invocation: Invocation) -> int:
    from linnet.diagnostics import render_human, render_json
    from linnet.pipeline import check_paths

    if not invocation.operands:
        raise UsageError(f"`{invocation.command}` needs at least one path")
    strict = "--strict" in invocation.flags or invocation.command == "lint"
    try:
        program = check_paths([Path(p) for p in invocation.operands], invocation.std)
    except LinnetError as exc:
        if "--json" not in invocation.flags:
            raise
        # a missing path, a folder without sources: still one JSON document
        sys.stdout.write(render_json(exc.diagnostics, failure=exc.message) + "\n")
        return EXIT_FAILURE
    diagnostics = program.diagnostics
    if "--json" in invocation.flags:
        sys.stdout.write(render_json(diagnostics) + "\n")
    elif diagnostics:
        sys.stderr.write(render_human(diagnostics, color=_color_for(sys.stderr, invocation)))
    errors = sum(1 for d in diagnostics if d.is_error)
    warnings = len(diagnostics) - errors
    if "--json" not in invocation.flags and _is_terminal(sys.stdout):
        sys.stdout.write(check_summary(len(program.graph.roots), errors, warnings) + "\n")
    return EXIT_FAILURE if errors or (strict and warnings) else EXIT_OK


def check_summary(files: int, errors: int, warnings: int) -> str:
    """The line `linnet check` ends with on a terminal: `checked 3 files: no errors`."""
    found = [
        f"{count} {word}{'' if count == 1 else 's'}"
        for count, word in ((errors, "error"), (warnings, "warning"))
        if count
    ]
    return f"checked {files} file{'' if files == 1 else 's'}: {', '.join(found) or 'no errors'}"


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


# -- inspect ---------------------------------------------------------------------------

_VIEWS = ("--parameters", "--tokens", "--ast", "--ir")
# Options that only `inspect --ir` (and `torch`) understand.
_IR_ONLY = ("--entry", "--bind", "--root", "--optionals", "--no-optimize")


def _run_inspect(invocation: Invocation) -> int:
    views = [v for v in _VIEWS if v in invocation.flags]
    if len(views) != 1:
        raise UsageError("`inspect` needs exactly one of --parameters, --tokens, --ast, --ir")
    if "--json" in invocation.flags and views[0] != "--parameters":
        raise UsageError("`--json` is only valid with `inspect --parameters`")
    if views[0] != "--ir":
        for option in _IR_ONLY:
            if option in invocation.values or option in invocation.flags:
                raise UsageError(f"`{option}` is only valid with `inspect --ir`")
    path = _one_file(invocation, "`inspect` takes exactly one file")
    if views[0] == "--ir":
        from linnet.commands.compile import show_ir

        optimize = "--no-optimize" not in invocation.flags
        return show_ir(path, _target(invocation), optimize, _color_for(sys.stderr, invocation))
    from linnet.commands.inspect import show_ast, show_parameters, show_tokens

    if views[0] == "--parameters":
        return show_parameters(
            path, invocation.std, "--json" in invocation.flags, _color_for(sys.stderr, invocation)
        )
    show = show_tokens if views[0] == "--tokens" else show_ast
    return show(path, _color_for(sys.stderr, invocation))


def _one_file(invocation: Invocation, message: str) -> Path:
    if len(invocation.operands) != 1:
        raise UsageError(message)
    path = Path(invocation.operands[0])
    if path.is_dir():
        raise LinnetError(f"`{path}` is a directory; `{invocation.command}` takes one file")
    return path


def _target(invocation: Invocation) -> Target:
    """What to compile: the root block, the entry, `--bind` values and optional members."""
    from linnet.target import Target

    optionals = invocation.values.get("--optionals", "present")
    if optionals not in ("present", "absent"):
        raise UsageError(f"`--optionals` takes `present` or `absent`, not `{optionals}`")
    return Target(
        root=invocation.values.get("--root"),
        entry=invocation.values.get("--entry"),
        generics=parse_binds(invocation.lists.get("--bind", [])),
        optionals_present=optionals == "present",
        std=invocation.std,
    )


def parse_binds(binds: Sequence[str]) -> dict[str, str]:
    """`--bind G=V` values (18.3): `H=64`, packs `S=2,3`, the empty pack `S=`, dtypes `T=f32`.

    Values stay text here; binding parses them against each generic's kind.
    """
    out: dict[str, str] = {}
    for bind in binds:
        name, has_value, value = bind.partition("=")
        name = name.strip()
        if not has_value or not name.isidentifier():
            raise UsageError(f"`--bind {bind}` is not of the form G=VALUE")
        if name in out:
            raise UsageError(f"`--bind` gives `{name}` twice")
        out[name] = value.strip()
    return out


# -- plan ------------------------------------------------------------------------------

NUMERICS = ("exact", "equivalent")


def _run_plan(invocation: Invocation) -> int:
    from linnet.commands.plan import show_plan

    path = _one_file(invocation, "`plan` takes exactly one file")
    numerics = invocation.values.get("--numerics", "equivalent")
    if numerics not in NUMERICS:
        raise UsageError(f"`--numerics` takes `exact` or `equivalent`, not `{numerics}`")
    return show_plan(
        path,
        invocation.std,
        invocation.values.get("--root"),
        numerics,
        "--no-optimize" not in invocation.flags,
        _color_for(sys.stderr, invocation),
    )


# -- torch -----------------------------------------------------------------------------


def _run_torch(invocation: Invocation) -> int:
    from linnet.commands.compile import show_torch

    path = _one_file(invocation, "`torch` takes exactly one file")
    grad = "--grad" in invocation.flags
    return show_torch(path, _target(invocation), _color_for(sys.stderr, invocation), grad)


# -- jax / stablehlo ---------------------------------------------------------------------


def _run_jax(invocation: Invocation) -> int:
    from linnet.commands.jax import show_jax, show_stablehlo

    command = invocation.command
    path = _one_file(invocation, f"`{command}` takes exactly one file")
    show = show_jax if command == "jax" else show_stablehlo
    grad = "--grad" in invocation.flags
    return show(path, _target(invocation), _color_for(sys.stderr, invocation), grad)


# -- onnx ------------------------------------------------------------------------------


def _run_onnx(invocation: Invocation) -> int:
    from linnet.commands.onnx import show_onnx

    path = _one_file(invocation, "`onnx` takes exactly one file")
    provider = invocation.values.get("--provider", "cpu")
    if provider not in ("cpu", "cuda"):
        raise UsageError(f"`--provider` takes `cpu` or `cuda`, not `{provider}`")
    output = invocation.values.get("--output")
    dynamic = tuple(
        n.strip() for n in invocation.values.get("--dynamic", "").split(",") if n.strip()
    )
    return show_onnx(
        path,
        _target(invocation),
        _color_for(sys.stderr, invocation),
        provider=provider,
        fused="--fused" in invocation.flags,
        output=Path(output) if output is not None else None,
        grad="--grad" in invocation.flags,
        dynamic=dynamic,
    )


# -- triton ----------------------------------------------------------------------------


def _run_triton(invocation: Invocation) -> int:
    from linnet.commands.serve import read_generics
    from linnet.commands.triton import run_triton

    if len(invocation.operands) != 2:
        raise UsageError("`triton` takes a SOURCE and an OUTPUT folder")
    backend = invocation.values.get("--backend", "onnx")
    if backend not in ("onnx", "python"):
        raise UsageError(f"`--backend` takes `onnx` or `python`, not `{backend}`")
    runtime = invocation.values.get("--runtime", "torch")
    if runtime not in ("torch", "onnx"):
        raise UsageError(f"`--runtime` takes `torch` or `onnx`, not `{runtime}`")
    if "--weights" not in invocation.values:
        raise UsageError("`triton` needs --weights")
    dynamic = [n.strip() for n in invocation.values.get("--dynamic", "").split(",") if n.strip()]
    generics = read_generics(
        invocation.values.get("--generics"), parse_binds(invocation.lists.get("--bind", []))
    )
    options: dict[str, Any] = {
        "name": invocation.values.get("--name"),
        "entry": invocation.values.get("--entry"),
        "root": invocation.values.get("--root"),
        "bindings": invocation.values.get("--bindings"),
        "std_root": invocation.std,
        "backend": backend,
        "runtime": runtime,
        "version": int(_number_option(invocation, "--version", 1, int)),
        "dynamic": dynamic,
        "max_batch_size": int(_number_option(invocation, "--max-batch-size", 8, int)),
        "idle_seconds": float(_number_option(invocation, "--idle-seconds", 60.0, float)),
    }
    source, output = (Path(p) for p in invocation.operands)
    return run_triton(
        source,
        output,
        generics=generics,
        weights=Path(invocation.values["--weights"]),
        options=options,
    )


# -- fmt -------------------------------------------------------------------------------


def _run_fmt(invocation: Invocation) -> int:
    from linnet.commands.fmt import format_paths, format_stdin

    operands = invocation.operands
    if not operands:
        raise UsageError("`fmt` needs a path, or `-` for stdin")
    check = "--check" in invocation.flags
    color = _color_for(sys.stderr, invocation)
    if "-" in operands:
        if len(operands) != 1:
            raise UsageError("`fmt -` reads stdin and cannot be mixed with paths")
        return format_stdin(check, color)
    return format_paths([Path(p) for p in operands], check, color)


# -- init ------------------------------------------------------------------------------


def _run_init(invocation: Invocation) -> int:
    from linnet.commands.init import init_package

    if len(invocation.operands) > 1:
        raise UsageError("`init` takes at most one directory")
    directory = Path(invocation.operands[0]) if invocation.operands else Path.cwd()
    name = init_package(directory)
    sys.stdout.write(f"created package `{name}` in {directory}\n")
    return EXIT_OK


# -- convert ---------------------------------------------------------------------------


def _run_convert(invocation: Invocation) -> int:
    from linnet.convert import convert

    if len(invocation.operands) != 1:
        raise UsageError("`convert` takes exactly one folder")
    output = invocation.values.get("-o", invocation.values.get("--output"))
    context = invocation.values.get("--context")
    if context is not None and not context.isdigit():
        raise UsageError("`--context` needs a positive integer")
    card = convert(
        Path(invocation.operands[0]),
        output=Path(output) if output is not None else None,
        context=int(context) if context is not None else None,
    )
    sys.stdout.write(f"wrote the model card {card.folder} ({card.root}, weights {card.weights})\n")
    return EXIT_OK


# -- quantize --------------------------------------------------------------------------


def _run_quantize(invocation: Invocation) -> int:
    from linnet.quant import import_quantized, quantize_checkpoint

    if len(invocation.operands) != 1:
        raise UsageError("`quantize` takes exactly one checkpoint")
    output = invocation.values.get("-o", invocation.values.get("--output"))
    if output is None:
        raise UsageError("`quantize` needs -o FILE")
    if "--import" in invocation.flags:
        scale = invocation.values.get("--scale-dtype")
        names = import_quantized(invocation.operands[0], output, dtype=scale)
        sys.stdout.write(f"imported {len(names)} quantised linears: {output}\n")
        return EXIT_OK
    patterns = invocation.lists.get("--pattern", [])
    source = invocation.values.get("--source")
    written = invocation.values.get("--source-output")
    if source is not None and (patterns or written is None):
        raise UsageError("`--source` needs --source-output FILE and names the weights itself")
    if source is None and (written is not None or "--keep" in invocation.lists):
        raise UsageError("`--source-output` and `--keep` go with --source FILE")
    if not patterns and source is None:
        raise UsageError("`quantize` needs at least one --pattern GLOB, or --source FILE")
    numbers: dict[str, int] = {}
    for option, default in (("--bits", "4"), ("--group", "128")):
        text = invocation.values.get(option, default)
        if not text.isdigit():
            raise UsageError(f"`{option}` needs a positive integer")
        numbers[option] = int(text)
    scheme = invocation.values.get("--scheme", "int")
    transposed: list[str] = []
    if source is not None and written is not None:
        rewrite = _quantised_source(source, written, invocation, scheme, numbers)
        patterns, transposed = list(rewrite.patterns), list(rewrite.transposed)
    done = quantize_checkpoint(
        invocation.operands[0],
        output,
        patterns=patterns,
        method=invocation.values.get("--method", "rtn"),
        bits=numbers["--bits"],
        group=numbers["--group"],
        dtype=invocation.values.get("--scale-dtype"),
        scheme=scheme,
        transposed=transposed,
    )
    if source is not None and written is not None:
        from linnet.atomic import write_bytes

        write_bytes(written, rewrite.text.encode())
    what = f"int{numbers['--bits']}" if scheme == "int" else scheme
    sys.stdout.write(f"quantised {len(done)} weights to {what}: {output}\n")
    if written is not None:
        sys.stdout.write(f"the source that binds it: {written}\n")
    return EXIT_OK


def _quantised_source(
    source: str, written: str, invocation: Invocation, scheme: str, numbers: dict[str, int]
) -> QuantizedSource:
    """`source` rewritten by `quantize_source` (checked before any file is written)."""
    from linnet.quant import quantize_source

    try:
        text = Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LinnetError(f"{source}: cannot read the source ({exc})") from exc
    if Path(written).resolve() == Path(source).resolve():
        raise UsageError("`--source-output` must not be the --source file")
    return quantize_source(text, scheme=scheme, bits=numbers["--bits"], group=numbers["--group"],
                           keep=invocation.lists.get("--keep", []), path=source)  # fmt: skip


# -- nest ------------------------------------------------------------------------------


def _run_nest(invocation: Invocation) -> int:
    from linnet.nest import check

    operands = invocation.operands
    if operands[:1] != ["check"]:
        raise UsageError("`nest` takes the subcommand `check CARD`")
    if len(operands) != 2:
        raise UsageError("`nest check` takes exactly one card (or transformers folder)")
    problems = check(Path(operands[1]))
    if not problems:
        sys.stdout.write(f"{operands[1]}: a sound model card\n")
        return EXIT_OK
    count = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
    sys.stdout.write(f"{operands[1]}: {count}\n" + "".join(f"  - {p}\n" for p in problems))
    return EXIT_FAILURE


# -- spec-test -------------------------------------------------------------------------


def _run_spec_test(invocation: Invocation) -> int:
    from linnet.spec_test import run_spec_tests

    if len(invocation.operands) != 1:
        raise UsageError("`spec-test` takes exactly one directory")
    directory = Path(invocation.operands[0])
    if not directory.is_dir():
        raise LinnetError(f"`{directory}` is not a directory")
    report = run_spec_tests(directory, invocation.std)
    for file, reason in report.failures:
        sys.stdout.write(f"FAIL {file}: {reason}\n")
    sys.stdout.write(f"{report.cases} cases, {len(report.failures)} failed\n")
    return EXIT_FAILURE if report.failures else EXIT_OK


# -- serve / generate ------------------------------------------------------------------

_MODEL_OPTIONS = frozenset(
    {"--source", "--weights", "--tokenizer", "--generics", "--backend", "--device", "--root",
     "--std", "--threads"}
)  # fmt: skip


def _number_option(invocation: Invocation, name: str, default: float, kind: type) -> Any:
    value = invocation.values.get(name)
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"`{name}` takes a number, not `{value}`") from None


def _serving_engine(invocation: Invocation) -> tuple[Any, Any, str]:
    """(engine, tokenizer, model name) of a CARD operand or the --source options."""
    from linnet.commands.serve import load_card_engine, load_engine, read_generics
    from linnet.serve.tokenizer import Tokenizer

    generics = read_generics(
        invocation.values.get("--generics"), parse_binds(invocation.lists.get("--bind", []))
    )
    values = invocation.values
    backend = values.get("--backend", "torch")
    device = values.get("--device", "cpu")
    weights = Path(values["--weights"]) if "--weights" in values else None
    tokenizer = Path(values["--tokenizer"]) if "--tokenizer" in values else None
    share = _number_option(invocation, "--prepack", 0.0, float) if "--prepack" in values else None
    threads = _number_option(invocation, "--threads", 0, int) if "--threads" in values else None
    if threads is not None and threads < 1:
        raise UsageError(f"`--threads` takes a count of at least 1, not {threads}")
    rounding = "--int8-activations" in invocation.flags
    if invocation.operands:
        if len(invocation.operands) != 1:
            raise UsageError(f"`{invocation.command}` takes one model card")
        clashing = [o for o in ("--source", "--root", "--std") if o in values]
        if clashing:
            raise UsageError(f"a model card gives its own source: drop {', '.join(clashing)}")
        engine, words, name = load_card_engine(
            Path(invocation.operands[0]), generics, backend=backend, device=device,
            weights=weights, tokenizer=tokenizer, prepack=share, threads=threads,
            int8_activations=rounding,
        )  # fmt: skip
        return engine, words, values.get("--name", name)
    missing = [o for o in ("--source", "--weights", "--tokenizer") if o not in values]
    if missing:
        raise UsageError(
            f"`{invocation.command}` needs {', '.join(missing)} (or a model card CARD)"
        )
    engine = load_engine(
        Path(values["--source"]), weights, generics, backend=backend, device=device,
        root=values.get("--root"), std=invocation.std, prepack=share, threads=threads,
        int8_activations=rounding,
    )  # fmt: skip
    assert tokenizer is not None
    return engine, Tokenizer.from_folder(tokenizer), values.get("--name", "linnet")


def _run_serve(invocation: Invocation) -> int:
    from linnet.commands.serve import run_serve

    port = _number_option(invocation, "--port", 8000, int)
    if not 0 <= port < 65536:
        raise UsageError(f"`--port` must be in 0..65535, not {port}")
    engine, tokenizer, name = _serving_engine(invocation)
    return run_serve(
        engine,
        tokenizer,
        host=invocation.values.get("--host", "127.0.0.1"),
        port=port,
        api_key=invocation.values.get("--api-key"),
        name=name,
        warmup=_number_option(invocation, "--warmup", 256, int),
    )


def _run_generate(invocation: Invocation) -> int:
    from linnet.commands.serve import run_generate

    prompt = invocation.values.get("--prompt")
    if prompt is None:
        raise UsageError("`generate` needs --prompt TEXT")
    max_tokens = _number_option(invocation, "--max-tokens", 64, int)
    temperature = _number_option(invocation, "--temperature", 0.0, float)
    seed = invocation.values.get("--seed")
    engine, tokenizer, _ = _serving_engine(invocation)
    return run_generate(
        engine,
        tokenizer,
        prompt,
        chat="--chat" in invocation.flags,
        max_tokens=max_tokens,
        temperature=temperature,
        seed=None if seed is None else int(_number_option(invocation, "--seed", 0, int)),
    )


_COMMANDS: dict[str, CommandSpec] = {
    "check": CommandSpec(_run_check, frozenset({"--strict", "--json"}), frozenset({"--std"})),
    "lint": CommandSpec(_run_check, frozenset({"--strict", "--json"}), frozenset({"--std"})),
    "fmt": CommandSpec(_run_fmt, frozenset({"--check"})),
    "inspect": CommandSpec(
        _run_inspect,
        frozenset({*_VIEWS, "--json", "--no-optimize"}),
        frozenset({"--std", "--entry", "--root", "--optionals"}),
        frozenset({"--bind"}),
    ),
    "plan": CommandSpec(
        _run_plan, frozenset({"--no-optimize"}), frozenset({"--std", "--root", "--numerics"})
    ),
    "torch": CommandSpec(
        _run_torch,
        frozenset({"--grad"}),
        valued=frozenset({"--std", "--entry", "--root", "--optionals"}),
        repeated=frozenset({"--bind"}),
    ),
    "jax": CommandSpec(
        _run_jax,
        frozenset({"--grad"}),
        valued=frozenset({"--std", "--entry", "--root", "--optionals"}),
        repeated=frozenset({"--bind"}),
    ),
    "stablehlo": CommandSpec(
        _run_jax,
        frozenset({"--grad"}),
        valued=frozenset({"--std", "--entry", "--root", "--optionals"}),
        repeated=frozenset({"--bind"}),
    ),
    "onnx": CommandSpec(
        _run_onnx,
        frozenset({"--fused", "--grad"}),
        frozenset(
            {"--std", "--entry", "--root", "--optionals", "--provider", "--output", "--dynamic"}
        ),
        frozenset({"--bind"}),
    ),
    "triton": CommandSpec(
        _run_triton,
        valued=frozenset(
            {
                "--weights",
                "--generics",
                "--entry",
                "--root",
                "--bindings",
                "--backend",
                "--runtime",
                "--name",
                "--version",
                "--dynamic",
                "--max-batch-size",
                "--idle-seconds",
                "--std",
            }
        ),
        repeated=frozenset({"--bind"}),
    ),
    "init": CommandSpec(_run_init),
    "convert": CommandSpec(_run_convert, valued=frozenset({"-o", "--output", "--context"})),
    "quantize": CommandSpec(
        _run_quantize,
        frozenset({"--import"}),
        valued=frozenset(
            {"-o", "--output", "--bits", "--group", "--method", "--scale-dtype", "--scheme"}
        )
        | {"--source", "--source-output"},
        repeated=frozenset({"--pattern", "--keep"}),
    ),
    "nest": CommandSpec(_run_nest),
    "spec-test": CommandSpec(_run_spec_test, valued=frozenset({"--std"})),
    "serve": CommandSpec(
        _run_serve,
        frozenset({"--int8-activations"}),
        valued=_MODEL_OPTIONS
        | {"--host", "--port", "--api-key", "--name", "--warmup", "--prepack"},
        repeated=frozenset({"--bind"}),
    ),
    "generate": CommandSpec(
        _run_generate,
        frozenset({"--chat", "--int8-activations"}),
        _MODEL_OPTIONS | {"--prompt", "--max-tokens", "--temperature", "--seed"},
        frozenset({"--bind"}),
    ),
}


# -- output helpers --------------------------------------------------------------------


def _color_for(stream: TextIO, invocation: Invocation) -> bool:
    """Colour only on a terminal, never with --no-color or NO_COLOR (16.3)."""
    if not invocation.color or os.environ.get("NO_COLOR"):
        return False
    return _is_terminal(stream)


def _tolerate_unencodable_output() -> None:
    """Undecodable source bytes must not crash printing on a non-UTF-8 terminal."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a descriptor
        pass


def _report_linnet_error(exc: LinnetError) -> None:
    sys.stderr.write(f"linnet: {exc.message}\n")
    if exc.diagnostics:
        from linnet.diagnostics import render_human

        sys.stderr.write("\n" + render_human(exc.diagnostics, color=False))


def _report_internal_error(exc: BaseException, args: Sequence[str]) -> None:
    import shlex

    command_line = shlex.join(["linnet", *args])
    sys.stderr.write(
        f"linnet: internal error: {type(exc).__name__}: {exc}\n"
        "linnet: this is a bug in linnet, not a problem with your input; please report it\n"
        "        on the linnet-lang issue tracker with the command line that triggered it:\n"
        f"        {command_line}\n"
    )
    if os.environ.get("LINNET_TRACEBACK") == "1":
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    else:
        sys.stderr.write("linnet: set LINNET_TRACEBACK=1 to see the traceback\n")
