"""`quantize_source`: a model's source with every float linear a `std.quant` block.

Why: a quantised checkpoint (`quantize_checkpoint`) is bound by a source whose
linears read the `std.quant` layouts under the same parameter paths. Rather than
keep a quantised copy of each example, the float source is rewritten, and one
rewrite serves every decoder family (Llama, Qwen2, Qwen3, Phi-3, GPT-2): what it
changes is found from the source's own structure, not from a table per family.

Stage: source text in, source text out, through the parser's spans (nothing is
reprinted but the edited pieces). What it does:

- Every `sub` whose type is a linear becomes `Int4GroupLinear<In, Out, group, T>`
  (`scheme="int"`, `bits=4`), `Int8Linear<In, Out, T>` (`bits=8`), `Fp8Linear` or
  `Mxfp4Linear`, unless its name is in `keep`. A linear is std `Linear` (imported
  from `std.nn.linear`) or a block of the file shaped like one: generics
  `<In: Dim, Out: Dim, T: Float>` and only `param weight` (`[Out, In]`, or
  `[In, Out]` as transformers' `Conv1D` stores it) and an optional
  `param bias: Tensor[Out; T]`. The std blocks read `<name>.bias` when present.
- The grouped blocks need `In % group == 0` (32 for MXFP4): the fact goes into the
  `where` clause of the block that holds the linear, and, with its generics
  replaced by the arguments, into every block that holds that one, up to the root.
- An entry that reads a quantised linear's `.weight` as a float matrix (the
  chunked training losses reading `lm_head.weight`) is dropped: a quantised model
  is for inference. A plain `fn` doing so is refused (it is no entry to drop).
- `use std.quant::{Block}` is added; imports only the rewritten code used are removed.

The result also names the weights to quantise, as `quantize_checkpoint` globs:
`<name>.weight` for a linear of a root block (one no other block holds),
`*.<name>.weight` below it; `transposed` lists those stored `[In, Out]`.
"""

from __future__ import annotations

import ast as python_ast
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from linnet.errors import LinnetError
from linnet.quant.checkpoint import BITS, SCHEMES
from linnet.quant.minifloat import MX_BLOCK
from linnet.source import SourceFile
from linnet.syntax import ast
from linnet.syntax.lexer import IDENT, scan
from linnet.syntax.parser import parse_text

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ATOM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")


@dataclass(frozen=True)
class QuantizedSource:
    """A rewritten source and the weights its quantised blocks read."""

    text: str
    block: str
    """The `std.quant` block every rewritten linear became."""
    patterns: tuple[str, ...]
    """Globs over parameter paths of the quantised weights (`quantize_checkpoint`'s)."""
    transposed: tuple[str, ...] = ()
    """The globs among `patterns` whose weights are stored `[In, Out]` (`Conv1D`)."""


def quantize_source(
    text: str,
    *,
    scheme: str = "int",
    bits: int = 4,
    group: int = 128,
    keep: Collection[str] = (),
    path: str = "<input>",
) -> QuantizedSource:
    """`text` with its linears quantised (see the module docstring). `scheme` `int` with
    `bits` 4 (groups of `group` inputs) or 8 (per row), `fp8` (E4M3 rows) or `mxfp4`
    (blocks of 32); `keep` names `sub` members left float (e.g. `lm_head`)."""
    block, extra, divisor = _target(scheme, bits, group)
    tree = _parse(text, path)
    linears = _linear_types(tree)
    blocks = {item.name.name: item for item in tree.items if isinstance(item, ast.BlockDecl)}
    plan = _Plan()
    seen: set[str] = set()
    for holder in blocks.values():
        for member in holder.parts:
            if not isinstance(member, ast.MemberDecl) or member.kind != "sub":
                continue
            named = member.type.elem if isinstance(member.type, ast.ArrayType) else member.type
            if not isinstance(named, ast.NamedType) or len(named.path) != 1:
                continue
            kind = named.path[0].name
            args = [a.span.text for a in named.args or ()]
            if kind in linears:
                seen.add(member.name.name)
            if kind in linears and member.name.name not in keep:
                if len(args) < 2:
                    raise LinnetError(
                        f"{path}: `{holder.name.name}.{member.name.name}` is a `{kind}` "
                        "without its sizes; write them as `<In, Out, T>`"
                    )
                inner, out, rest = args[0], args[1], args[2:]
                written = ", ".join([inner, out, *extra, *rest])
                plan.edit(named.span.start, named.span.end, f"{block}<{written}>")
                plan.quantised.setdefault(holder.name.name, []).append(member.name.name)
                if isinstance(member.type, ast.ArrayType):
                    plan.arrays.add((holder.name.name, member.name.name))
                if linears[kind]:
                    plan.transposed.add((holder.name.name, member.name.name))
                if divisor:
                    plan.terms.setdefault(holder.name.name, []).append(_bare(inner))
            elif kind in blocks:
                plan.holds.setdefault(holder.name.name, []).append((kind, args))
    unknown = sorted(set(keep) - seen)
    if unknown:
        raise LinnetError(
            f"{path}: no linear member is named {', '.join(f'`{n}`' for n in unknown)} "
            f"(`keep` names `sub` members; the linears are {', '.join(sorted(seen))})"
        )
    if not plan.quantised:
        raise LinnetError(
            f"{path}: no linear to quantise (std `Linear` or a block shaped like one)"
        )
    if divisor:
        _state_facts(plan, blocks, text, divisor, path)
    _drop_float_readers(plan, blocks, text, path)
    _add_use(plan, tree, text, block)
    rewritten = _without_unused_imports(plan.apply(text), text, path)
    return QuantizedSource(rewritten, block, *_patterns(plan))


