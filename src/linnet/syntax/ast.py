"""The syntax tree of section 3: frozen dataclasses, every node with a `Span`.

Nodes compare and hash by identity (`eq=False`), so later stages can key side
tables on them (the checker's expression types, like mypy's
`dict[Expression, Type]`). `same_tree` compares two trees structurally, ignoring
spans; the formatter's round-trip tests use it.

What the formatter needs beyond the grammar is recorded here too: parentheses
(`Paren`), literal spellings (`IntLit.text`), and whether a list ended with a
trailing comma (`trailing_comma`), which keeps it expanded (section 17).
Comments live on `File.comments`, on the side.
"""

from __future__ import annotations

from typing import Literal, TypeVar, dataclass_transform

from linnet.records import record, record_fields
from linnet.source import Span
from linnet.syntax.tokens import Comment

_N = TypeVar("_N")
_NODE_TYPES: set[type] = set()


@dataclass_transform(frozen_default=True, eq_default=False)
def node(cls: type[_N]) -> type[_N]:
    """A syntax node class: a frozen, slotted record compared by identity."""
    built = record(frozen=True, eq=False)(cls)
    _NODE_TYPES.add(built)
    return built


def is_node(value: object) -> bool:
    """True for instances of syntax tree node classes."""
    return type(value) in _NODE_TYPES


def node_fields(value: object) -> tuple[str, ...]:
    """The field names of a node, in declaration order (looked up once per class:
    tree walks ask for every node)."""
    kind = type(value)
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = record_fields(value)
    return fields


_FIELDS: dict[type, tuple[str, ...]] = {}


@node
class Ident:
    name: str
    span: Span


# ---------------------------------------------------------------- types


@node
class NamedType:
    """`f32`, `Dense<In, Out>`, `linear.Linear<H, H>`: a (possibly dotted) name.

    Scalar type names are contextual words, so they parse as `NamedType` too;
    the checker decides what the name denotes. `args` is None without `<...>`.
    """

    path: tuple[Ident, ...]
    args: tuple[GenArg, ...] | None
    span: Span


@node
class PackRef:
    """`*S` inside a tensor type's dimension list."""

    name: Ident
    span: Span


@node
class TensorType:
    """`Tensor[B, *S, H / N; T]`. `dims` is never empty (rank 0 is E1103)."""

    dims: tuple[Expr | PackRef, ...]
    elem: NamedType
    span: Span


@node
class TupleType:
    elems: tuple[Type, ...]
    trailing_comma: bool
    span: Span


@node
class ArrayType:
    """`[Layer<H>; N]`: only valid as a `sub` member type."""

    elem: Type
    length: Expr
    span: Span


@node
class OptionalType:
    inner: Type
    span: Span


Type = NamedType | TensorType | TupleType | ArrayType | OptionalType


# ---------------------------------------------------------------- expressions


@node
class IntLit:
    text: str  # exact spelling, e.g. "1_000" or "0xff"
    value: int
    span: Span


@node
class FloatLit:
    text: str
    value: float
    span: Span


@node
class StringLit:
    text: str  # with quotes and escapes as written
    value: str
    span: Span


@node
class BoolLit:
    value: bool
    span: Span


@node
class NoneLit:
    span: Span


@node
class Name:
    ident: Ident
    span: Span


@node
class Paren:
    """`( inner )`: kept so the formatter prints parentheses exactly as written."""

    inner: Expr
    span: Span


UnaryOp = Literal["!", "-", "+"]
BinaryOp = Literal[
    "||", "&&", "==", "!=", "<", "<=", ">", ">=", "|", "^", "&", "+", "-", "*", "/", "%"
]


@node
class Unary:
    op: UnaryOp
    operand: Expr
    span: Span


@node
class Binary:
    op: BinaryOp
    left: Expr
    right: Expr
    op_span: Span
    span: Span


