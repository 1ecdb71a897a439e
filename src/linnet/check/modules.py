"""Module loading: from the files a user names to a graph of parsed modules (section 4).

Stage: after parsing, before name resolution. In: root paths (files, or
directories searched for `*.linnet`) and the standard-library root. Out: a
`ModuleGraph` holding every module reachable through `use`, each parsed once and
keyed by its resolved absolute path, the target of each import, and the
diagnostics of lexing, parsing and loading (E1xxx syntax, E1202, E1206, E5001).

Import resolution follows the file mapping of 4.3, which is authoritative: the
first segment of a `use` path selects the root (`std` -> the std root, `crate`
-> the nearest package's `src/`, a dependency key -> that dependency's `src/`),
and the path maps to exactly one file. A file outside any package, and every
standard-library module, imports only `std`. A package's `linnet.toml` is
validated (4.5) the first time an import resolves through it.

Semantic checking runs only when the graph has no errors (1.3).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from linnet.check.package import MANIFEST_NAME, Package, read_package
from linnet.diagnostics import Diagnostic, error, sort_key
from linnet.errors import LinnetError
from linnet.records import field, record
from linnet.source import SourceFile, Span
from linnet.syntax import ast

SOURCE_SUFFIX = ".linnet"
STD_ENV = "LINNET_STD"


@record
class LoadedModule:
    """One parsed module. `imports` maps each `use` to its target's key, None if unresolved."""

    key: str
    name: str
    source: SourceFile
    file: ast.File
    imports: dict[ast.UseDecl, str | None]
    is_std: bool


@record
class ModuleGraph:
    """Every reachable module, the roots the user named, and the loading diagnostics."""

    modules: dict[str, LoadedModule]
    roots: list[str]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    std_root: Path | None = None  # where `std` imports resolve (did-you-mean searches it)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)


def default_std_root() -> Path:
    """The std root when none is given: `LINNET_STD`, else the standard library we ship.

    An installed wheel carries it as `linnet/_stdlib` (pyproject force-includes
    `stdlib/` there); a source checkout has it at the repository's `stdlib/`.
    """
    env = os.environ.get(STD_ENV)
    if env:
        return Path(env)
    package_dir = Path(__file__).resolve().parents[1]
    shipped = package_dir / "_stdlib"
    if shipped.is_dir():
        return shipped
    checkout = package_dir.parents[1] / "stdlib"
    return checkout if checkout.is_dir() else shipped


