"""`linnet fmt`: the canonical layout of a Linnet file (language.md section 17).

Stage: syntax tree (plus the source, for comments and blank lines) in,
formatted text out; it sits beside the checker, not before it. The layout is
built as a `doc` document and printed by its group printer (width 100, indent
4). This module lays out files, declarations and statements; expressions,
types, patterns and lists are in `format_expr`, comment placement in
`format_comments`.

Formatting is idempotent and never changes the syntax tree (only trailing
commas, which section 17 adds or drops); a file with syntax errors is never
formatted (`format_source` returns None).

>>> from linnet.source import SourceFile
>>> text, _ = format_source(SourceFile("<doc>", "module a  const X=1\\n"))
>>> print(text, end="")
module a
<BLANKLINE>
const X = 1
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from linnet.diagnostics import Diagnostic
from linnet.source import SourceFile
from linnet.syntax import ast
from linnet.syntax.doc import (
    BLANKLINE,
    HARDLINE,
    LINE,
    Concat,
    DocLike,
    concat,
    group,
    indent,
    render,
)
from linnet.syntax.format_comments import CommentCursor
from linnet.syntax.format_expr import Blank, ExprPrinter

__all__ = ["format_file", "format_source"]

# Items "with bodies or braces" are separated from their neighbours by exactly
# one blank line; one-line declarations keep the author's choice (section 17).
_BRACED = (ast.FnDecl, ast.BlockDecl, ast.StructDecl, ast.EnumDecl, ast.KernelDecl)


def format_file(file: ast.File, source: SourceFile) -> str:
    """The canonical text of `file`, parsed from `source`.

    `source` supplies the comments' surroundings and the author's blank lines;
    a file without comments can be formatted from a syntax tree built by hand
    (with any source), which is how importers write their output.
    """
    # NOTE: the layout document is a large acyclic tree built next to a large
    # syntax tree; the cyclic garbage collector would rescan both again and
    # again while finding nothing to free (it took 60% of the time on a
    # 20,000-line file), so it is paused while formatting.
    collecting = gc.isenabled()
    gc.disable()
    try:
        printer = _FilePrinter(CommentCursor(source, file.comments))
        return render(printer.file(file))
    finally:
        if collecting:
            gc.enable()


def format_source(source: SourceFile) -> tuple[str | None, list[Diagnostic]]:
    """Parse and format `source`: `(text, [])`, or `(None, diagnostics)` when it
    has syntax errors (a file with syntax errors is never rewritten)."""
    from linnet.syntax.parser import parse

    file, diagnostics = parse(source)
    if file is None or any(d.is_error for d in diagnostics):
        return None, diagnostics
    return format_file(file, source), diagnostics


def _item_blank(previous: object, current: object) -> Blank:
    if isinstance(previous, _BRACED) or isinstance(current, _BRACED):
        return "always"
    return "keep"


def _keep_blank(previous: object, current: object) -> Blank:
    return "keep"


class _FilePrinter(ExprPrinter):
    """Adds files, declarations and statements to the expression printer."""

    def __init__(self, cursor: CommentCursor) -> None:
        super().__init__(cursor)
        self._items: dict[type, Callable[[Any], DocLike]] = {
            ast.ConstDecl: self._const,
            ast.AliasDecl: self._alias,
            ast.StructDecl: self._struct,
            ast.EnumDecl: self._enum,
            ast.FnDecl: self._fn,
            ast.BlockDecl: self._block,
            ast.KernelDecl: self._kernel,
            ast.MemberDecl: self._member_decl,
        }
        self._stmts: dict[type, Callable[[Any], DocLike]] = {
            ast.LetStmt: self._let,
            ast.ComprehensionStmt: self._comprehension,
            ast.VarStmt: self._var,
            ast.AssignStmt: self._assign,
            ast.ReturnStmt: self._return,
            ast.StaticForStmt: self._static_for,
            ast.WhileStmt: self._while,
            ast.ForLoop: self._for,
            ast.YieldStmt: self._yield,
            ast.WriteStmt: self._write,
        }
        self._exprs[ast.ForLoop] = self._for  # a scan (language-extensions 1.4)

    # ------------------------------------------------------------ file

    def file(self, f: ast.File) -> DocLike:
        """`module`, one blank line, the `use` lines (the author's blank lines
        between them kept), one blank line, the items."""
        parts: list[DocLike] = [self.tok("module"), " ", self._path(f.module)]
        if f.uses:
            parts.append(BLANKLINE)
            parts.extend(self.lines(f.uses, self._use, _keep_blank))
        if f.items:
            parts.append(BLANKLINE)
            parts.extend(self.lines(f.items, self._item, _item_blank))
        parts.append(self.c.rest())
        return Concat(tuple(parts))

    def _path(self, path: tuple[ast.Ident, ...]) -> DocLike:
        parts: list[DocLike] = []
        for i, segment in enumerate(path):
            if i:
                parts.append(self.tok("."))
            parts.append(self.ident(segment))
        return Concat(tuple(parts))

    def _use(self, u: ast.UseDecl) -> DocLike:
        """`use a.b`, `use a.b::x`, `use a.b::{x, y as z}` (a breakable list)."""
        parts: list[DocLike] = [self.tok("use"), " ", self._path(u.path)]
        if u.items is not None:
            parts.append(self.tok("::"))
            if u.braced:
                parts.append(
                    self.bracketed("{", "}", u.items, self._imported, expanded=u.trailing_comma)
                )
            else:
                parts.extend(self._imported(item) for item in u.items)
        return Concat(tuple(parts))

    def _imported(self, item: ast.Imported) -> DocLike:
        if item.alias is None:
            return self.ident(item.name)
        return concat(self.ident(item.name), " ", self.tok("as"), " ", self.ident(item.alias))

    # ------------------------------------------------------------ declarations

    def _item(self, item: ast.Item | ast.MemberDecl) -> DocLike:
        return self._items[type(item)](item)

    def _pub(self, pub: bool) -> DocLike:
        return concat(self.tok("pub"), " ") if pub else ""

    def _generics(self, generics: ast.Generics | None) -> DocLike:
        if generics is None:
            return ""
        return self.bracketed(
            "<", ">", generics.params, self._generic_param, expanded=generics.trailing_comma
        )

    def _generic_param(self, p: ast.GenericParam) -> DocLike:
        """`B: Dim`, `*S: Shape`, `T: Float = bf16`."""
        parts: list[DocLike] = []
        if p.is_pack:
            parts.append(self.tok("*"))
        parts.extend((self.ident(p.name), self.tok(":"), " ", self.tok(p.kind)))
        if p.default is not None:
            parts.extend((" ", self.tok("="), " ", self.gen_arg(p.default)))
        return Concat(tuple(parts))

    def _param(self, p: ast.Param) -> DocLike:
        parts: list[DocLike] = [self.ident(p.name), self.tok(":"), " ", self.type(p.type)]
        if p.default is not None:
            parts.extend((" ", self.tok("="), " ", self.expr(p.default)))
        return Concat(tuple(parts))

    def _where(self, where: ast.Where | None) -> DocLike:
        """Section 17: no clause, `{` follows after one space; one constraint,
        `where c {` on a new line; several, `where` then one constraint per line
        (commas after all but the last) and `{` alone on a line."""
        if where is None:
            return " "
        c = self.c
        before = c.flush()
        keyword = self.tok("where")
        relations = where.relations
        if len(relations) == 1:
            held = c.hold(relations[0].span.end)
            relation = self.expr(relations[0])
            # ` {` follows on the same line: a comment here ends that line.
            after = c.release(held, breaks=False)
            return concat(before, HARDLINE, keyword, " ", relation, after, c.skip(","), " ")
        lines: list[DocLike] = []
        for i, rel in enumerate(relations):
            c.newline()
            lines.extend((c.flush(), HARDLINE, c.leading(rel.span.start)))
            held = c.hold(rel.span.end)
            lines.extend((self.expr(rel), c.release(held)))
            if i < len(relations) - 1:
                lines.append(self.tok(","))
        dropped = c.skip(",")  # a trailing comma, with its comments at the outer level
        return concat(before, HARDLINE, keyword, indent(*lines), dropped, c.flush(), HARDLINE)

    def _fn(self, fn: ast.FnDecl) -> DocLike:
        parts: list[DocLike] = [
            self._pub(fn.pub),
            self.tok(fn.kind),
            " ",
            self.ident(fn.name),
            self._generics(fn.generics),
            self.bracketed(
                "(", ")", fn.params.params, self._param, expanded=fn.params.trailing_comma
            ),
        ]
        if fn.result is not None:
            parts.extend((" ", self.tok("->"), " ", self.type(fn.result)))
        if fn.kernel is not None:
            parts.extend((" ", self.tok("kernel"), " ", self.ident(fn.kernel.name)))
            if fn.kernel.args is not None:
                parts.append(self.gen_args(fn.kernel.args))
        parts.append(self._where(fn.where))
        parts.append(self._body(fn.body))
        if fn.grad is not None:
            parts.append(self._grad_clause(fn.grad))
        return Concat(tuple(parts))

    def _grad_clause(self, g: ast.GradClause) -> DocLike:
        """` grad(y, dy) {` on the line of the body's `}` (language-extensions 3.1)."""
        return concat(
            " ",
            self.tok("grad"),
            self.tok("("),
            self.ident(g.result),
            self.tok(","),
            " ",
            self.ident(g.gradient),
            self.tok(")"),
            " ",
            self._body(g.body),
        )

    def _kernel(self, k: ast.KernelDecl) -> DocLike:
        """`kernel name<G>(params) -> out: T grid(a, b) warps(n) stages(n)` (4.1).

        Hints print `warps` before `stages`; a file with comments keeps the
        source order (the comment cursor walks the tokens in order)."""
        parts: list[DocLike] = [
            self._pub(k.pub),
            self.tok("kernel"),
            " ",
            self.ident(k.name),
            self._generics(k.generics),
            self.bracketed(
                "(", ")", k.params.params, self._param, expanded=k.params.trailing_comma
            ),
            " ",
            self.tok("->"),
            " ",
        ]
        if k.results_paren:
            parts.append(
                self.bracketed(
                    "(", ")", k.results, self._kernel_out, expanded=k.results_trailing_comma
                )
            )
        else:
            parts.append(self._kernel_out(k.results[0]))
        parts.extend((" ", self.tok("grid")))
        parts.append(self.bracketed("(", ")", k.grid, self.expr, expanded=k.grid_trailing_comma))
        hints = k.hints  # `warps` first (the parser's order)
        if self.c.active:
            hints = tuple(sorted(hints, key=lambda h: h.span.start))
        for hint in hints:
            parts.extend((" ", self.tok(hint.word), self.tok("("), self.expr(hint.value)))
            parts.append(self.tok(")"))
        parts.append(self._where(k.where))
        parts.append(self._body(k.body))
        if k.grad is not None:
            parts.append(self._grad_clause(k.grad))
        return Concat(tuple(parts))

    def _kernel_out(self, out: ast.KernelOut) -> DocLike:
        return concat(self.ident(out.name), self.tok(":"), " ", self.type(out.type))

    def _block(self, b: ast.BlockDecl) -> DocLike:
        head = concat(
            self._pub(b.pub),
            self.tok("block"),
            " ",
            self.ident(b.name),
            self._generics(b.generics),
            self._where(b.where),
        )
        return concat(head, self.braced(b.parts, self._item, _item_blank))

    def _member_decl(self, m: ast.MemberDecl) -> DocLike:
        """`param w: T`, `param b: T? = none`, `sub c: Block<H>`."""
        parts: list[DocLike] = [
            self.tok(m.kind),
            " ",
            self.ident(m.name),
            self.tok(":"),
            " ",
            self.type(m.type),
        ]
        if m.default is not None:
            parts.extend((" ", self.tok("="), " ", self.expr(m.default)))
        return Concat(tuple(parts))

    def _struct(self, s: ast.StructDecl) -> DocLike:
        head = concat(
            self._pub(s.pub),
            self.tok("struct"),
            " ",
            self.ident(s.name),
            self._generics(s.generics),
        )
        return concat(head, " ", self.braced(s.fields, self._field, _keep_blank))

    def _field(self, f: ast.Field) -> DocLike:
        return concat(self.ident(f.name), self.tok(":"), " ", self.type(f.type))

    def _enum(self, e: ast.EnumDecl) -> DocLike:
        """Variants one per line, each followed by `,`."""
        head = concat(
            self._pub(e.pub), self.tok("enum"), " ", self.ident(e.name), self._generics(e.generics)
        )
        return concat(head, " ", self.braced(e.variants, self._variant, _keep_blank))

    def _variant(self, v: ast.Ident) -> DocLike:
        return concat(self.ident(v), self.tok(","))

    def _const(self, c: ast.ConstDecl) -> DocLike:
        parts: list[DocLike] = [self._pub(c.pub), self.tok("const"), " ", self.ident(c.name)]
        if c.type is not None:
            parts.extend((self.tok(":"), " ", self.type(c.type)))
        parts.append(self.assigned("=", c.value))
        return Concat(tuple(parts))

    def _alias(self, a: ast.AliasDecl) -> DocLike:
        """`type Name<G> = Type`; the type moves to an indented next line if long."""
        head = concat(
            self._pub(a.pub), self.tok("type"), " ", self.ident(a.name), self._generics(a.generics)
        )
        before, after = self.c.tok_parts("=", breaks=True)
        return concat(head, " ", before, group(after, indent(LINE, self.type(a.type))))

    # ------------------------------------------------------------ statements

    def _body(self, body: ast.Body) -> DocLike:
        return self.braced(body.stmts, self._stmt, _keep_blank)

    def _stmt(self, stmt: ast.Stmt) -> DocLike:
        return self._stmts[type(stmt)](stmt)

    def _let(self, s: ast.LetStmt) -> DocLike:
        parts: list[DocLike] = [self.tok("let"), " ", self.pattern(s.pattern)]
        if s.type is not None:
            parts.extend((self.tok(":"), " ", self.type(s.type)))
        parts.append(self.assigned("=", s.value))
        return Concat(tuple(parts))

    def _comprehension(self, s: ast.ComprehensionStmt) -> DocLike:
        """`let t[i, *s] = value`; the index list never breaks."""
        parts: list[DocLike] = [self.tok("let"), " ", self.ident(s.name), self.tok("[")]
        for i, index in enumerate(s.indices):
            if i:
                parts.extend((self.tok(","), " "))
            if index.is_pack:
                parts.append(self.tok("*"))
            parts.append(self.ident(index.name))
        parts.extend((self.tok("]"), self.assigned("=", s.value)))
        return Concat(tuple(parts))

    def _var(self, s: ast.VarStmt) -> DocLike:
        parts: list[DocLike] = [self.tok("var"), " ", self.ident(s.name)]
        if s.type is not None:
            parts.extend((self.tok(":"), " ", self.type(s.type)))
        parts.append(self.assigned("=", s.value))
        return Concat(tuple(parts))

    def _assign(self, s: ast.AssignStmt) -> DocLike:
        return concat(self.ident(s.target), self.assigned("=", s.value))

    def _return(self, s: ast.ReturnStmt) -> DocLike:
        """`return value` always keeps the value on the `return` line."""
        if s.value is None:
            return self.tok("return")
        return concat(self.tok("return"), " ", self.expr(s.value))

    def _static_for(self, s: ast.StaticForStmt) -> DocLike:
        """`static for p in iter {` or `static for i in a..b {` (no spaces at `..`)."""
        parts: list[DocLike] = [
            self.tok("static"),
            " ",
            self.tok("for"),
            " ",
            self.pattern(s.pattern),
            " ",
            self.tok("in"),
            " ",
            self.expr(s.iter),
        ]
        if s.stop is not None:
            parts.extend((self.tok(".."), self.expr(s.stop)))
        parts.extend((" ", self._body(s.body)))
        return Concat(tuple(parts))

    def _write(self, s: ast.WriteStmt) -> DocLike:
        """A kernel write prints like a call: `store(y[i], v, mask)`."""
        args = (s.target, s.value) if s.mask is None else (s.target, s.value, s.mask)
        return concat(
            self.tok(s.word), self.bracketed("(", ")", args, self.expr, expanded=s.trailing_comma)
        )

    def _while(self, s: ast.WhileStmt) -> DocLike:
        return concat(self.tok("while"), " ", self.expr(s.cond), " ", self._body(s.body))

    def _for(self, s: ast.ForLoop) -> DocLike:
        """`for i in a..b {` (no spaces at `..`), the body indented once; as a value too."""
        return concat(
            self.tok("for"), " ", self.ident(s.var), " ", self.tok("in"), " ",
            self.expr(s.start), self.tok(".."), self.expr(s.stop), " ", self._body(s.body),
        )  # fmt: skip

    def _yield(self, s: ast.YieldStmt) -> DocLike:
        """`yield value` keeps the value on its line, like `return`."""
        return concat(self.tok("yield"), " ", self.expr(s.value))