@node
class Arg:
    """A call argument, positional (`name` None) or named (`axis = -1`)."""

    name: Ident | None
    value: Expr
    span: Span


@node
class Call:
    """`f(args)`, `f<G>(args)`, `m.f(args)`, `child.method(args)`.

    `generic_args` is None when there is no `<...>`.
    """

    callee: Expr
    generic_args: tuple[GenArg, ...] | None
    args: tuple[Arg, ...]
    trailing_comma: bool
    span: Span


@node
class Member:
    """`target.name`: a module item, enum variant, child member or struct field."""

    target: Expr
    name: Ident
    span: Span


@node
class EllipsisComponent:
    span: Span


@node
class PackIndex:
    """`*s` in an index list."""

    name: Ident
    span: Span


@node
class Slice:
    """`start:stop:step`; absent parts are None. `x[::2]` has step 2 and no stop."""

    start: Expr | None
    stop: Expr | None
    step: Expr | None
    has_step: bool  # a second ':' was written (`1::` or `a:b:`)
    span: Span


@node
class Index:
    """`target[c1, c2, ...]`: element access or slicing (sections 8.3 and 9)."""

    target: Expr
    components: tuple[Component, ...]
    span: Span


@node
class TupleExpr:
    elems: tuple[Expr, ...]
    trailing_comma: bool
    span: Span


@node
class SomeExpr:
    value: Expr
    span: Span


@node
class ShapeLit:
    """`[B, S * H]`: a compile-time shape (section 7.10)."""

    elems: tuple[Expr, ...]
    trailing_comma: bool
    span: Span


ReductionKind = Literal["sum", "prod", "max", "min", "any", "all"]


@node
class Reduction:
    """`sum<f32>[i, j] body`; `accumulator` is the `<D>` type when written."""

    kind: ReductionKind
    kind_span: Span
    accumulator: NamedType | None
    indices: tuple[Ident, ...]
    body: Expr
    span: Span


@node
class IfExpr:
    cond: Expr
    then: Expr
    otherwise: Expr
    span: Span


@node
class NamePattern:
    """A name binding; `_` binds nothing. As a match arm on an enum it may be a variant."""

    name: Ident
    span: Span


@node
class TuplePattern:
    elems: tuple[Pattern, ...]
    trailing_comma: bool
    span: Span


@node
class SomePattern:
    inner: Pattern
    span: Span


@node
class NonePattern:
    span: Span


Pattern = NamePattern | TuplePattern | SomePattern | NonePattern


@node
class Arm:
    pattern: Pattern
    value: Expr
    span: Span


@node
class MatchExpr:
    scrutinee: Expr
    arms: tuple[Arm, ...]
    span: Span


@node
class ForLoop:
    """`for i in start..stop { }` (language-extensions 1): a statement, or as a value a
    scan stacking the body's final `yield` along a new leading axis."""

    var: Ident
    start: Expr
    stop: Expr
    body: Body
    span: Span

    @property
    def range_span(self) -> Span:
        """The range `start..stop`."""
        return Span(self.span.file, self.start.span.start, self.stop.span.end)


Expr = (
    IntLit | FloatLit | StringLit | BoolLit | NoneLit | Name | Paren | Unary | Binary | Call
    | Member | Index | TupleExpr | SomeExpr | ShapeLit | Reduction | IfExpr | MatchExpr
    | ForLoop
)  # fmt: skip

# A generic argument is a type or an expression (section 3.3 rule 2): a bare
# name parses as a NamedType, `2 * H` or `[B, S]` as an expression.
GenArg = Type | Expr

Component = Expr | Slice | EllipsisComponent | PackIndex


# ---------------------------------------------------------------- statements


@node
class Body:
    """`{ stmts }`; the span covers both braces."""

    stmts: tuple[Stmt, ...]
    span: Span


@node
class LetStmt:
    pattern: Pattern
    type: Type | None
    value: Expr
    span: Span