def find_sources(paths: Sequence[Path]) -> list[Path]:
    """The files to check (18.2): files as named, directories searched recursively.

    Inside a directory, subdirectories whose name starts with `.` or is `build`
    are skipped and the `*.linnet` files are taken in sorted order. A path that
    does not exist, or a directory without any source, is a `LinnetError`.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            files = sorted(_walk_sources(path), key=lambda p: p.parts)
            if not files:
                raise LinnetError(f"no {SOURCE_SUFFIX} files in `{path}`")
            found.extend(files)
        elif path.exists():
            found.append(path)
        else:
            raise LinnetError(f"cannot read `{path}`: no such file or directory")
    return found


def _walk_sources(top: Path) -> Iterator[Path]:
    for directory, subdirs, files in os.walk(top):
        subdirs[:] = [d for d in subdirs if not d.startswith(".") and d != "build"]
        base = Path(directory)
        for name in files:
            if name.endswith(SOURCE_SUFFIX):
                yield base / name


def load_program(
    paths: Sequence[Path],
    std_root: Path | None = None,
    *,
    relative_to: Path | None = None,
) -> ModuleGraph:
    """Load the named files (or directories) and everything they import.

    Files are shown in diagnostics as named; imported ones relative to
    `relative_to` (default: the working directory) when inside it, else
    absolute. A file that exists but cannot be read (named or imported) is a
    `LinnetError`: a file-system problem, not a diagnostic of the source.
    """
    loader = _Loader(std_root, relative_to)
    for path in find_sources(paths):
        loader.add_root_file(path)
    return loader.run()


def load_source(text: str, path: str = "<input>", std_root: Path | None = None) -> ModuleGraph:
    """Load an in-memory root module (tests, editors) and everything it imports.

    A `path` such as `pkg/src/lib.linnet` places the text in that package, so
    `crate` imports resolve; a pseudo path like `<input>` is outside any package.
    """
    loader = _Loader(std_root, None)
    loader.add_root_source(SourceFile(path, text))
    return loader.run()


class _Loader:
    """Reads, parses and links modules; one instance per `load_*` call."""

    def __init__(self, std_root: Path | None, relative_to: Path | None) -> None:
        root = std_root if std_root is not None else default_std_root()
        self.std_root = Path(os.path.abspath(root)).resolve()
        self.relative_to = relative_to.resolve() if relative_to is not None else None
        self.cwd = Path.cwd()
        self.modules: dict[str, LoadedModule] = {}
        self.failed: set[str] = set()  # keys of files that did not parse into a tree
        self.sources: dict[str, SourceFile] = {}  # roots read ahead of parsing
        self.roots: list[str] = []
        self.diagnostics: list[Diagnostic] = []
        self.package_dirs: dict[Path, Path | None] = {}  # directory -> its package root
        self.packages: dict[Path, Package] = {}

    # -- roots ---------------------------------------------------------------------

    def add_root_file(self, path: Path) -> None:
        key = _key_of(path)
        if key in self.sources:
            return
        shown = self._shown_under(Path(key)) if self.relative_to is not None else None
        self.sources[key] = _read(path, shown or str(path))
        self.roots.append(key)

    def add_root_source(self, source: SourceFile) -> None:
        key = source.path if _is_pseudo(source.path) else _key_of(Path(source.path))
        self.sources[key] = source
        self.roots.append(key)

    # -- traversal -----------------------------------------------------------------

    def run(self) -> ModuleGraph:
        """Depth-first over the imports, reporting the import that closes each cycle (4.6)."""
        self.roots.sort()
        state: dict[str, int] = {}  # 1: on the current path, 2: finished
        for root in self.roots:
            if root in state:
                continue
            self._visit(root, state)
        self.diagnostics.sort(key=sort_key)
        return ModuleGraph(self.modules, self.roots, self.diagnostics, self.std_root)

    def _visit(self, root: str, state: dict[str, int]) -> None:
        # Iterative: a long chain of imports must not exhaust Python's stack.
        module = self._load(root)
        state[root] = 2 if module is None else 1
        if module is None:
            return
        path: list[LoadedModule] = [module]
        position = {root: 0}
        pending: list[Iterator[ast.UseDecl]] = [iter(module.file.uses)]
        while pending:
            use = next(pending[-1], None)
            current = path[-1]
            if use is None:
                state[current.key] = 2
                del position[current.key]
                path.pop()
                pending.pop()
                continue
            target = current.imports[use]
            if target is None:
                continue
            status = state.get(target)
            if status == 1:
                cycle = [m.name for m in path[position[target] :]] + [self.modules[target].name]
                self.diagnostics.append(_cycle_error(current.source, use, cycle))
                continue
            if status is None:
                loaded = self._load(target)
                if loaded is None:
                    state[target] = 2
                else:
                    state[target] = 1
                    position[target] = len(path)
                    path.append(loaded)
                    pending.append(iter(loaded.file.uses))
            if target in self.failed:
                current.imports[use] = None

    def _load(self, key: str) -> LoadedModule | None:
        """Parse the file of `key` (once) and resolve its imports."""
        from linnet.syntax.parser import parse  # NOTE: lazy, keeps `import linnet` light

        source = self.sources.pop(key, None)
        if source is None:
            source = _read(Path(key), self._shown(Path(key)))
        tree, diagnostics = parse(source)
        self.diagnostics.extend(diagnostics)
        if tree is None:
            self.failed.add(key)
            return None
        is_std = not _is_pseudo(key) and Path(key).is_relative_to(self.std_root)
        imports = {use: self._resolve(key, source, use, is_std) for use in tree.uses}
        module = LoadedModule(key, tree.module_name, source, tree, imports, is_std)
        self.modules[key] = module
        return module

    # -- resolution (4.3) ----------------------------------------------------------

    def _resolve(self, key: str, source: SourceFile, use: ast.UseDecl, is_std: bool) -> str | None:
        if not use.path:  # nothing to resolve; the parser has reported the `use`
            return None
        segments = [ident.name for ident in use.path]
        span = Span(source, use.path[0].span.start, use.path[-1].span.end)
        dotted = ".".join(segments)
        head = segments[0]
        if head == "std":
            return self._resolve_std(segments, span, dotted)
        if is_std:
            return self._unknown(
                span, dotted, "a standard-library module can import only `std` modules"
            )
        package = None if _is_pseudo(key) else self._package_of(Path(key).parent)
        if package is None:
            return self._unknown(
                span,
                dotted,
                f"`{source.path}` is in no package (no {MANIFEST_NAME} in its directory or "
                "above), so it can import only `std` modules",
            )
        if head == "crate":
            return self._existing(package.source_dir, segments[1:], span, dotted)
        target_root = package.dependencies.get(head)
        if target_root is None:
            if not package.valid:
                return None  # E5001 already explains why the dependency is unknown
            return self._unknown(
                span,
                dotted,
                f"`{head}` is not `crate`, `std` or a dependency in "
                f"`{self._shown(package.manifest)}`",
                help_text=f'add `{head} = {{ path = "..." }}` under [dependencies]',
            )
        dependency = self._package_at(target_root)
        return self._existing(dependency.source_dir, segments[1:], span, dotted)

    def _resolve_std(self, segments: list[str], span: Span, dotted: str) -> str | None:
        if len(segments) == 1:
            return self._unknown(span, dotted, "name a module after `std`, e.g. `std.nn.linear`")
        if not self.std_root.is_dir():
            return self._unknown(
                span,
                dotted,
                f"the standard library directory `{self.std_root}` does not exist",
                help_text=f"point `--std` or {STD_ENV} at the standard library",
            )
        return self._existing(self.std_root, segments[1:], span, dotted)

    def _existing(self, base: Path, rest: list[str], span: Span, dotted: str) -> str | None:
        """The key of `base/a/b.linnet` (or `base/lib.linnet` for a bare root), if it exists."""
        if rest:
            file = base.joinpath(*rest[:-1], rest[-1] + SOURCE_SUFFIX)
        else:
            file = base / ("lib" + SOURCE_SUFFIX)
        if not file.is_file():
            return self._unknown(
                span,
                dotted,
                f"no file `{self._shown(file)}`",
                label="no such file",
                help_text=_module_suggestion(base, dotted.split(".")[0], rest),
            )
        return _key_of(file)

    def _unknown(
        self,
        span: Span,
        dotted: str,
        note: str,
        *,
        label: str = "",
        help_text: str = "",
    ) -> str | None:
        """Report E1202 at the `use` path; returns None, the key of an unresolved import."""
        self.diagnostics.append(
            error(
                "E1202",
                f"unknown module `{dotted}`",
                span,
                label,
                notes=(note,),
                help=(help_text,) if help_text else (),
            )
        )
        return None

    # -- packages (4.5) ------------------------------------------------------------

    def _package_of(self, directory: Path) -> Package | None:
        """The nearest package at or above `directory`, validated on first use."""
        walked: list[Path] = []
        found: Path | None = None
        probe: Path | None = directory
        while probe is not None:
            if probe in self.package_dirs:
                found = self.package_dirs[probe]
                break
            walked.append(probe)
            if (probe / MANIFEST_NAME).is_file():
                found = probe
                break
            probe = probe.parent if probe.parent != probe else None
        for visited in walked:
            self.package_dirs[visited] = found
        return None if found is None else self._package_at(found)

    def _package_at(self, root: Path) -> Package:
        package = self.packages.get(root)
        if package is None:
            package, diagnostics = read_package(root, self._shown)
            self.packages[root] = package
            self.diagnostics.extend(diagnostics)
        return package

    # -- display paths -------------------------------------------------------------

    def _shown_under(self, path: Path) -> str | None:
        if self.relative_to is not None and path.is_relative_to(self.relative_to):
            return str(path.relative_to(self.relative_to))
        return None

    def _shown(self, path: Path) -> str:
        """How diagnostics name a file the user did not name: short when possible."""
        under = self._shown_under(path)
        if under is not None:
            return under
        if path.is_relative_to(self.cwd):
            return str(path.relative_to(self.cwd))
        return str(path)


def _module_suggestion(base: Path, head: str, rest: list[str]) -> str:
    """`did you mean `std.nn.norm`?` for `std.nn.norms`: the closest module under `base`."""
    from linnet.spelling import closest

    if not base.is_dir():
        return ""
    modules = {
        ".".join(path.relative_to(base).with_suffix("").parts): path
        for path in sorted(base.rglob("*" + SOURCE_SUFFIX))
    }
    wanted = ".".join(rest)
    found = closest(wanted, modules)
    if found is None:
        # The right name in the wrong folder: `std.norm` for `std.nn.norm`.
        same = [m for m in modules if rest and m.split(".")[-1] == rest[-1]]
        found = same[0] if len(same) == 1 else None
    return f"did you mean `{head}.{found}`?" if found is not None else ""


def _key_of(path: Path) -> str:
    return str(Path(os.path.abspath(path)).resolve())


def _is_pseudo(path: str) -> bool:
    """`<input>`, `<stdin>`: in-memory text that belongs to no directory."""
    return path.startswith("<")


def _read(path: Path, shown: str) -> SourceFile:
    try:
        return SourceFile.from_bytes(shown, path.read_bytes())
    except OSError as exc:
        raise LinnetError(f"cannot read `{path}`: {exc.strerror or exc}") from None


def _cycle_error(source: SourceFile, use: ast.UseDecl, cycle: list[str]) -> Diagnostic:
    """E1206 on the import that closes the cycle; `cycle` runs from the target back to it."""
    span = Span(source, use.path[0].span.start, use.path[-1].span.end)
    importer, target = cycle[-2], cycle[-1]
    if len(cycle) == 2:
        message = f"import cycle: module `{importer}` imports itself"
    else:
        message = f"import cycle: `{importer}` imports `{target}`, which leads back to `{importer}`"
    return error(
        "E1206",
        message,
        span,
        "this import closes the cycle",
        notes=(
            "the cycle: " + " -> ".join(f"`{name}`" for name in cycle),
            "put the shared declarations in a third module",
        ),
    )
