"""Files, declarations and statements (language.md 3.2 and the 3.4 error table).

Recovery points live here: the statement loop of a body, the part loop of a
block and the item loop of a file each catch `Abort`, skip to the next
statement or item, and go on, so every syntax error of a file is reported.
"""

from __future__ import annotations

from typing import Literal, cast

from linnet.source import Span
from linnet.spelling import did_you_mean
from linnet.syntax import ast
from linnet.syntax.lexer import EOF, IDENT, KEYWORD
from linnet.syntax.parser_base import (
    ITEM_KEYWORDS,
    MAX_DEPTH,
    MEMBER_KEYWORDS,
    STATEMENT_KEYWORDS,
    Abort,
)
from linnet.syntax.parser_expr import COMPARISONS, ExprParser
from linnet.syntax.tokens import KIND_NAMES, WRITE_WORDS

_EXPRESSION_STARTS = frozenset(
    {"(", "[", "!", "-", "+", "true", "false", "none", "some", "if", "match", "for"}
)
_FN_KINDS = frozenset({"fn", "op", "entry"})
_KIND_HELP = "valid kinds are `Dim`, `Shape`, `DType`, `Numeric`, `Integer`, `Float`"
_WHERE_NOTE = "each `where` entry compares two dimensions, e.g. `H % N == 0` or `N > 0`"