@dataclass
class _Plan:
    edits: list[tuple[int, int, str]] = field(default_factory=list)
    quantised: dict[str, list[str]] = field(default_factory=dict)
    """Block name -> its rewritten `sub` members."""
    transposed: set[tuple[str, str]] = field(default_factory=set)
    arrays: set[tuple[str, str]] = field(default_factory=set)
    """The rewritten members that are arrays of linears (`[Linear<..>; N]`)."""
    terms: dict[str, list[str]] = field(default_factory=dict)
    """Block name -> the `In` of its grouped linears."""
    holds: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)
    """Block name -> the local blocks it holds, with their generic arguments."""

    def edit(self, start: int, end: int, replacement: str) -> None:
        self.edits.append((start, end, replacement))

    def apply(self, text: str) -> str:
        out: list[str] = []
        at = 0
        for start, end, replacement in sorted(self.edits, key=lambda e: (e[0], e[1])):
            assert start >= at, "overlapping source edits"
            out += [text[at:start], replacement]
            at = end
        return "".join([*out, text[at:]])


def _target(scheme: str, bits: int, group: int) -> tuple[str, list[str], int]:
    """The block name, the generic arguments it takes after `Out`, and the divisor of `In`."""
    if scheme not in SCHEMES:
        raise LinnetError(f"quantize: unknown scheme `{scheme}` (known: {', '.join(SCHEMES)})")
    if scheme == "fp8":
        return "Fp8Linear", [], 0
    if scheme == "mxfp4":
        return "Mxfp4Linear", [], MX_BLOCK
    if bits not in BITS:
        raise LinnetError(f"quantize: bits must be 4 or 8, not {bits}")
    if bits == 8:
        return "Int8Linear", [], 0
    if group <= 0 or group % 2:
        raise LinnetError(f"quantize: the group must be a positive even size, not {group}")
    return "Int4GroupLinear", [str(group)], group


def _parse(text: str, path: str) -> ast.File:
    tree, diagnostics = parse_text(text, path)
    errors = [d for d in diagnostics if d.is_error]
    if tree is None or errors:
        raise LinnetError(f"{path}: the source does not parse", errors)
    return tree


def _linear_types(tree: ast.File) -> dict[str, bool]:
    """Type name -> whether its weight is stored `[In, Out]`: std `Linear` as imported, and
    the file's blocks shaped like a linear."""
    found: dict[str, bool] = {}
    for use in tree.uses:
        if [i.name for i in use.path] == ["std", "nn", "linear"]:
            for imported in use.items or ():
                if imported.name.name == "Linear":
                    found[imported.bound_name.name] = False
    for item in tree.items:
        if isinstance(item, ast.BlockDecl):
            layout = _linear_layout(item)
            if layout is not None:
                found[item.name.name] = layout
    return found


def _linear_layout(block: ast.BlockDecl) -> bool | None:
    """For a block shaped like a linear, whether its weight is `[In, Out]`; else None."""
    generics = block.generics.params if block.generics else ()
    if [g.kind for g in generics] != ["Dim", "Dim", "Float"] or any(g.is_pack for g in generics):
        return None
    inner, out, elem = (g.name.name for g in generics)
    params = {m.name.name: m for m in block.parts if isinstance(m, ast.MemberDecl)}
    if set(params) - {"bias"} != {"weight"} or any(m.kind != "param" for m in params.values()):
        return None
    weight = _dims(params["weight"].type, elem)
    if "bias" in params and _dims(params["bias"].type, elem, optional=True) != [out]:
        return None
    if weight == [out, inner]:
        return False
    return True if weight == [inner, out] else None


