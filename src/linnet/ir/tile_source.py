"""What kernel code generators share: concrete tile types and the body's facts.

Stage: backend code generation for kernels (language-extensions 4.6, 4.7).
In: a `KernelInstance` (the checked kernel and its bound generics). Out:
concrete shapes and dtypes of the body's expressions (the checker's types
with the generics substituted), names for the body's locals, the write word
of each result, and `Unsupported` for what a generator has no tile form for
(4.5: the op's body runs then).

The Triton (`linnet.torch.triton_kernels`) and Pallas (`linnet.jax.pallas`)
generators walk the kernel's syntax tree with these helpers; the tree is
already checked, so only the generator limits can fail here.
"""

from __future__ import annotations

from linnet.check.decls import GenericInfo, IndexVar, LocalInfo
from linnet.check.dims import Dim
from linnet.check.types import CtFloatType, CtIntType, ScalarType, TensorType, Type
from linnet.errors import InternalError, LinnetError
from linnet.ir.kernel_instance import KernelInstance
from linnet.syntax import ast


class Unsupported(Exception):
    """The instantiated kernel is outside the generator's limits (4.5)."""


class TileTypes:
    """Concrete types of a kernel body's expressions, and local names."""

    def __init__(self, instance: KernelInstance) -> None:
        self.instance = instance
        self.program = instance.program
        self.env = instance.env
        self._names: dict[LocalInfo, str] = {}
        self._taken: set[str] = set()

    # ------------------------------------------------------------ types

    def type_of(self, e: ast.Expr) -> Type:
        t = self.program.types.get(e)
        if t is None:
            raise Unsupported(f"no type for `{e.span.text}`")
        return t

    def shape(self, e: ast.Expr) -> tuple[int, ...]:
        """The concrete tile shape of `e` (`()` for scalars); extents must be powers of two."""
        t = self.type_of(e)
        if isinstance(t, TensorType):
            shape = self.env.tensor_type(t).shape
            for n in shape:
                if n <= 0 or n & (n - 1):
                    raise Unsupported(f"tile extent {n} is not a power of two")
            return shape
        return ()

    def dtype(self, e: ast.Expr) -> str:
        t = self.type_of(e)
        if isinstance(t, (TensorType, ScalarType)):
            return self.env.dtype(t.dtype)
        if isinstance(t, CtIntType):
            return "i64"
        if isinstance(t, CtFloatType):
            return "f64"
        raise Unsupported(f"`{e.span.text}` is not a tile or scalar")

    def constant(self, e: ast.Expr) -> int | None:
        """The value of a compile-time integer expression under the bound generics."""
        t = self.type_of(e)
        if not isinstance(t, CtIntType):
            return None
        return self.dim(t.value)

    def dim(self, d: Dim) -> int:
        try:
            return self.env.dim(d)
        except (LinnetError, InternalError) as exc:
            raise Unsupported(f"cannot evaluate `{d}`") from exc

    def extent(self, var: IndexVar) -> int:
        if var.is_pack or not isinstance(var.domain, Dim):
            raise Unsupported(f"index `{var.name}` has no plain extent")
        n = self.dim(var.domain)
        if n <= 0 or n & (n - 1):
            raise Unsupported(f"tile extent {n} is not a power of two")
        return n

    # ------------------------------------------------------------ names

    def resolved(self, node: object) -> object:
        return self.program.resolutions.get(node)

    def local_name(self, local: LocalInfo) -> str:
        """A Python name for a body local, unique across the whole body."""
        found = self._names.get(local)
        if found is None:
            base = local.name.lstrip("_") or "v"
            found = f"{base}_"
            n = 1
            while found in self._taken:
                n += 1
                found = f"{base}_{n}"
            self._taken.add(found)
            self._names[local] = found
        return found

    def is_generic(self, node: object) -> bool:
        return isinstance(self.resolved(node), GenericInfo)


def write_words(body: ast.Body) -> dict[str, str]:
    """The write word each result is targeted with (B13 makes it unique)."""
    words: dict[str, str] = {}

    def walk(stmts: tuple[ast.Stmt, ...]) -> None:
        for s in stmts:
            if isinstance(s, ast.WriteStmt):
                target = s.target
                if isinstance(target, ast.Index) and isinstance(target.target, ast.Name):
                    words.setdefault(target.target.ident.name, s.word)
            elif isinstance(s, (ast.WhileStmt, ast.StaticForStmt)):
                walk(s.body.stmts)

    walk(body.stmts)
    return words


def strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of a contiguous tensor."""
    out: list[int] = []
    step = 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))