@node
class OutIndex:
    """An output index of a comprehension: `i` or `*s`."""

    name: Ident
    is_pack: bool
    span: Span


@node
class ComprehensionStmt:
    """`let name[i, *s] = body` (section 8.1)."""

    name: Ident
    indices: tuple[OutIndex, ...]
    value: Expr
    span: Span


@node
class VarStmt:
    name: Ident
    type: Type | None
    value: Expr
    span: Span


@node
class AssignStmt:
    target: Ident
    value: Expr
    span: Span


@node
class ReturnStmt:
    value: Expr | None
    span: Span


@node
class StaticForStmt:
    """`static for p in iter { }` or `static for p in start..stop { }` (`stop` set)."""

    pattern: Pattern
    iter: Expr
    stop: Expr | None
    body: Body
    span: Span


@node
class WhileStmt:
    cond: Expr
    body: Body
    span: Span


@node
class YieldStmt:
    """`yield value`: ends the body of a `for` that gives a value (language-extensions 1.2)."""

    value: Expr
    span: Span


WriteWord = Literal["store", "atomic_add", "atomic_max", "atomic_min"]


@node
class WriteStmt:
    """`store(y[i], v, mask)` / `atomic_add(...)`: a kernel's write (language-extensions 4.1).

    `target` is the memory access (`y[i, j]`, checked by `check.kernels`), `mask`
    is None when omitted.
    """

    word: WriteWord
    word_span: Span
    target: Expr
    value: Expr
    mask: Expr | None
    trailing_comma: bool
    span: Span


Stmt = (
    LetStmt | ComprehensionStmt | VarStmt | AssignStmt | ReturnStmt | StaticForStmt | WhileStmt
    | ForLoop | YieldStmt | WriteStmt
)  # fmt: skip


# ---------------------------------------------------------------- declarations

KindName = Literal["Dim", "Shape", "DType", "Numeric", "Integer", "Float"]


@node
class GenericParam:
    """`B: Dim`, `*S: Shape`, `T: Float = bf16`, `N: Dim = 2 * B`."""

    name: Ident
    is_pack: bool
    kind: KindName
    kind_span: Span
    default: GenArg | None
    span: Span


@node
class Generics:
    params: tuple[GenericParam, ...]
    trailing_comma: bool
    span: Span


@node
class Param:
    name: Ident
    type: Type
    default: Expr | None
    span: Span


@node
class Params:
    params: tuple[Param, ...]
    trailing_comma: bool
    span: Span


@node
class Where:
    """The relations of a `where` clause; each is a comparison `Binary`."""

    relations: tuple[Binary, ...]
    trailing_comma: bool
    span: Span


FnKind = Literal["fn", "op", "entry"]


@node
class GradClause:
    """`grad(y, dy) { ... }` after a body (language-extensions 3.1).

    `result` names the op's result, `gradient` its incoming gradient; `head`
    spans `grad(y, dy)` (where E2125 points).
    """

    result: Ident
    gradient: Ident
    body: Body
    head: Span
    span: Span


@node
class KernelRef:
    """`kernel name<args>` after an op's result type (language-extensions 4.4)."""

    name: Ident
    args: tuple[GenArg, ...] | None
    span: Span


@node
class FnDecl:
    pub: bool
    kind: FnKind
    name: Ident
    generics: Generics | None
    params: Params
    result: Type | None
    where: Where | None
    body: Body
    span: Span
    grad: GradClause | None = None
    kernel: KernelRef | None = None  # only on an `op` (language-extensions 4.4)


@node
class KernelOut:
    """One named result of a kernel: `out: Tensor[N; f32]`."""

    name: Ident
    type: Type
    span: Span


@node
class KernelHint:
    """`warps(n)` or `stages(n)` in a kernel header."""

    word: Literal["warps", "stages"]
    word_span: Span
    value: Expr
    span: Span