def _dims(kind: ast.Type, elem: str, *, optional: bool = False) -> list[str] | None:
    """The dimension names of `Tensor[A, B; elem]` (or `...?` when `optional`)."""
    if optional and isinstance(kind, ast.OptionalType):
        kind = kind.inner
    if not isinstance(kind, ast.TensorType) or [i.name for i in kind.elem.path] != [elem]:
        return None
    names = [d.ident.name for d in kind.dims if isinstance(d, ast.Name)]
    return names if len(names) == len(kind.dims) else None


def _bare(expression: str) -> str:
    """`expression` without parentheses around the whole of it."""
    while expression.startswith("(") and expression.endswith(")") and _balanced(expression[1:-1]):
        expression = expression[1:-1].strip()
    return expression


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _state_facts(
    plan: _Plan, blocks: dict[str, ast.BlockDecl], text: str, divisor: int, path: str
) -> None:
    """Add `term % divisor == 0` for each block's own and held terms to its `where` clause."""
    memo: dict[str, list[str]] = {}

    def terms(name: str) -> list[str]:
        if name not in memo:
            memo[name] = []  # a cycle is the checker's to report; it adds nothing here
            found = list(plan.terms.get(name, []))
            for child, args in plan.holds.get(name, []):
                mapping = _arguments(blocks[child], args)
                found += [_substituted(t, mapping) for t in terms(child)]
            memo[name] = _ordered(found)
        return memo[name]

    for name, block in blocks.items():
        facts: list[str] = []
        for term in terms(name):
            value = _constant(term)
            if value is not None:
                if value % divisor:
                    raise LinnetError(
                        f"{path}: a linear in `{name}` has {value} inputs, which the group "
                        f"size {divisor} does not divide"
                    )
                continue
            facts.append(f"{term if _ATOM.fullmatch(term) else f'({term})'} % {divisor} == 0")
        stated = [r.span.text for r in block.where.relations] if block.where else []
        facts = [f for f in facts if f not in stated]
        if not facts:
            continue
        where = block.where
        if where is not None and text.startswith("where\n", where.span.start):
            # one relation a line: the facts go first, the clause is left as written
            at = where.span.start + len("where\n")
            plan.edit(at, at, "".join(f"    {fact},\n" for fact in facts))
            continue
        lines = ",\n".join(f"    {r}" for r in facts + stated)
        start = where.span.start if where is not None else _header_end(block)
        prefix = "" if where is not None else "\n"
        plan.edit(start, block.body_span.start, f"{prefix}where\n{lines}\n")


def _constant(term: str) -> int | None:
    """The value of a term of integers, `+`, `-` and `*` alone; None for any other."""
    if _WORD.search(term):
        return None
    try:
        tree = python_ast.parse(term, mode="eval").body
    except SyntaxError:
        return None
    operators = {python_ast.Add: int.__add__, python_ast.Sub: int.__sub__,
                 python_ast.Mult: int.__mul__}  # fmt: skip

    def value(node: python_ast.expr) -> int | None:
        if isinstance(node, python_ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, python_ast.BinOp) and type(node.op) in operators:
            left, right = value(node.left), value(node.right)
            if left is not None and right is not None:
                return operators[type(node.op)](left, right)
        return None

    return value(tree)


def _header_end(block: ast.BlockDecl) -> int:
    return block.generics.span.end if block.generics else block.name.span.end


def _arguments(block: ast.BlockDecl, args: list[str]) -> dict[str, str]:
    """Generic name -> its argument's text for `block<args>` (defaults filled in)."""
    mapping: dict[str, str] = {}
    for index, param in enumerate(block.generics.params if block.generics else ()):
        if index < len(args):
            mapping[param.name.name] = _bare(args[index])
        elif param.default is not None:
            mapping[param.name.name] = _bare(_substituted(param.default.span.text, mapping))
    return mapping


