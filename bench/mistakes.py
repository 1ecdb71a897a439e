"""The mistake corpus: one seeded mistake per program, generated from valid sources.

Every case starts from a valid module of the repository (an example under
`examples/*/src` or a standard-library module under `stdlib/`), checks it to
learn what each name denotes, and applies one mutation whose expected error
code and line follow from the mutation alone (never from the checker's output
on the mutated program):

- a misspelt keyword starting an item, member or statement (E1101 there);
- a misspelt name of each kind: local, parameter, index variable, function,
  prelude function, member, method, block, type, generic, constant, imported
  item, module path (E1201, E3101, E2107, E1202 at the misspelt name's line);
- a PyTorch class name for a std function (`LayerNorm` for `layer_norm`, E1201);
- a missing import (an imported name removed: E1201 at its first use);
- a wrong number of arguments (E2102), swapped arguments (E2202/E2103/E2101
  at the call), a wrong result dtype (E2103 at the `return`), bad generic
  arguments (E2111 at the type);
- weights: a checkpoint storing one parameter transposed, or under a key one
  edit away from its path (one problem naming both).

A case passes when checking gives exactly one error, with the expected code,
at the expected line, carrying a help line. Nothing is stored but this
generator: the sites are picked by a seeded random choice among all sites of
each kind, so the corpus is the same on every run.

`bench/diagnostics.py` prints the table; `tests/check/test_mistake_corpus.py`
asserts the aim.
"""

from __future__ import annotations

import itertools
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from linnet.check.decls import (
    BlockInfo,
    ConstInfo,
    FnInfo,
    GenericInfo,
    IndexVar,
    LocalInfo,
    MemberInfo,
    PreludeFn,
)
from linnet.check.program import CheckedProgram
from linnet.check.types import ScalarType, TensorType
from linnet.diagnostics import Diagnostic
from linnet.pipeline import check_paths
from linnet.source import SourceFile
from linnet.syntax import ast
from linnet.syntax.lexer import lex
from linnet.syntax.tokens import KEYWORDS, PRELUDE_NAMES, RESERVED, Kind

ROOT = Path(__file__).resolve().parents[1]
STDLIB = ROOT / "stdlib"
SEED = 11
PER_KIND = 1  # sites of one kind drawn from one file (bench/diagnostics.py --per-kind)

# PyTorch module names a user reaches for, and the std function each one is.
TORCH_NAMES = {
    "layer_norm": "LayerNorm",
    "rms_norm": "RMSNorm",
    "softmax": "Softmax",
    "gelu": "GELU",
    "gelu_erf": "GELU",
    "silu": "SiLU",
    "relu": "ReLU",
    "sigmoid": "Sigmoid",
    "linear": "Linear",
    "embedding": "Embedding",
    "conv2d": "Conv2d",
    "log_softmax": "LogSoftmax",
}


@dataclass(frozen=True)
class Mistake:
    """One program of the corpus: a file's text with one seeded mistake."""

    kind: str  # "misspelt method", "wrong arity", ...
    origin: str  # the valid file, relative to the repository
    text: str  # the mutated file's text ("" for weights cases)
    code: str  # expected error code ("weights" for binding cases)
    line: int  # expected line (0 for weights cases)
    wanted: str = ""  # text the help must contain (the meant name in backticks, a `use`)
    detail: str = ""  # what changed, for the table


@dataclass
class Outcome:
    """What checking one mistake gave."""

    mistake: Mistake
    errors: list[tuple[str, int, str, tuple[str, ...]]] = field(default_factory=list)

    @property
    def one_error(self) -> bool:
        return len(self.errors) == 1

    @property
    def right_code(self) -> bool:
        return self.one_error and self.errors[0][0] == self.mistake.code

    @property
    def right_line(self) -> bool:
        return self.one_error and self.errors[0][1] == self.mistake.line

    @property
    def has_help(self) -> bool:
        return bool(self.errors) and all(e[3] for e in self.errors)

    @property
    def suggests(self) -> bool:
        """The wanted name appears in the help (True when nothing is wanted)."""
        if not self.mistake.wanted:
            return True
        return any(self.mistake.wanted in h for e in self.errors for h in e[3])

    @property
    def passed(self) -> bool:
        return self.right_code and self.right_line and self.has_help