@node
class KernelDecl:
    """A tile kernel (language-extensions 4.1): named results, a launch grid, hints.

    `results_paren` tells `-> (a: T)` from `-> a: T`; `hints` are in canonical
    order, `warps` before `stages` (repeats keep their source order).
    """

    pub: bool
    name: Ident
    generics: Generics | None
    params: Params
    results: tuple[KernelOut, ...]
    results_paren: bool
    results_trailing_comma: bool
    grid: tuple[Expr, ...]
    grid_trailing_comma: bool
    grid_span: Span
    hints: tuple[KernelHint, ...]
    where: Where | None
    body: Body
    span: Span
    grad: GradClause | None = None  # parsed so that the checker reports E2125 (K11)


@node
class ConstDecl:
    pub: bool
    name: Ident
    type: Type | None
    value: Expr
    span: Span


@node
class AliasDecl:
    pub: bool
    name: Ident
    generics: Generics | None
    type: Type
    span: Span


@node
class Field:
    name: Ident
    type: Type
    span: Span


@node
class StructDecl:
    pub: bool
    name: Ident
    generics: Generics | None
    fields: tuple[Field, ...]
    span: Span


@node
class EnumDecl:
    pub: bool
    name: Ident
    generics: Generics | None
    variants: tuple[Ident, ...]
    trailing_comma: bool
    span: Span


MemberKind = Literal["param", "buffer", "state", "sub"]


@node
class MemberDecl:
    """`param w: T`, `param b: T? = none`, `buffer`, `state`, `sub c: Block<..>`."""

    kind: MemberKind
    name: Ident
    type: Type
    default: Expr | None
    span: Span


@node
class BlockDecl:
    pub: bool
    name: Ident
    generics: Generics | None
    where: Where | None
    parts: tuple[MemberDecl | Item, ...]
    body_span: Span  # from `{` to `}`
    span: Span


Item = ConstDecl | AliasDecl | StructDecl | EnumDecl | FnDecl | BlockDecl | KernelDecl


@node
class Imported:
    """One name of a `use` selection, with its optional `as` alias."""

    name: Ident
    alias: Ident | None
    span: Span

    @property
    def bound_name(self) -> Ident:
        return self.alias if self.alias is not None else self.name


@node
class UseDecl:
    """`use std.nn.linear::{linear, Linear as L}` / `use a.b::x` / `use std.random`.

    `path` includes the head segment (`crate`, `std`, a dependency key).
    `items` is None for a whole-module import; `braced` tells `::x` from `::{x}`.
    """

    path: tuple[Ident, ...]
    items: tuple[Imported, ...] | None
    braced: bool
    trailing_comma: bool
    span: Span


@node
class File:
    """A parsed module. `comments` are kept on the side for the formatter."""

    module: tuple[Ident, ...]
    module_span: Span
    uses: tuple[UseDecl, ...]
    items: tuple[Item, ...]
    comments: tuple[Comment, ...]
    span: Span

    @property
    def module_name(self) -> str:
        return ".".join(part.name for part in self.module)


def same_tree(a: object, b: object) -> bool:
    """Structural equality of two syntax trees, ignoring spans.

    Comments are compared by text and placement (`own_line`), not by offset;
    trailing blanks on their lines do not count (the formatter removes them,
    section 17: lines never end in whitespace).
    `trailing_comma` flags are layout, not structure (the formatter adds the comma
    to every list it breaks), so they are ignored too; `(x,)` stays a tuple and
    `(x)` a `Paren` either way.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        return len(a) == len(b) and all(same_tree(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Comment):
        assert isinstance(b, Comment)
        return _comment_text(a.text) == _comment_text(b.text) and a.own_line == b.own_line
    if isinstance(a, Span):
        return True
    if is_node(a):
        for name in node_fields(a):
            if name.endswith("trailing_comma"):
                continue
            if not same_tree(getattr(a, name), getattr(b, name)):
                return False
        return True
    return a == b


def _comment_text(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines())