def _substituted(term: str, mapping: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        value = mapping.get(match.group(0))
        if value is None:
            return match.group(0)
        return value if _ATOM.fullmatch(value) else f"({value})"

    return _bare(_WORD.sub(replace, term))


def _ordered(terms: list[str]) -> list[str]:
    """Distinct terms, plain names before compound expressions, each in order of appearance."""
    distinct = list(dict.fromkeys(terms))
    return [t for t in distinct if _ATOM.fullmatch(t)] + [
        t for t in distinct if not _ATOM.fullmatch(t)
    ]


def _drop_float_readers(
    plan: _Plan, blocks: dict[str, ast.BlockDecl], text: str, path: str
) -> None:
    """Remove the entries that read a quantised linear's `.weight` as a float matrix."""
    for name, members in plan.quantised.items():
        for part in blocks[name].parts:
            if not isinstance(part, ast.FnDecl):
                continue
            read = next((m for m in _weights_read(part.body) if m in members), None)
            if read is None:
                continue
            if part.kind != "entry":
                raise LinnetError(
                    f"{path}: `{name}.{part.name.name}` reads `{read}.weight` as a float "
                    f"matrix; keep `{read}` float (`keep`) to quantise this source"
                )
            plan.edit(*_lines_of(text, part.span.start, part.span.end), "")


def _weights_read(node: object) -> Iterator[str]:
    """The names `x` of the `x.weight` expressions under `node`."""
    if isinstance(node, ast.Member):
        target = node.target
        if node.name.name == "weight" and isinstance(target, ast.Name):
            yield target.ident.name
    if isinstance(node, tuple):
        for value in node:
            yield from _weights_read(value)
    elif ast.is_node(node):
        for name in ast.node_fields(node):
            if name != "span":
                yield from _weights_read(getattr(node, name))


def _lines_of(text: str, start: int, end: int) -> tuple[int, int]:
    """The range removing the lines of `[start, end)` with the doc comment above them and
    one blank line before that."""
    begin = text.rfind("\n", 0, start) + 1
    while begin > 0:
        above = text.rfind("\n", 0, begin - 1) + 1
        if not text[above : begin - 1].lstrip().startswith("//"):
            break
        begin = above
    if begin > 0 and text[text.rfind("\n", 0, begin - 1) + 1 : begin - 1].strip() == "":
        begin -= 1
    after = text.find("\n", end)
    return begin, len(text) if after < 0 else after + 1


def _add_use(plan: _Plan, tree: ast.File, text: str, block: str) -> None:
    """`use std.quant::{block}` among the `use` lines, in their (sorted) order."""
    for use in tree.uses:
        if [i.name for i in use.path] == ["std", "quant"] and block in {
            i.bound_name.name for i in use.items or ()
        }:
            return
    line = f"use std.quant::{{{block}}}\n"
    later = [u for u in tree.uses if ".".join(i.name for i in u.path) > "std.quant"]
    if later:
        at = text.rfind("\n", 0, later[0].span.start) + 1
    elif tree.uses:
        at = text.find("\n", tree.uses[-1].span.end) + 1
    else:
        at = text.find("\n", tree.module_span.end) + 1
        line = "\n" + line
    plan.edit(at, at, line)


def _without_unused_imports(text: str, original: str, path: str) -> str:
    """`text` less the imported names that `original` used and `text` no longer does."""
    tree = _parse(text, path)
    before, after = _used(original, path), _used(text, path)
    edits: list[tuple[int, int, str]] = []
    for use in tree.uses:
        if use.items is None:
            continue
        dropped = [
            i for i in use.items if i.bound_name.name in before and i.bound_name.name not in after
        ]
        if not dropped:
            continue
        kept = [i.span.text for i in use.items if i not in dropped]
        if kept:
            head = "::".join([".".join(i.name for i in use.path), "{" + ", ".join(kept) + "}"])
            edits.append((use.span.start, use.span.end, f"use {head}"))
        else:
            start = text.rfind("\n", 0, use.span.start) + 1
            edits.append((start, text.find("\n", use.span.end) + 1, ""))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _used(text: str, path: str) -> set[str]:
    """The identifiers of `text` outside its `use` declarations."""
    tree = _parse(text, path)
    uses = [(u.span.start, u.span.end) for u in tree.uses]
    tokens = scan(SourceFile(path, text))
    return {
        word
        for kind, word, start in zip(tokens.kinds, tokens.texts, tokens.starts, strict=False)
        if kind == IDENT and not any(a <= start < b for a, b in uses)
    }


def _patterns(plan: _Plan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    held = {child for holds in plan.holds.values() for child, _ in holds}
    patterns: list[str] = []
    transposed: list[str] = []
    for name, members in plan.quantised.items():
        for member in members:
            path = f"{member}.*" if (name, member) in plan.arrays else member
            glob = f"{path}.weight" if name not in held else f"*.{path}.weight"
            patterns.append(glob)
            if (name, member) in plan.transposed:
                transposed.append(glob)
    return tuple(dict.fromkeys(patterns)), tuple(dict.fromkeys(transposed))