class DeclParser(ExprParser):
    """Statements, items and whole files."""

    __slots__ = ()

    # ============================================================ file

    def parse_file(self) -> ast.File:
        """File ::= Header UseDecl* Item*"""
        module: tuple[ast.Ident, ...] = ()
        module_span = Span(self.file, 0, 0)
        if self.texts[self.pos] == "module":
            start = self.pos
            try:
                module, module_span = self.header()
            except Abort:
                self.recover(start, statement=False)
        else:
            self._missing_module()
        uses: list[ast.UseDecl] = []
        items: list[ast.Item] = []
        while self.kinds[self.pos] is not EOF:
            start = self.pos
            depth = self.depth
            try:
                self.top_level_part(uses, items)
            except Abort:
                self.depth = depth
                self.recover(start, statement=False)
            self.ensure_progress(start)
        end = len(self.file.text)
        comments = tuple(self.comments)
        return ast.File(
            module, module_span, tuple(uses), tuple(items), comments, Span(self.file, 0, end)
        )

    def _missing_module(self) -> None:
        pos = self.pos
        span = self.token_span(pos) if self.kinds[pos] is not EOF else Span(self.file, 0, 0)
        self.report(
            "E1102",
            f"expected a `module` declaration, found {self.describe(pos)}",
            span,
            "the file must start with `module`",
            help=("every file starts with a declaration such as `module my.module`",),
        )

    def header(self) -> tuple[tuple[ast.Ident, ...], Span]:
        """Header ::= 'module' Path"""
        start = self.starts[self.pos]
        self.pos += 1
        path = [self.ident("a module name")]
        while self.texts[self.pos] == ".":
            self.pos += 1
            path.append(self.ident("a module name"))
        return tuple(path), Span(self.file, start, self.prev_end())

    def top_level_part(self, uses: list[ast.UseDecl], items: list[ast.Item]) -> None:
        pos = self.pos
        text = self.texts[pos]
        if text == "use":
            if items:
                self.report(
                    "E1101",
                    "expected an item, found keyword `use`",
                    self.token_span(pos),
                    "`use` after an item",
                    notes=("all `use` declarations must come before the first item",),
                )
            decl = self.use_decl()
            if decl is not None:
                uses.append(decl)
        elif text == "module":
            self.report(
                "E1101",
                "expected an item, found keyword `module`",
                self.token_span(pos),
                "a second module declaration",
                notes=("a file has one `module` declaration, at its start",),
            )
            self.header()
        elif text in MEMBER_KEYWORDS or (text == "pub" and self.texts[pos + 1] in MEMBER_KEYWORDS):
            keyword = pos + 1 if text == "pub" else pos
            self.report(
                "E1101",
                f"expected an item, found keyword `{self.texts[keyword]}`",
                self.token_span(keyword),
                "member outside a block",
                notes=("`param`, `buffer`, `state` and `sub` members belong inside a `block`",),
            )
            self.member_part()  # parsed to stay in step; the member is dropped
        else:
            items.append(self.item())

    # ============================================================ use

    def use_decl(self) -> ast.UseDecl | None:
        """UseDecl ::= 'use' UseHead ('.' IDENT)* ('::' Selection)?

        Returns None for `use self...` / `use super...` (E1103), which are parsed
        but not kept, so no loader tries to resolve them.
        """
        start = self.starts[self.pos]
        self.pos += 1
        pos = self.pos
        head_text = self.texts[pos]
        keep = True
        if head_text == "self" or head_text == "super" or head_text == "crate":
            if head_text != "crate":
                keep = False
                self.report(
                    "E1103",
                    f"`use {head_text}` paths are not supported",
                    self.token_span(pos),
                    "reserved for future imports",
                    help=("name the module by its full path: `crate.a.b`, `std.a.b` or `dep.a.b`",),
                )
            self.pos = pos + 1
            path = [ast.Ident(head_text, self.token_span(pos))]
        else:
            path = [self.ident("a module path")]
        while self.texts[self.pos] == ".":
            self.pos += 1
            path.append(self.ident("a module name"))
        items: tuple[ast.Imported, ...] | None = None
        braced = trailing = False
        if self.texts[self.pos] == "::":
            self.pos += 1
            if self.texts[self.pos] == "{":
                braced = True
                items, trailing = self.use_list()
            else:
                items = (self.single_import(),)
        decl = ast.UseDecl(
            tuple(path), items, braced, trailing, Span(self.file, start, self.prev_end())
        )
        return decl if keep else None

    def single_import(self) -> ast.Imported:
        name = self.ident("an item name")
        alias = None
        if self.texts[self.pos] == "as":
            self.report(
                "E1101",
                "expected the end of the `use` declaration, found keyword `as`",
                self.token_span(self.pos),
                "`as` needs braces",
                help=(f"rename inside braces: `::{{{name.name} as ...}}`",),
            )
            self.pos += 1
            alias = self.ident("an alias")
        return ast.Imported(name, alias, Span(self.file, name.span.start, self.prev_end()))

    def use_list(self) -> tuple[tuple[ast.Imported, ...], bool]:
        """'{' Imported (',' Imported)* ','? '}'"""
        self.pos += 1
        imported = [self.imported()]
        trailing = False
        while self.texts[self.pos] == ",":
            self.pos += 1
            trailing = True
            if self.texts[self.pos] == "}":
                break
            imported.append(self.imported())
            trailing = False
        self.expect("}")
        return tuple(imported), trailing

    def imported(self) -> ast.Imported:
        """Imported ::= IDENT ('as' IDENT)?"""
        name = self.ident("an item name")
        alias = None
        if self.texts[self.pos] == "as":
            self.pos += 1
            alias = self.ident("an alias")
        return ast.Imported(name, alias, Span(self.file, name.span.start, self.prev_end()))

    # ============================================================ items

    def item(self) -> ast.Item:
        """Item ::= 'pub'? ItemKind"""
        start = self.starts[self.pos]
        pub = self.texts[self.pos] == "pub"
        if pub:
            self.pos += 1
        text = self.texts[self.pos]
        if text in _FN_KINDS:
            return self.fn_decl(pub, start)
        if text == "block":
            return self.block_decl(pub, start)
        if text == "kernel":
            return self.kernel_decl(pub, start)
        if text == "const":
            return self.const_decl(pub, start)
        if text == "type":
            return self.alias_decl(pub, start)
        if text == "struct":
            return self.struct_decl(pub, start)
        if text == "enum":
            return self.enum_decl(pub, start)
        if text == "extern":
            self.report(
                "E1103",
                "`extern` declarations are not supported",
                self.token_span(self.pos),
                "reserved for future versions",
                help=("give the function a body written in Linnet",),
            )
            self.pos += 1
            if self.texts[self.pos] in ITEM_KEYWORDS:
                self.pos += 1  # skip the declaration it introduces, too
            raise Abort
        what = "an item after `pub`" if pub else "an item such as `fn` or `block`"
        items = ITEM_KEYWORDS - {"pub", "use", "extern"} if pub else ITEM_KEYWORDS - {"extern"}
        words = [*sorted(items), *sorted(MEMBER_KEYWORDS)]  # an item before a member on ties
        raise self.expected(what, help=self.keyword_hint(words))

    def const_decl(self, pub: bool, start: int) -> ast.ConstDecl:
        """ConstDecl ::= 'const' IDENT (':' Type)? '=' Expr"""
        self.pos += 1
        name = self.ident("a constant name")
        declared = None
        if self.texts[self.pos] == ":":
            self.pos += 1
            declared = self.root_type()
        self.expect("=")
        value = self.root_expr()
        return ast.ConstDecl(pub, name, declared, value, Span(self.file, start, value.span.end))

    def alias_decl(self, pub: bool, start: int) -> ast.AliasDecl:
        """AliasDecl ::= 'type' IDENT Generics? '=' Type"""
        self.pos += 1
        name = self.ident("a type name")
        generics = self.generics() if self.texts[self.pos] == "<" else None
        self.expect("=")
        aliased = self.root_type()
        return ast.AliasDecl(pub, name, generics, aliased, Span(self.file, start, aliased.span.end))

    def struct_decl(self, pub: bool, start: int) -> ast.StructDecl:
        """StructDecl ::= 'struct' IDENT Generics? '{' Field* '}' (fields: no commas)"""
        self.pos += 1
        name = self.ident("a struct name")
        generics = self.generics() if self.texts[self.pos] == "<" else None
        self.expect("{")
        fields: list[ast.Field] = []
        while self.texts[self.pos] != "}":
            if self.texts[self.pos] == ",":
                self.report(
                    "E1101",
                    "expected a field or `}`, found `,`",
                    self.token_span(self.pos),
                    "unexpected comma",
                    notes=("struct fields are separated by newlines, not commas",),
                )
                self.pos += 1
                continue
            field_name = self.ident("a field name")
            self.expect(":")
            field_type = self.root_type()
            fields.append(
                ast.Field(
                    field_name,
                    field_type,
                    Span(self.file, field_name.span.start, field_type.span.end),
                )
            )
        end = self.expect("}")
        return ast.StructDecl(pub, name, generics, tuple(fields), Span(self.file, start, end))

    def enum_decl(self, pub: bool, start: int) -> ast.EnumDecl:
        """EnumDecl ::= 'enum' IDENT Generics? '{' (IDENT (',' IDENT)* ','?)? '}'"""
        self.pos += 1
        name = self.ident("an enum name")
        generics = self.generics() if self.texts[self.pos] == "<" else None
        self.expect("{")
        variants: list[ast.Ident] = []
        trailing = False
        while self.texts[self.pos] != "}":
            variants.append(self.ident("a variant name"))
            if self.texts[self.pos] == "(":
                self.variant_payload()
            if self.texts[self.pos] == ",":
                self.pos += 1
                trailing = True
            elif self.texts[self.pos] == "}":
                trailing = False
            else:
                raise self.expected("`,` or `}`")
        end = self.expect("}")
        return ast.EnumDecl(
            pub, name, generics, tuple(variants), trailing, Span(self.file, start, end)
        )

    def variant_payload(self) -> None:
        """E1103 for `A(i32)`; the parenthesised payload is skipped."""
        start = self.pos
        depth = 0
        while self.kinds[self.pos] is not EOF:
            text = self.texts[self.pos]
            self.pos += 1
            depth += (text == "(") - (text == ")")
            if depth == 0:
                break
        self.report(
            "E1103",
            "enum variants cannot carry a payload",
            Span(self.file, self.starts[start], self.prev_end()),
            "payloads are not supported",
            notes=("enum variants are plain names in this version",),
        )

    def fn_decl(self, pub: bool, start: int) -> ast.FnDecl:
        """FnDecl / OpDecl / EntryDecl: kind IDENT Generics? Params ('->' Type)? Where? Body"""
        kind = cast(ast.FnKind, self.texts[self.pos])
        self.pos += 1
        name = self.ident("a function name")
        generics = self.generics() if self.texts[self.pos] == "<" else None
        params = self.params()
        result = None
        kernel = None
        if self.texts[self.pos] == "->":
            self.pos += 1
            result = self.root_type()
            if self.texts[self.pos] == "kernel":
                kernel = self.kernel_ref(kind)
        elif kind == "op":
            self.report(
                "E1101",
                f"expected `->` and a result type, found {self.describe(self.pos)}",
                self.token_span(self.pos),
                "expected `->`",
                notes=("an `op` must declare its result type",),
            )
        where = self.where() if self.texts[self.pos] == "where" else None
        body = self.body()
        grad = self.grad_clause()
        return ast.FnDecl(
            pub,
            kind,
            name,
            generics,
            params,
            result,
            where,
            body,
            Span(self.file, start, (body if grad is None else grad).span.end),
            grad,
            kernel,
        )

    def grad_clause(self) -> ast.GradClause | None:
        """GradClause ::= 'grad' '(' IDENT ',' IDENT ')' Body, after any function body
        (language-extensions rule 19: `grad` is contextual; the checker reports E2125
        where a clause cannot stand)."""
        pos = self.pos
        if self.kinds[pos] is not IDENT or self.texts[pos] != "grad":
            return None
        start = self.starts[pos]
        self.pos += 1
        self.expect("(")
        result = self.ident("the name of the op's result")
        self.expect(",")
        gradient = self.ident("the name of the incoming gradient")
        head_end = self.expect(")")
        body = self.body()
        return ast.GradClause(
            result,
            gradient,
            body,
            Span(self.file, start, head_end),
            Span(self.file, start, body.span.end),
        )

    def block_decl(self, pub: bool, start: int) -> ast.BlockDecl:
        """BlockDecl ::= 'block' IDENT Generics? Where? '{' BlockPart* '}'"""
        self.pos += 1
        name = self.ident("a block name")
        generics = self.generics() if self.texts[self.pos] == "<" else None
        where = self.where() if self.texts[self.pos] == "where" else None
        open_index = self.pos
        self.expect("{")
        if self.depth >= MAX_DEPTH:
            raise self.too_deep()
        self.depth += 1
        parts: list[ast.MemberDecl | ast.Item] = []
        while True:
            pos = self.pos
            text = self.texts[pos]
            if text == "}" or self.kinds[pos] is EOF:
                break
            depth = self.depth
            try:
                parts.append(self.block_part())
            except Abort:
                self.depth = depth
                self.recover(pos, statement=False, in_block=True)
            self.ensure_progress(pos)
        self.depth -= 1
        end = self.expect_closing_brace(open_index)
        body_span = Span(self.file, self.starts[open_index], end)
        return ast.BlockDecl(
            pub, name, generics, where, tuple(parts), body_span, Span(self.file, start, end)
        )

    def block_part(self) -> ast.MemberDecl | ast.Item:
        """BlockPart ::= Member | Item"""
        text = self.texts[self.pos]
        if text in MEMBER_KEYWORDS or (
            text == "pub" and self.texts[self.pos + 1] in MEMBER_KEYWORDS
        ):
            return self.member_part()
        if text == "use":
            self.report(
                "E1101",
                "expected a member or an item, found keyword `use`",
                self.token_span(self.pos),
                "`use` inside a block",
                notes=("`use` declarations go at the top of the file, after `module`",),
            )
            self.use_decl()
            raise Abort
        return self.item()

    def member_part(self) -> ast.MemberDecl:
        """A member, reporting `pub` on it (members are never public)."""
        if self.texts[self.pos] == "pub":
            self.report(
                "E1101",
                f"expected an item after `pub`, found keyword `{self.texts[self.pos + 1]}`",
                self.token_span(self.pos),
                "members cannot be `pub`",
                notes=("members are read by path, not exported; remove `pub`",),
            )
            self.pos += 1
        return self.member()

    def member(self) -> ast.MemberDecl:
        """Member ::= ('param' | 'buffer' | 'state' | 'sub') IDENT ':' Type ('=' Expr)?"""
        start = self.starts[self.pos]
        kind = cast(ast.MemberKind, self.texts[self.pos])
        self.pos += 1
        name = self.ident("a member name")
        self.expect(":")
        member_type = self.root_type()
        default = None
        if self.texts[self.pos] == "=":
            if kind == "buffer" or kind == "state":
                self.report(
                    "E1101",
                    f"expected the end of the `{kind}` member, found `=`",
                    self.token_span(self.pos),
                    f"a `{kind}` member has no default",
                    notes=("only `param` and `sub` members take a default (`= none`)",),
                )
            self.pos += 1
            default = self.root_expr()
        end = default.span.end if default is not None else member_type.span.end
        return ast.MemberDecl(kind, name, member_type, default, Span(self.file, start, end))

    # ============================================================ signatures

    def generics(self) -> ast.Generics:
        """Generics ::= '<' GenParam (',' GenParam)* ','? '>'"""
        start = self.starts[self.pos]
        self.pos += 1
        params: list[ast.GenericParam] = []
        trailing = False
        while True:
            param = self.generic_param()
            if param is not None:
                params.append(param)
            if self.texts[self.pos] != ",":
                trailing = False
                break
            self.pos += 1
            trailing = True
            if self.texts[self.pos] == ">":
                break
        if self.texts[self.pos] != ">":
            raise self.expected("`,` or `>`")
        end = self.ends[self.pos]
        self.pos += 1
        return ast.Generics(tuple(params), trailing, Span(self.file, start, end))

    def generic_param(self) -> ast.GenericParam | None:
        """GenParam ::= '*'? IDENT ':' KindName ('=' GenArg)?; None for an unknown kind."""
        start = self.starts[self.pos]
        is_pack = self.texts[self.pos] == "*"
        if is_pack:
            self.pos += 1
        name = self.ident("a generic parameter name")
        self.expect(":")
        pos = self.pos
        kind_text = self.texts[pos]
        known = kind_text in KIND_NAMES
        if not known:
            if self.kinds[pos] is not IDENT:
                raise self.expected("a generic kind", help=(_KIND_HELP,))
            self.report(
                "E1101",
                f"expected a generic kind, found identifier `{kind_text}`",
                self.token_span(pos),
                "unknown kind",
                help=did_you_mean(kind_text, KIND_NAMES) or (_KIND_HELP,),
            )
        self.pos = pos + 1
        default = None
        if self.texts[self.pos] == "=":
            self.pos += 1
            start_default = self.pos
            default = self.gen_arg()
            self.check_height(default, start_default)
        if not known:
            return None
        return ast.GenericParam(
            name,
            is_pack,
            cast(ast.KindName, kind_text),
            self.token_span(pos),
            default,
            Span(self.file, start, self.prev_end()),
        )

    def params(self) -> ast.Params:
        """Params ::= '(' (Param (',' Param)* ','?)? ')'"""
        start_index = self.pos
        self.expect("(")
        params, trailing = self.items_to_paren(self.param)
        end = self.ends[self.pos]
        self.pos += 1
        return ast.Params(tuple(params), trailing, Span(self.file, self.starts[start_index], end))

    def param(self) -> ast.Param:
        """Param ::= IDENT ':' Type ('=' Expr)?"""
        name = self.ident("a parameter name")
        self.expect(":")
        param_type = self.root_type()
        default = None
        if self.texts[self.pos] == "=":
            self.pos += 1
            default = self.root_expr()
        end = default.span.end if default is not None else param_type.span.end
        return ast.Param(name, param_type, default, Span(self.file, name.span.start, end))

    def where(self) -> ast.Where:
        """Where ::= 'where' Relation (',' Relation)* ','?; each a comparison."""
        start = self.starts[self.pos]
        self.pos += 1
        relations: list[ast.Binary] = []
        trailing = False
        while True:
            relation = self.root_expr()
            if type(relation) is ast.Binary and relation.op in COMPARISONS:
                relations.append(relation)
            else:
                self.report(
                    "E1101",
                    f"expected a comparison, found `{_clip(relation.span.text)}`",
                    relation.span,
                    "not a comparison",
                    notes=(_WHERE_NOTE,),
                )
            if self.texts[self.pos] != ",":
                trailing = False
                break
            self.pos += 1
            trailing = True
            if self.texts[self.pos] == "{":
                break
        return ast.Where(tuple(relations), trailing, Span(self.file, start, self.prev_end()))

    # ============================================================ statements

    def body(self) -> ast.Body:
        """Body ::= '{' Stmt* '}'"""
        open_index = self.pos
        self.expect("{")
        if self.depth >= MAX_DEPTH:
            raise self.too_deep()
        self.depth += 1
        statements: list[ast.Stmt] = []
        texts = self.texts
        while True:
            pos = self.pos
            text = texts[pos]
            if text == "}" or self.kinds[pos] is EOF:
                break
            if text in ITEM_KEYWORDS or text in MEMBER_KEYWORDS or text == "module":
                break  # a missing `}`: let the enclosing item loop take it from here
            depth = self.depth
            try:
                statements.append(self.statement())
            except Abort:
                self.depth = depth
                self.recover(pos, statement=True)
            self.ensure_progress(pos)
        self.depth -= 1
        end = self.expect_closing_brace(open_index)
        return ast.Body(tuple(statements), Span(self.file, self.starts[open_index], end))

    def expect_closing_brace(self, open_index: int) -> int:
        """Consume the `}` of the brace at `open_index`; report it missing otherwise."""
        if self.texts[self.pos] == "}":
            end = self.ends[self.pos]
            self.pos += 1
            return end
        self.report(
            "E1101",
            f"expected `}}`, found {self.describe(self.pos)}",
            self.token_span(self.pos),
            "expected `}`",
            notes=(
                "the `{{` at {}:{} is not closed".format(
                    *self.file.line_col(self.starts[open_index])
                ),
            ),
        )
        return max(self.prev_end(), self.ends[open_index])

    def statement(self) -> ast.Stmt:
        """Stmt ::= Let | Var | Assign | Return | StaticFor | While | ForLoop | Yield
        (no expression statements)."""
        pos = self.pos
        text = self.texts[pos]
        if text == "let":
            return self.let_stmt()
        if text == "var":
            return self.var_stmt()
        if text == "return":
            return self.return_stmt()
        if text == "static":
            return self.static_for()
        if text == "while":
            return self.while_stmt()
        if text == "for":
            return self.for_loop()
        if text == "yield" and self.texts[pos + 1] != "=":
            return self.yield_stmt()
        if text in WRITE_WORDS and self.kinds[pos] is IDENT and self.texts[pos + 1] == "(":
            return self.write_stmt()
        if (self.is_name(pos) or text == "yield") and self.texts[pos + 1] == "=":  # 3.3 rule 5
            target = self.ident("an assignment target")
            self.pos += 1
            value = self.root_expr()
            return ast.AssignStmt(target, value, Span(self.file, target.span.start, value.span.end))
        hint = self.keyword_hint(sorted(STATEMENT_KEYWORDS))
        if self.starts_expression(pos):
            raise self.expected(
                "a statement",
                notes=("there are no expression statements",),
                help=hint or ("bind it with `let` or `return` it",),
            )
        raise self.expected("a statement", help=hint)

    def starts_expression(self, pos: int) -> bool:
        kind = self.kinds[pos]
        if kind is EOF:
            return False
        return self.texts[pos] in _EXPRESSION_STARTS or kind.name in _LITERAL_OR_NAME

    def let_stmt(self) -> ast.LetStmt | ast.ComprehensionStmt:
        """LetStmt, or a comprehension when `let IDENT [` (3.3 rule 4)."""
        start = self.starts[self.pos]
        self.pos += 1
        pos = self.pos
        if self.is_name(pos) and self.texts[pos + 1] == "[":
            return self.comprehension(start)
        pattern = self.pattern()
        declared = None
        if self.texts[self.pos] == ":":
            self.pos += 1
            declared = self.root_type()
        self.expect("=")
        value = self.root_expr()
        return ast.LetStmt(pattern, declared, value, Span(self.file, start, value.span.end))

    def comprehension(self, start: int) -> ast.ComprehensionStmt:
        """'let' IDENT '[' OutIdx (',' OutIdx)* ']' '=' Expr"""
        name = self.ident("a tensor name")
        self.pos += 1
        indices = [self.out_index()]
        while self.texts[self.pos] == ",":
            self.pos += 1
            indices.append(self.out_index())
        self.expect("]")
        self.expect("=")
        value = self.root_expr()
        return ast.ComprehensionStmt(
            name, tuple(indices), value, Span(self.file, start, value.span.end)
        )

    def out_index(self) -> ast.OutIndex:
        """OutIdx ::= '*'? IDENT"""
        start = self.starts[self.pos]
        is_pack = self.texts[self.pos] == "*"
        if is_pack:
            self.pos += 1
        name = self.ident("an index name")
        return ast.OutIndex(name, is_pack, Span(self.file, start, name.span.end))

    def var_stmt(self) -> ast.VarStmt:
        """VarStmt ::= 'var' IDENT (':' Type)? '=' Expr"""
        start = self.starts[self.pos]
        self.pos += 1
        name = self.ident("a variable name")
        declared = None
        if self.texts[self.pos] == ":":
            self.pos += 1
            declared = self.root_type()
        self.expect("=")
        value = self.root_expr()
        return ast.VarStmt(name, declared, value, Span(self.file, start, value.span.end))

    def return_stmt(self) -> ast.ReturnStmt:
        """ReturnStmt ::= 'return' Expr? (3.3 rule 6)"""
        pos = self.pos
        self.pos = pos + 1
        following = pos + 1
        has_value = self.starts_expression(following) and not (
            self.is_name(following) and self.texts[following + 1] == "="
        )
        if not has_value:
            return ast.ReturnStmt(None, self.token_span(pos))
        value = self.root_expr()
        return ast.ReturnStmt(value, Span(self.file, self.starts[pos], value.span.end))

    def static_for(self) -> ast.StaticForStmt:
        """StaticFor ::= 'static' 'for' Pattern 'in' Expr ('..' Expr)? Body"""
        start = self.starts[self.pos]
        self.pos += 1
        self.expect("for")
        pattern = self.pattern()
        self.expect("in")
        iterable = self.root_expr()
        stop = None
        if self.texts[self.pos] == "..":
            self.pos += 1
            stop = self.root_expr()
        body = self.body()
        return ast.StaticForStmt(
            pattern, iterable, stop, body, Span(self.file, start, body.span.end)
        )

    def for_loop(self) -> ast.ForLoop:
        """ForLoop ::= 'for' IDENT 'in' Expr '..' Expr Body (language-extensions 0.2, rules
        16-18): the statement form and, where an expression is expected, a scan."""
        start = self.starts[self.pos]
        self.pos += 1
        if self.texts[self.pos] == "(":
            raise self.expected(
                "a loop variable",
                notes=("a runtime `for` binds one name",),
                help=("destructure inside the body with `let`",),
            )
        if self.kinds[self.pos] is KEYWORD and self.texts[self.pos + 1] == "in":
            self.report(  # rule 17: a keyword as the loop variable; take it as the name
                "E1101",
                f"expected a loop variable, found keyword `{self.texts[self.pos]}`",
                self.token_span(self.pos),
                "keywords cannot be used as names",
            )
            var = ast.Ident(self.texts[self.pos], self.token_span(self.pos))
            self.pos += 1
        else:
            var = self.ident("a loop variable")
        self.expect("in")
        first = self.expr()
        if self.texts[self.pos] != "..":
            raise self.expected(
                "`..`",
                notes=("a runtime `for` runs over a range `start..stop`",),
                help=("loop over a `sub` array with `static for`",),
            )
        self.pos += 1
        last = self.expr()
        body = self.body()
        return ast.ForLoop(var, first, last, body, Span(self.file, start, body.span.end))

    def yield_stmt(self) -> ast.YieldStmt:
        """YieldStmt ::= 'yield' Expr"""
        start = self.starts[self.pos]
        self.pos += 1
        value = self.root_expr()
        return ast.YieldStmt(value, Span(self.file, start, value.span.end))

    def while_stmt(self) -> ast.WhileStmt:
        """WhileStmt ::= 'while' Expr Body"""
        start = self.starts[self.pos]
        self.pos += 1
        cond = self.root_expr()
        body = self.body()
        return ast.WhileStmt(cond, body, Span(self.file, start, body.span.end))

    # ============================================================ kernels (language-extensions 4.1)

    def kernel_decl(self, pub: bool, start: int) -> ast.KernelDecl:
        """KernelDecl ::= 'kernel' IDENT Generics? Params '->' KernelOuts
        'grid' '(' Exprs? ')' Hint* Where? Body"""
        self.pos += 1
        name = self.ident("a kernel name")
        generics = self.generics() if self.texts[self.pos] == "<" else None
        params = self.params()
        if self.texts[self.pos] != "->":
            raise self.expected(
                "`->` and the kernel's named results",
                notes=("a kernel names its results: `-> out: Tensor[N; f32]`",),
            )
        self.pos += 1
        results, paren, results_trailing = self.kernel_outs()
        if not (self.texts[self.pos] == "grid" and self.texts[self.pos + 1] == "("):
            raise self.expected(
                "`grid(...)`", notes=("a kernel header gives its launch grid after its results",)
            )
        grid_start = self.starts[self.pos]
        self.pos += 2
        grid, grid_trailing = self.items_to_paren(self.root_expr)
        self.pos += 1
        grid_span = Span(self.file, grid_start, self.prev_end())
        hints: list[ast.KernelHint] = []
        while self.texts[self.pos] in _HINT_WORDS and self.texts[self.pos + 1] == "(":
            word_index = self.pos
            self.pos += 2
            value = self.root_expr()
            self.expect(")")
            hints.append(
                ast.KernelHint(
                    cast(Literal["warps", "stages"], self.texts[word_index]),
                    self.token_span(word_index),
                    value,
                    Span(self.file, self.starts[word_index], self.prev_end()),
                )
            )
        where = self.where() if self.texts[self.pos] == "where" else None
        body = self.body()
        grad = self.grad_clause()  # rule 19: accepted on every kind, E2125 in the checker
        return ast.KernelDecl(
            pub,
            name,
            generics,
            params,
            tuple(results),
            paren,
            results_trailing,
            tuple(grid),
            grid_trailing,
            grid_span,
            tuple(sorted(hints, key=lambda h: h.word != "warps")),  # canonical order (4.1)
            where,
            body,
            Span(self.file, start, (body if grad is None else grad).span.end),
            grad,
        )

    def kernel_outs(self) -> tuple[list[ast.KernelOut], bool, bool]:
        """KernelOuts ::= KernelOut | '(' KernelOut (',' KernelOut)* ','? ')'"""
        if self.texts[self.pos] != "(":
            return [self.kernel_out()], False, False
        self.pos += 1
        outs = [self.kernel_out()]
        trailing = False
        while self.texts[self.pos] == ",":
            self.pos += 1
            trailing = True
            if self.texts[self.pos] == ")":
                break
            outs.append(self.kernel_out())
            trailing = False
        self.expect(")")
        return outs, True, trailing

    def kernel_out(self) -> ast.KernelOut:
        """KernelOut ::= IDENT ':' Type"""
        name = self.ident("a result name")
        self.expect(":")
        out_type = self.root_type()
        return ast.KernelOut(name, out_type, Span(self.file, name.span.start, out_type.span.end))

    def kernel_ref(self, kind: str) -> ast.KernelRef:
        """KernelRef ::= 'kernel' IDENT GenArgs? (after an op's result type only)"""
        start_index = self.pos
        if kind != "op":
            self.report(
                "E1101",
                "expected `where` or `{`, found keyword `kernel`",
                self.token_span(start_index),
                "only an `op` can refer to a kernel",
                help=("declare it as `op ... -> R kernel name<...>`",),
            )
        self.pos += 1
        name = self.ident("a kernel name")
        args = self.gen_args() if self.texts[self.pos] == "<" else None
        return ast.KernelRef(name, args, Span(self.file, self.starts[start_index], self.prev_end()))

    def write_stmt(self) -> ast.WriteStmt:
        """WriteStmt ::= WriteWord '(' Expr ',' Expr (',' Expr)? ','? ')'"""
        word_index = self.pos
        self.pos += 2

        def at_most_three(count: int) -> None:
            if count == 3:
                raise self.expected(
                    "`)`", notes=("a write takes a target, a value and an optional mask",)
                )

        exprs, trailing = self.items_to_paren(self.root_expr, at_most_three)
        word = self.texts[word_index]
        if len(exprs) < 2:
            raise self.expected(
                "an argument" if exprs else "the write's target",
                notes=(
                    f"`{word}(target[indices], value)` or `{word}(target[indices], value, mask)`",
                ),
            )
        self.pos += 1
        return ast.WriteStmt(
            cast(ast.WriteWord, word),
            self.token_span(word_index),
            exprs[0],
            exprs[1],
            exprs[2] if len(exprs) == 3 else None,
            trailing,
            Span(self.file, self.starts[word_index], self.prev_end()),
        )


_HINT_WORDS = frozenset({"warps", "stages"})
_LITERAL_OR_NAME = frozenset({"IDENT", "RESERVED", "INT", "FLOAT", "STRING"})


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:37] + "..."
