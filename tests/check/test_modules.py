"""Module loading: the file mapping of 4.3, packages and linnet.toml (4.5), cycles (4.6)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from linnet.check import modules
from linnet.check.modules import (
    ModuleGraph,
    default_std_root,
    find_sources,
    load_program,
    load_source,
)
from linnet.diagnostics import Diagnostic
from linnet.errors import LinnetError

GOOD_MANIFEST = '[package]\nname = "{name}"\nversion = "0.1.0"\nlanguage = "0.1"\n'


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def module(name: str, *uses: str) -> str:
    return f"module {name}\n\n" + "".join(f"use {u}\n" for u in uses)


def package(root: Path, name: str, extra: str = "") -> Path:
    write(root / "linnet.toml", GOOD_MANIFEST.format(name=name) + extra)
    return root


@pytest.fixture
def std(tmp_path: Path) -> Path:
    root = tmp_path / "std"
    write(root / "nn" / "linear.linnet", module("std.nn.linear"))
    write(root / "random.linnet", module("std.random"))
    write(root / "nn" / "norm.linnet", module("std.nn.norm", "std.nn.linear::{linear}"))
    return root


@pytest.fixture(autouse=True)
def inside(tmp_path: Path) -> Iterator[None]:
    """Run each test from its temporary directory, so paths display relative to it."""
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield
    finally:
        os.chdir(before)


def codes(graph: ModuleGraph) -> list[str]:
    return [d.code for d in graph.diagnostics]


def only(graph: ModuleGraph, code: str) -> Diagnostic:
    found = [d for d in graph.diagnostics if d.code == code]
    assert len(found) == 1, graph.diagnostics
    return found[0]


def key(path: Path) -> str:
    return str(path.resolve())


# -- std -------------------------------------------------------------------------------


def test_std_imports_map_to_files_under_the_std_root(tmp_path: Path, std: Path) -> None:
    main = write(tmp_path / "main.linnet", module("main", "std.nn.norm::{rms_norm}", "std.random"))
    graph = load_program([main], std)
    assert codes(graph) == []
    assert graph.roots == [key(main)]
    assert set(graph.modules) == {
        key(main),
        key(std / "nn" / "norm.linnet"),
        key(std / "nn" / "linear.linnet"),
        key(std / "random.linnet"),
    }
    root = graph.modules[key(main)]
    assert not root.is_std and root.name == "main"
    assert list(root.imports.values()) == [
        key(std / "nn" / "norm.linnet"),
        key(std / "random.linnet"),
    ]
    norm = graph.modules[key(std / "nn" / "norm.linnet")]
    assert norm.is_std and norm.name == "std.nn.norm"
    assert norm.source.path == str(Path("std") / "nn" / "norm.linnet")  # relative to the cwd


def test_std_needs_a_module_after_it(tmp_path: Path, std: Path) -> None:
    main = write(tmp_path / "main.linnet", module("main", "std::{x}"))
    graph = load_program([main], std)
    diagnostic = only(graph, "E1202")
    assert diagnostic.span is not None and diagnostic.span.text == "std"
    assert graph.modules[key(main)].imports == {
        use: None for use in graph.modules[key(main)].file.uses
    }


def test_missing_std_module_is_e1202_at_the_use_path(tmp_path: Path, std: Path) -> None:
    main = write(tmp_path / "main.linnet", module("main", "std.nn.nope::{x}"))
    graph = load_program([main], std)
    diagnostic = only(graph, "E1202")
    assert diagnostic.span is not None and diagnostic.span.text == "std.nn.nope"
    assert "std.nn.nope" in diagnostic.message
    assert any("nope.linnet" in note for note in diagnostic.notes)


def test_a_missing_std_root_is_named(tmp_path: Path) -> None:
    main = write(tmp_path / "main.linnet", module("main", "std.random"))
    graph = load_program([main], tmp_path / "no-std")
    assert "no-std" in only(graph, "E1202").notes[0]


def test_std_modules_import_only_std(tmp_path: Path, std: Path) -> None:
    write(std / "bad.linnet", module("std.bad", "crate.x"))
    main = write(tmp_path / "main.linnet", module("main", "std.bad"))
    diagnostic = only(load_program([main], std), "E1202")
    assert "standard-library" in diagnostic.notes[0]


# -- crate and packages ----------------------------------------------------------------


def test_crate_paths_map_into_the_nearest_package(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "speech_tools", "speech_tools")
    lib = write(pkg / "src" / "lib.linnet", module("speech_tools", "crate.blocks.gate::{Gate}"))
    gate = write(
        pkg / "src" / "blocks" / "gate.linnet", module("speech_tools.blocks.gate", "crate")
    )
    graph = load_program([lib], std)
    # `crate` alone is lib.linnet, so gate -> lib closes a cycle.
    assert codes(graph) == ["E1206"]
    assert graph.modules[key(lib)].imports[graph.modules[key(lib)].file.uses[0]] == key(gate)


def test_a_file_outside_any_package_imports_only_std(tmp_path: Path, std: Path) -> None:
    main = write(tmp_path / "loose.linnet", module("loose", "crate.helpers::{h}"))
    diagnostic = only(load_program([main], std), "E1202")
    assert diagnostic.span is not None and diagnostic.span.text == "crate.helpers"
    assert "no package" in diagnostic.notes[0]


def test_missing_crate_module(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "p", "p")
    lib = write(pkg / "src" / "lib.linnet", module("p", "crate.a.b::{x}"))
    diagnostic = only(load_program([lib], std), "E1202")
    assert diagnostic.label == "no such file"
    assert str(Path("p") / "src" / "a" / "b.linnet") in diagnostic.notes[0]


def test_dependencies_resolve_relative_to_their_own_manifest(tmp_path: Path, std: Path) -> None:
    app = package(tmp_path / "app", "app", '\n[dependencies]\naudio = { path = "../libs/audio" }\n')
    audio = package(
        tmp_path / "libs" / "audio", "audio", '[dependencies]\ndsp = { path = "dsp" }\n'
    )
    dsp = package(audio / "dsp", "dsp")
    lib = write(app / "src" / "lib.linnet", module("app", "audio::{a}", "audio.filters::{f}"))
    audio_lib = write(audio / "src" / "lib.linnet", module("audio", "crate.filters::{f}"))
    filters = write(
        audio / "src" / "filters.linnet", module("audio.filters", "dsp.fft", "std.random")
    )
    fft = write(dsp / "src" / "fft.linnet", module("dsp.fft"))
    graph = load_program([lib], std)
    assert codes(graph) == []
    assert set(graph.modules) == {
        key(lib), key(audio_lib), key(filters), key(fft), key(std / "random.linnet"),
    }  # fmt: skip
    assert not any(m.is_std for k, m in graph.modules.items() if k != key(std / "random.linnet"))


def test_an_unknown_dependency_head_is_e1202(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "p", "p", "[dependencies]\n")
    lib = write(pkg / "src" / "lib.linnet", module("p", "audio.x::{y}"))
    diagnostic = only(load_program([lib], std), "E1202")
    assert "`audio` is not `crate`, `std` or a dependency" in diagnostic.notes[0]
    assert diagnostic.help


def test_a_dependency_of_another_package_is_not_visible(tmp_path: Path, std: Path) -> None:
    app = package(tmp_path / "app", "app", '[dependencies]\na = { path = "../a" }\n')
    a = package(tmp_path / "a", "a", '[dependencies]\nb = { path = "../b" }\n')
    package(tmp_path / "b", "b")
    write(tmp_path / "b" / "src" / "lib.linnet", module("b"))
    write(a / "src" / "lib.linnet", module("a", "b"))
    lib = write(app / "src" / "lib.linnet", module("app", "a", "b"))
    graph = load_program([lib], std)
    assert codes(graph) == ["E1202"]  # only app's own `use b`


# -- cycles ----------------------------------------------------------------------------


def test_e1206_is_on_the_import_that_closes_the_cycle(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "p", "p")
    lib = write(pkg / "src" / "lib.linnet", module("p", "crate.a::{x}"))
    write(pkg / "src" / "a.linnet", module("p.a", "crate.b::{y}"))
    b = write(pkg / "src" / "b.linnet", module("p.b", "std.random", "crate.a::{z}"))
    diagnostic = only(load_program([lib], std), "E1206")
    assert diagnostic.span is not None
    assert diagnostic.span.file.path == str(Path("p") / "src" / "b.linnet")
    assert diagnostic.span.text == "crate.a"
    assert diagnostic.span.file.line_col(diagnostic.span.start) == (4, 5)
    assert "put the shared declarations in a third module" in diagnostic.notes
    assert "`p.a` -> `p.b` -> `p.a`" in diagnostic.notes[0]
    assert b.exists()


def test_a_module_importing_itself(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "p", "p")
    lib = write(pkg / "src" / "lib.linnet", module("p", "crate::{x}"))
    diagnostic = only(load_program([lib], std), "E1206")
    assert "imports itself" in diagnostic.message


def test_diamonds_are_not_cycles_and_each_file_is_parsed_once(
    tmp_path: Path, std: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from linnet.syntax import parser

    parsed: list[str] = []
    real_parse = parser.parse

    def counting_parse(source):  # type: ignore[no-untyped-def]
        parsed.append(source.path)
        return real_parse(source)

    monkeypatch.setattr(parser, "parse", counting_parse)
    pkg = package(tmp_path / "p", "p")
    lib = write(pkg / "src" / "lib.linnet", module("p", "crate.a", "crate.b"))
    write(pkg / "src" / "a.linnet", module("p.a", "crate.c", "std.random"))
    write(pkg / "src" / "b.linnet", module("p.b", "crate.c", "std.random"))
    write(pkg / "src" / "c.linnet", module("p.c", "std.random"))
    graph = load_program([lib, pkg / "src" / "c.linnet"], std)
    assert codes(graph) == []
    assert len(graph.modules) == 5
    assert sorted(parsed) == sorted(set(parsed)) and len(parsed) == 5
    assert graph.roots == sorted([key(lib), key(pkg / "src" / "c.linnet")])


def test_a_long_import_chain_does_not_exhaust_the_stack(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "p", "p")
    count = 1500
    write(pkg / "src" / "lib.linnet", module("p", "crate.m0"))
    for i in range(count):
        uses = (f"crate.m{i + 1}",) if i + 1 < count else ("crate",)
        write(pkg / "src" / f"m{i}.linnet", module(f"p.m{i}", *uses))
    graph = load_program([pkg / "src" / "lib.linnet"], std)
    assert codes(graph) == ["E1206"]
    assert len(graph.modules) == count + 1


# -- syntax errors in loaded files -----------------------------------------------------


def test_syntax_errors_of_imported_modules_are_reported(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "p", "p")
    lib = write(pkg / "src" / "lib.linnet", module("p", "crate.broken::{x}"))
    write(pkg / "src" / "broken.linnet", "this is not linnet\n")
    graph = load_program([lib], std)
    assert graph.has_errors
    assert all(d.code.startswith("E1") for d in graph.diagnostics)
    assert any(
        d.span is not None and d.span.file.path.endswith("broken.linnet") for d in graph.diagnostics
    )


# -- linnet.toml (4.5) -----------------------------------------------------------------


def manifest_errors(tmp_path: Path, std: Path, manifest: str) -> list[str]:
    pkg = tmp_path / "p"
    write(pkg / "linnet.toml", manifest)
    lib = write(pkg / "src" / "lib.linnet", module("p", "crate.a"))
    write(pkg / "src" / "a.linnet", module("p.a"))
    graph = load_program([lib], std)
    found = [d for d in graph.diagnostics if d.code == "E5001"]
    assert all(d.span is None for d in found)
    assert all(d.message.startswith(str(Path("p") / "linnet.toml") + ": ") for d in found)
    return [d.message.split(": ", 1)[1] for d in found]


BASE = '[package]\nname = "p"\nversion = "0.1.0"\nlanguage = "0.1"\n'


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        ('[package\nname = "p"\n', "not valid TOML"),
        ('[package]\nname = "p"\nversion = "0.1.0"\nlanguage = "0.1"\nname = "q"\n', "line 5"),
        ('[tool]\nx = 1\n', "missing the [package] table"),
        ('package = "p"\n', "`package` must be a table"),
        ('[package]\nversion = "0.1.0"\nlanguage = "0.1"\n', "[package] is missing `name`"),
        ('[package]\nname = 3\nversion = "0.1.0"\nlanguage = "0.1"\n', "`name` must be a string"),
        ('[package]\nname = ""\nversion = "0.1.0"\nlanguage = "0.1"\n', "`name` must not be empty"),
        ('[package]\nname = "p"\nlanguage = "0.1"\n', "[package] is missing `version`"),
        ('[package]\nname = "p"\nversion = 1\nlanguage = "0.1"\n', "`version` must be a string"),
        ('[package]\nname = "p"\nversion = "0.1.0"\n', "[package] is missing `language`"),
        ('[package]\nname = "p"\nversion = "0.1.0"\nlanguage = "0.2"\n', 'unsupported language version "0.2"'),
        ('dependencies = "x"\n' + BASE, "`dependencies` must be a table"),
        (BASE + '[dependencies]\n"my-dep" = { path = "d" }\n', "`my-dep` is not an identifier"),
        (BASE + '[dependencies]\nstd = { path = "d" }\n', "`std` cannot name a dependency"),
        (BASE + '[dependencies]\ncrate = { path = "d" }\n', "`crate` cannot name a dependency"),
        (BASE + '[dependencies]\nd = "1.0"\n', "other sources are not supported yet"),
        (BASE + '[dependencies]\nd = { git = "https://x" }\n', "other sources are not supported yet"),
        (BASE + '[dependencies]\nd = { path = "d", version = "1" }\n', "other sources are not supported yet"),
        (BASE + '[dependencies]\nd = { path = 3 }\n', "`path` must be a non-empty string"),
        (BASE + '[dependencies]\nd = { path = "missing" }\n', "is not a directory with its own linnet.toml"),
    ],
)  # fmt: skip
def test_each_manifest_rule_is_e5001(
    tmp_path: Path, std: Path, manifest: str, problem: str
) -> None:
    problems = manifest_errors(tmp_path, std, manifest)
    assert len(problems) == 1, problems
    assert problem in problems[0]


def test_absolute_dependency_paths_are_rejected(tmp_path: Path, std: Path) -> None:
    other = package(tmp_path / "other", "other")
    problems = manifest_errors(
        tmp_path, std, BASE + f"[dependencies]\nd = {{ path = {str(other)!r} }}\n".replace("'", '"')
    )
    assert problems == ["dependency `d`: `path` must be relative to the manifest's directory"]


def test_a_valid_manifest_and_all_problems_at_once(tmp_path: Path, std: Path) -> None:
    assert manifest_errors(tmp_path, std, BASE + "[dependencies]\n") == []
    many = manifest_errors(tmp_path, std, '[package]\nname = ""\nlanguage = "9"\n')
    assert len(many) == 3


def test_the_manifest_is_read_only_when_an_import_resolves_through_the_package(
    tmp_path: Path, std: Path
) -> None:
    pkg = tmp_path / "p"
    write(pkg / "linnet.toml", "not toml at all [")
    lib = write(pkg / "src" / "lib.linnet", module("p", "std.random"))
    assert codes(load_program([lib], std)) == []
    write(lib, module("p", "crate.a", "crate.b"))
    write(pkg / "src" / "a.linnet", module("p.a", "crate.b"))
    write(pkg / "src" / "b.linnet", module("p.b"))
    assert codes(load_program([lib], std)) == ["E5001"]  # validated once, reported once


def test_an_invalid_manifest_does_not_add_e1202_for_its_dependencies(
    tmp_path: Path, std: Path
) -> None:
    pkg = tmp_path / "p"
    write(pkg / "linnet.toml", BASE + '[dependencies]\naudio = { git = "x" }\n')
    lib = write(pkg / "src" / "lib.linnet", module("p", "audio.x"))
    assert codes(load_program([lib], std)) == ["E5001"]


# -- files, roots, in-memory sources ---------------------------------------------------


def test_find_sources_skips_hidden_and_build_directories(tmp_path: Path) -> None:
    for name in ["b.linnet", "a.linnet", "sub/c.linnet", ".git/x.linnet", "build/y.linnet",
                 "sub/.cache/z.linnet", "notes.txt"]:  # fmt: skip
        write(tmp_path / "tree" / name, "module x\n")
    found = find_sources([Path("tree")])
    assert found == [Path("tree/a.linnet"), Path("tree/b.linnet"), Path("tree/sub/c.linnet")]


def test_find_sources_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(LinnetError, match=r"no \.linnet files"):
        find_sources([Path("empty")])
    with pytest.raises(LinnetError, match="no such file"):
        find_sources([Path("missing.linnet")])


def test_roots_are_shown_as_named(tmp_path: Path, std: Path) -> None:
    write(tmp_path / "d" / "x.linnet", module("x"))
    graph = load_program([Path("d")], std)
    assert [m.source.path for m in graph.modules.values()] == [str(Path("d") / "x.linnet")]


def test_relative_to_controls_displayed_paths(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "cases" / "fixtures" / "p", "p")
    lib = write(pkg / "src" / "lib.linnet", module("p", "crate.a::{x}"))
    graph = load_program([lib.resolve()], std, relative_to=tmp_path / "cases")
    diagnostic = only(graph, "E1202")
    assert diagnostic.span is not None
    assert diagnostic.span.file.path == str(Path("fixtures/p/src/lib.linnet"))


def test_load_source_places_text_in_its_package(tmp_path: Path, std: Path) -> None:
    pkg = package(tmp_path / "p", "p")
    write(pkg / "src" / "a.linnet", module("p.a"))
    graph = load_source(module("p", "crate.a"), str(pkg / "src" / "lib.linnet"), std)
    assert codes(graph) == [] and len(graph.modules) == 2
    loose = load_source(module("m", "crate.a"), "<input>", std)
    assert codes(loose) == ["E1202"] and loose.roots == ["<input>"]


def test_an_unreadable_root_is_a_linnet_error(tmp_path: Path, std: Path) -> None:
    folder = tmp_path / "dir.linnet"
    folder.mkdir()
    with pytest.raises(LinnetError):
        modules._read(folder, "dir.linnet")


def test_default_std_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LINNET_STD", str(tmp_path))
    assert default_std_root() == tmp_path
    monkeypatch.delenv("LINNET_STD")
    shipped = default_std_root()
    repo_stdlib = Path(modules.__file__).resolve().parents[3] / "stdlib"
    if repo_stdlib.is_dir():  # a source checkout
        assert shipped == repo_stdlib
    else:  # an installed wheel
        assert shipped.name == "_stdlib"