# ---------------------------------------------------------------- sources


def valid_sources() -> list[Path]:
    """Every valid module the corpus mutates: the examples' sources, then the std library."""
    return sorted(ROOT.glob("examples/*/src/*.linnet")) + sorted(STDLIB.rglob("*.linnet"))


def _misspell(name: str, taken: set[str], rng: random.Random) -> str | None:
    """A typo of `name` (a swap, a dropped or doubled letter) that names nothing."""
    if len(name) < 3:
        return None
    options: list[str] = []
    for i in range(1, len(name) - 1):
        if name[i] != name[i + 1]:
            options.append(name[:i] + name[i + 1] + name[i] + name[i + 2 :])
    options += [name[:i] + name[i + 1 :] for i in range(1, len(name))]
    options += [name[: i + 1] + name[i] + name[i + 1 :] for i in range(1, len(name))]
    fresh = [
        o
        for o in dict.fromkeys(options)
        if o.isidentifier()
        and not o.startswith("_")
        and o not in taken
        and o not in KEYWORDS
        and o not in RESERVED
        and o not in PRELUDE_NAMES
    ]
    return rng.choice(fresh) if fresh else None


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _replace(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


@dataclass
class _Site:
    kind: str
    start: int
    end: int
    name: str


def _walk(node: object) -> Iterator[object]:
    """Every syntax node under `node` (tuples flattened), `node` included."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, tuple):
            stack.extend(current)
        elif ast.is_node(current):
            yield current
            stack.extend(getattr(current, name) for name in ast.node_fields(current))


def _name_sites(program: CheckedProgram, path: str) -> list[_Site]:
    """Every identifier use in file `path` that names something, with its kind."""
    sites: list[_Site] = []
    callees = {id(call.callee) for call in program.calls if call.span.file.path == path}
    for node, decl in program.resolutions.items():
        span = getattr(node, "span", None)
        if span is None or span.file.path != path:
            continue
        if isinstance(node, ast.Name):
            ident = node.ident
            if isinstance(decl, LocalInfo):
                kind = "parameter" if decl.kind == "param" else "local"
            elif isinstance(decl, IndexVar):
                kind = "index variable"
            elif isinstance(decl, FnInfo):
                kind = "function" if id(node) in callees else ""
            elif isinstance(decl, PreludeFn):
                kind = "prelude function" if id(node) in callees else ""
            elif isinstance(decl, MemberInfo):
                kind = "member"
            elif isinstance(decl, GenericInfo):
                kind = "generic"
            elif isinstance(decl, ConstInfo):
                kind = "constant"
            else:
                kind = ""
        elif isinstance(node, ast.Member) and isinstance(decl, FnInfo):
            ident, kind = node.name, "method"
        elif isinstance(node, ast.NamedType) and len(node.path) == 1:
            ident = node.path[0]
            if isinstance(decl, BlockInfo):
                kind = "block"
            elif isinstance(decl, GenericInfo):
                kind = "generic"
            else:
                kind = ""
        else:
            kind = ""
        if kind:
            sites.append(_Site(kind, ident.span.start, ident.span.end, ident.name))
    return sites


def _expected_name_code(kind: str) -> str:
    return {"method": "E2107", "index variable": "E3101"}.get(kind, "E1201")


def _file_mistakes(file: Path, rng: random.Random, per_kind: int) -> list[Mistake]:
    program = check_paths([file], STDLIB)
    assert not program.has_errors, f"{file} is not valid"
    text = file.read_text()
    path = next(key for key, m in program.modules.items() if Path(m.source.path).resolve() == file)
    shown = program.modules[path].source.path
    origin = str(file.relative_to(ROOT))
    taken = set(_identifiers(text))
    out: list[Mistake] = []
    by_kind: dict[str, list[_Site]] = {}
    for site in sorted(_name_sites(program, shown), key=lambda s: s.start):
        by_kind.setdefault(site.kind, []).append(site)
    for kind, sites in sorted(by_kind.items()):
        usable = [s for s in sites if len(s.name) >= 3]
        for site in rng.sample(usable, min(per_kind, len(usable))):
            typo = _misspell(site.name, taken, rng)
            if typo is None:
                continue
            out.append(
                Mistake(
                    f"misspelt {kind}",
                    origin,
                    _replace(text, site.start, site.end, typo),
                    _expected_name_code(kind),
                    _line(text, site.start),
                    f"`{site.name}`",
                    f"`{site.name}` -> `{typo}`",
                )
            )
    module = program.modules[path]
    out += _use_mistakes(module.file, text, origin, taken, rng, per_kind)
    out += _call_mistakes(program, shown, text, origin, rng, per_kind)
    out += _result_dtype_mistakes(program, shown, text, origin, rng)
    out += _generic_argument_mistakes(module.file, text, origin, rng, program)
    out += _argument_dtype_mistakes(program, shown, text, origin, rng)
    out += _keyword_mistakes(module.source, text, origin, taken, rng, per_kind)
    return out


# Keywords that start an item, a member or a statement: a typo there is E1101.
_STARTING_KEYWORDS = frozenset(
    "let var return pub fn op entry block sub param buffer state const use struct enum while".split()
)


def _keyword_mistakes(
    source: SourceFile, text: str, origin: str, taken: set[str], rng: random.Random, per_kind: int
) -> list[Mistake]:
    """A misspelt keyword that starts an item, member or statement (E1101 there)."""
    tokens, _, _ = lex(source)
    sites = [
        t
        for t, after in itertools.pairwise(tokens)
        if t.kind is Kind.KEYWORD
        and t.text in _STARTING_KEYWORDS
        and len(t.text) >= 3
        and after.kind in (Kind.IDENT, Kind.KEYWORD)
    ]
    out = []
    for token in rng.sample(sites, min(per_kind, len(sites))):
        typo = _misspell(token.text, taken, rng)
        if typo is None:
            continue
        out.append(
            Mistake(
                "misspelt keyword",
                origin,
                _replace(text, token.span.start, token.span.end, typo),
                "E1101",
                _line(text, token.span.start),
                f"`{token.text}`",
                f"`{token.text}` -> `{typo}`",
            )
        )
    return out


def _identifiers(text: str) -> Iterator[str]:
    word = ""
    for ch in text + " ":
        if ch.isalnum() or ch == "_":
            word += ch
        elif word:
            yield word
            word = ""


def _use_mistakes(
    file: ast.File,
    text: str,
    origin: str,
    taken: set[str],
    rng: random.Random,
    per_kind: int,
) -> list[Mistake]:
    """Misspelt imported items and modules, and imports left out."""
    out: list[Mistake] = []
    uses = [u for u in file.uses if u.items]
    for use in rng.sample(uses, min(per_kind, len(uses))):
        assert use.items is not None
        item = rng.choice(use.items)
        typo = _misspell(item.name.name, taken, rng)
        if typo is not None:
            out.append(
                Mistake(
                    "misspelt import",
                    origin,
                    _replace(text, item.name.span.start, item.name.span.end, typo),
                    "E1201",
                    _line(text, item.name.span.start),
                    f"`{item.name.name}`",
                    f"`{item.name.name}` -> `{typo}`",
                )
            )
        segment = use.path[-1]
        module_typo = _misspell(segment.name, taken, rng)
        if module_typo is not None and use.path[0].name == "std":
            out.append(
                Mistake(
                    "misspelt module",
                    origin,
                    _replace(text, segment.span.start, segment.span.end, module_typo),
                    "E1202",
                    _line(text, segment.span.start),
                    "`" + ".".join(p.name for p in use.path) + "`",
                    f"`{segment.name}` -> `{module_typo}`",
                )
            )
        # Left out: the first use of the name is where the error belongs.
        bound = item.bound_name.name
        uses_of = sorted(
            ident.span.start
            for ident in _idents_named(file, bound)
            if ident.span.start > use.span.end
        )
        if not uses_of:
            continue
        rest = [i for i in use.items if i is not item]
        if rest:
            listed = ", ".join(
                i.name.name + (f" as {i.alias.name}" if i.alias else "") for i in rest
            )
            new = "use " + ".".join(p.name for p in use.path) + "::{" + listed + "}"
        else:
            new = ""
        mutated = _replace(text, use.span.start, use.span.end, new)
        shift = len(new) - (use.span.end - use.span.start)
        out.append(
            Mistake(
                "missing import",
                origin,
                mutated,
                "E1201",
                _line(mutated, uses_of[0] + shift),
                _import_wanted(use, item),
                f"`{bound}` not imported",
            )
        )
    return out


def _import_wanted(use: ast.UseDecl, item: ast.Imported) -> str:
    """What the help for a left-out import must offer: the `use` that was removed."""
    return f"use {'.'.join(p.name for p in use.path)}::{{{item.name.name}}}"


def _idents_named(file: ast.File, name: str) -> Iterator[ast.Ident]:
    for node in _walk(file.items):
        if isinstance(node, ast.Name) and node.ident.name == name:
            yield node.ident
        elif isinstance(node, ast.NamedType) and node.path[0].name == name:
            yield node.path[0]


def _call_mistakes(
    program: CheckedProgram, shown: str, text: str, origin: str, rng: random.Random, per_kind: int
) -> list[Mistake]:
    """Wrong arity and swapped arguments at calls of user and std functions."""
    calls = sorted(
        (
            (call, info)
            for call, info in program.calls.items()
            if call.span.file.path == shown and isinstance(info.callee, FnInfo) and call.args
        ),
        key=lambda c: c[0].span.start,
    )
    out: list[Mistake] = []
    for call, info in rng.sample(calls, min(per_kind, len(calls))):
        fn = info.callee
        assert isinstance(fn, FnInfo)
        last = call.args[-1]
        line = _line(text, call.span.start)
        if rng.random() < 0.5 and all(a.name is None for a in call.args):
            # One argument too many: the last one again.
            extra = text[last.span.start : last.span.end]
            mutated = _replace(text, last.span.end, last.span.end, ", " + extra)
            if len(call.args) == len(fn.params):
                out.append(
                    Mistake(
                        "wrong arity",
                        origin,
                        mutated,
                        "E2102",
                        _line(text, last.span.end),
                        detail=f"`{fn.name}` given {len(call.args) + 1} arguments",
                    )
                )
                continue
        required = sum(1 for p in fn.params if p.default is None)
        if len(call.args) == required:
            before = call.args[-2].span.end if len(call.args) > 1 else call.args[0].span.start
            mutated = _replace(text, before, last.span.end, "")
            out.append(
                Mistake(
                    "wrong arity",
                    origin,
                    mutated,
                    "E2102",
                    line,
                    detail=f"`{fn.name}` given {len(call.args) - 1} arguments",
                )
            )
    swappable = []
    for call, info in calls:
        if len(call.args) < 2 or any(a.name is not None for a in call.args[:2]):
            continue
        first, second = (program.type_of(a.value) for a in call.args[:2])
        if _line(text, call.args[1].span.start) != _line(text, call.span.start):
            continue
        assert isinstance(info.callee, FnInfo)
        declared = info.callee.params[0].type
        fixed = isinstance(declared, TensorType) and declared.dtype not in {
            g.key for g in info.callee.generics
        }
        code = _swap_code(info.subst.apply(declared), fixed, first, second)
        if code:
            swappable.append((call, code))
    for call, code in rng.sample(swappable, min(per_kind, len(swappable))):
        a, b = call.args[0].span, call.args[1].span
        mutated = text[: a.start] + text[b.start : b.end] + text[a.end : b.start]
        mutated += text[a.start : a.end] + text[b.end :]
        out.append(
            Mistake(
                "swapped arguments",
                origin,
                mutated,
                code,
                _line(text, call.span.start),
                detail=f"`{text[a.start : a.end]}` <-> `{text[b.start : b.end]}`",
            )
        )
    return out


def _swap_code(param: object, fixed: bool, first: object, second: object) -> str:
    """The error swapping two arguments of these types must give, or "" if it may be valid.

    `param` is the first parameter's type at this call: the second argument meets it
    first. Its dtype binds there when it is one of the callee's own generics; when it is
    `fixed` (a concrete dtype, or a block generic fixed by the child) it is compared
    before the shape.
    """
    if isinstance(first, TensorType) and isinstance(second, TensorType):
        declared = param.dtype if isinstance(param, TensorType) else None
        if fixed and declared is not second.dtype:
            return "E2103"
        # A rank mismatch shows whatever the dtypes (a dtype generic binds to either).
        if len(first.shape) != len(second.shape) and not (first.has_pack or second.has_pack):
            return "E2202"
        if first.dtype is not second.dtype:
            return "E2103"
        return ""
    if isinstance(first, TensorType) != isinstance(second, TensorType) and isinstance(
        first, (TensorType, ScalarType)
    ):
        return "E2101" if isinstance(second, (TensorType, ScalarType)) else ""
    return ""


def _result_dtype_mistakes(
    program: CheckedProgram, shown: str, text: str, origin: str, rng: random.Random
) -> list[Mistake]:
    """A function's declared result dtype changed: E2103 at its `return`.

    Only functions nobody in the program calls, so no caller sees the change.
    """
    called = {info.callee for info in program.calls.values()}
    sites = []
    for decl, fn in program.functions.items():
        if decl.span.file.path != shown or fn in called:
            continue
        result = decl.result
        stmts = decl.body.stmts
        if not isinstance(result, ast.TensorType) or not stmts:
            continue
        ret = stmts[-1]
        if not isinstance(ret, ast.ReturnStmt) or ret.value is None:
            continue
        if _line(text, ret.span.start) != _line(text, ret.value.span.start):
            continue
        sites.append((result.elem, ret))
    out = []
    for elem, ret in rng.sample(sites, min(1, len(sites))):
        old = elem.path[0].name
        new = "f32" if old.startswith(("i", "u", "bool")) else "i32"
        out.append(
            Mistake(
                "wrong dtype",
                origin,
                _replace(text, elem.span.start, elem.span.end, new),
                "E2103",
                _line(text, ret.span.start),
                detail=f"result `{old}` -> `{new}`",
            )
        )
    return out


def _generic_argument_mistakes(
    file: ast.File, text: str, origin: str, rng: random.Random, program: CheckedProgram
) -> list[Mistake]:
    """Block types given extra generic arguments, or one of the wrong kind (E2111)."""
    sites = [
        n
        for n in _walk(file.items)
        if isinstance(n, ast.MemberDecl)
        and isinstance(n.type, ast.NamedType)
        and n.type.args
        and n.kind == "sub"
    ]
    out = []
    for member in rng.sample(sites, min(1, len(sites))):
        named = member.type
        assert isinstance(named, ast.NamedType) and named.args
        last = named.args[-1]
        mutated = _replace(text, last.span.end, last.span.end, ", 4, 4, 4, 4")
        out.append(
            Mistake(
                "bad generic",
                origin,
                mutated,
                "E2111",
                _line(text, last.span.end),
                detail=f"`{named.path[-1].name}` given extra arguments",
            )
        )
        # The last argument of the wrong kind: a number for a dtype, a dtype for a `Dim`.
        block = program.resolutions.get(named)
        if not isinstance(block, BlockInfo) or len(block.generics) < len(named.args):
            continue
        kind = block.generics[len(named.args) - 1].kind
        wrong = "f32" if kind == "Dim" else "4" if kind != "Shape" else None
        if wrong is None:
            continue
        out.append(
            Mistake(
                "bad generic",
                origin,
                _replace(text, last.span.start, last.span.end, wrong),
                "E2111",
                _line(text, last.span.start),
                detail=f"`{wrong}` for the {kind} generic of `{named.path[-1].name}`",
            )
        )
    return out


def _argument_dtype_mistakes(
    program: CheckedProgram, shown: str, text: str, origin: str, rng: random.Random
) -> list[Mistake]:
    """A tensor argument cast to another dtype where another argument shares its dtype.

    The callee's two tensor parameters declare one dtype (a generic or a concrete one),
    so whichever binds it, the other argument disagrees: E2103 at the call.
    """
    sites = []
    for call, info in sorted(program.calls.items(), key=lambda c: c[0].span.start):
        fn = info.callee
        if call.span.file.path != shown or not isinstance(fn, FnInfo) or len(call.args) < 2:
            continue
        if any(a.name is not None for a in call.args) or len(call.args) > len(fn.params):
            continue
        if _line(text, call.args[-1].span.end) != _line(text, call.span.start):
            continue
        declared = [p.type for p in fn.params[: len(call.args)]]
        tensors = [i for i, t in enumerate(declared) if isinstance(t, TensorType)]
        shared = [
            (i, j)
            for i in tensors
            for j in tensors
            if i < j and declared[i].dtype is declared[j].dtype  # type: ignore[union-attr]
        ]
        if shared:
            first = shared[0][0]
            arg_type = program.type_of(call.args[first].value)
            if isinstance(arg_type, TensorType):
                sites.append((call, first, arg_type))
    out = []
    for call, position, arg_type in rng.sample(sites, min(1, len(sites))):
        arg = call.args[position].value
        other = "f16" if str(arg_type.dtype) != "f16" else "f32"
        source = text[arg.span.start : arg.span.end]
        out.append(
            Mistake(
                "wrong dtype",
                origin,
                _replace(text, arg.span.start, arg.span.end, f"cast<{other}>({source})"),
                "E2103",
                _line(text, call.span.start),
                detail=f"`{source}` cast to {other}",
            )
        )
    return out


def torch_name_mistakes() -> list[Mistake]:
    """A PyTorch class name where a std function is called (`LayerNorm(x, ...)`)."""
    out: list[Mistake] = []
    for file in valid_sources():
        text = file.read_text()
        program = check_paths([file], STDLIB)
        shown = next(
            m.source.path for m in program.modules.values() if Path(m.source.path).resolve() == file
        )
        for call, info in sorted(program.calls.items(), key=lambda c: c[0].span.start):
            callee = call.callee
            if call.span.file.path != shown or not isinstance(callee, ast.Name):
                continue
            name = callee.ident.name
            torch = TORCH_NAMES.get(name)
            if torch is None or not isinstance(info.callee, FnInfo) or torch in text:
                continue
            span = callee.ident.span
            out.append(
                Mistake(
                    "torch name",
                    str(file.relative_to(ROOT)),
                    _replace(text, span.start, span.end, torch),
                    "E1201",
                    _line(text, span.start),
                    f"`{name}`",
                    f"`{name}` -> `{torch}`",
                )
            )
            break
    return out


# Blocks whose weights the corpus mistakes: (file, root block, generics).
WEIGHT_MODELS: list[tuple[str, str, dict[str, object]]] = [
    ("examples/tiny/src/lib.linnet", "Mlp", {"H": 6, "Inner": 5, "Depth": 2, "Classes": 3}),
    ("examples/01-linear/src/lib.linnet", "Linear", {"In": 6, "Out": 4}),
    ("examples/02-attention/src/lib.linnet", "SelfAttention", {"H": 8, "Heads": 2}),
    ("examples/03-tiny-transformer/src/lib.linnet", "Layer", {"H": 8, "Heads": 2, "Inner": 12}),
    ("examples/gpt2/src/lib.linnet", "Mlp", {"H": 6, "Inner": 10, "T": "f32"}),
    ("examples/bert/src/lib.linnet", "Intermediate", {"H": 6, "Inner": 10, "T": "f32"}),
    ("examples/clip/src/encoder.linnet", "Mlp", {"H": 6, "Inner": 10}),
    ("examples/01-llama/src/lib.linnet", "LlamaMlp", {"H": 6, "Inner": 10, "T": "f32"}),
    ("stdlib/nn/mlp.linnet", "SwiGlu", {"H": 6, "Inner": 10, "T": "f32"}),
    ("stdlib/nn/embedding.linnet", "Embedding", {"Vocab": 7, "H": 4, "T": "f32"}),
]


@dataclass(frozen=True)
class WeightMistake:
    """A checkpoint for a bound block with one tensor transposed or one key misspelt."""

    kind: str  # "transposed weight" or "misspelt checkpoint key"
    origin: str
    root: str
    generics: dict[str, object]
    path: str  # the parameter path concerned
    stored_name: str  # the key the checkpoint stores it under
    wanted: str  # text the report must contain


def weight_mistakes(per_kind: int = PER_KIND) -> list[WeightMistake]:
    """Per model: up to two non-square matrices transposed, two keys one edit away."""
    from linnet.pipeline import bind
    from linnet.weights import specs_from_model

    out: list[WeightMistake] = []
    for origin, root, generics in WEIGHT_MODELS:
        rng = random.Random(f"{SEED}:{origin}:{root}")
        program = check_paths([ROOT / origin], STDLIB)
        specs = specs_from_model(bind(program, root=root, generics=generics))
        matrices = sorted(
            p for p, s in specs.items() if len(s.shape) == 2 and len(set(s.shape)) == 2
        )
        for path in rng.sample(matrices, min(per_kind, len(matrices))):
            out.append(
                WeightMistake("transposed weight", origin, root, generics, path, path, "transposed")
            )
        keys = sorted(specs)
        for path in rng.sample(keys, min(per_kind, len(keys))):
            head, _, last = path.rpartition(".")
            typo = _misspell(last, set(), rng)
            if typo is None:
                continue
            stored = f"{head}.{typo}" if head else typo
            out.append(
                WeightMistake(
                    "misspelt checkpoint key", origin, root, generics, path, stored, f"`{stored}`"
                )
            )
    return out


def run_weights(mistakes: list[WeightMistake]) -> list[Outcome]:
    """Bind each mistaken checkpoint; the one problem must name the path and the hint."""
    import numpy as np

    from linnet.errors import LinnetError
    from linnet.pipeline import bind
    from linnet.weights import bind_weights, specs_from_model

    outcomes = []
    for m in mistakes:
        program = check_paths([ROOT / m.origin], STDLIB)
        specs = specs_from_model(bind(program, root=m.root, generics=m.generics))
        arrays = {}
        for path, spec in specs.items():
            shape = (
                spec.shape[::-1] if m.kind == "transposed weight" and path == m.path else spec.shape
            )
            name = m.stored_name if path == m.path else path
            arrays[name] = np.zeros(shape, dtype=np.dtype(_NUMPY[spec.dtype]))
        mistake = Mistake(m.kind, m.origin, "", "weights", 0, "", f"`{m.path}`")
        try:
            bind_weights(specs, arrays)
            problems: list[str] = []
        except LinnetError as exc:
            problems = [p.strip()[2:] for p in exc.message.splitlines()[1:]]
        hints = tuple(p for p in problems if m.wanted in p and f"`{m.path}`" in p)
        outcomes.append(
            Outcome(mistake, [("weights", 0, p, hints if p in hints else ()) for p in problems])
        )
    return outcomes


_NUMPY = {"f32": "float32", "f16": "float16", "f64": "float64", "i32": "int32", "i64": "int64"}


def corpus(per_kind: int = PER_KIND) -> list[Mistake]:
    """Every case, in a fixed order; `per_kind` sites of each kind drawn per file."""
    out: list[Mistake] = []
    for file in valid_sources():
        rng = random.Random(f"{SEED}:{file.relative_to(ROOT)}")
        out += _file_mistakes(file, rng, per_kind)
    out += torch_name_mistakes()
    return out


# ---------------------------------------------------------------- running


def run(mistakes: list[Mistake]) -> list[Outcome]:
    """Check every mistake in a scratch copy of its package (or of the std library)."""
    outcomes = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        std = work / "stdlib"
        shutil.copytree(STDLIB, std)
        copied: set[Path] = set()
        for mistake in mistakes:
            origin = ROOT / mistake.origin
            if mistake.origin.startswith("stdlib/"):
                target = std / origin.relative_to(STDLIB)
            else:
                package = origin.parents[1]
                target = work / package.name / origin.relative_to(package)
                if package not in copied:
                    shutil.copytree(package, work / package.name)
                    copied.add(package)
            original = target.read_text()
            target.write_text(mistake.text)
            try:
                program = check_paths([target], std, relative_to=work)
            finally:
                target.write_text(original)
            outcomes.append(Outcome(mistake, _errors(program.diagnostics)))
    return outcomes


def _errors(diagnostics: list[Diagnostic]) -> list[tuple[str, int, str, tuple[str, ...]]]:
    out = []
    for d in diagnostics:
        if not d.is_error:
            continue
        line = d.span.file.line_col(d.span.start)[0] if d.span is not None else 0
        out.append((d.code, line, d.message, d.help))
    return out
