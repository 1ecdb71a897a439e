"""`linnet.card`: reading and writing `nest.toml`, and filling a loader's arguments from a card."""

from __future__ import annotations

from pathlib import Path

import pytest

from linnet.card import is_card, loader_arguments, read_card, write_card
from linnet.errors import LinnetError


def test_a_written_card_reads_back_with_absolute_paths(tmp_path: Path) -> None:
    write_card(
        tmp_path,
        {"name": 'a "quoted" name', "source": "src/lib.linnet", "root": "Root", "entry": None,
         "weights": "../weights", "bindings": None, "tokenizer": None},
        {"H": 8, "T": "bf16"},
    )  # fmt: skip
    card = read_card(tmp_path)
    assert card.name == 'a "quoted" name'
    assert card.source == (tmp_path / "src" / "lib.linnet").resolve()
    assert card.weights == (tmp_path.parent / "weights").resolve()
    assert card.generics == {"H": 8, "T": "bf16"}
    assert card.entry is None and card.bindings is None
    assert is_card(tmp_path) and is_card(str(tmp_path))
    assert not is_card(tmp_path / "src") and not is_card("module x\npub fn f() {}\n")


def test_bad_cards_name_every_problem(tmp_path: Path) -> None:
    (tmp_path / "nest.toml").write_text('colour = "red"\nroot = 3\n[generics]\nH = 1.5\n')
    with pytest.raises(LinnetError) as caught:
        read_card(tmp_path)
    message = str(caught.value)
    assert "unknown key `colour`" in message
    assert "`root` must be a string" in message
    assert "`source` is missing" in message
    assert "`[generics]` must map names to integers or dtype names" in message
    (tmp_path / "nest.toml").write_text("source = \n")
    with pytest.raises(LinnetError, match="not a valid card"):
        read_card(tmp_path)


def test_loader_arguments_fill_what_the_caller_left_out(tmp_path: Path) -> None:
    write_card(
        tmp_path,
        {"source": "lib.linnet", "root": "Root", "weights": "w.safetensors",
         "bindings": "bindings.json"},
        {"H": 8, "Batch": 1},
    )  # fmt: skip
    source, generics, weights, root, bindings = loader_arguments(
        tmp_path, {"Batch": 4}, None, None, None
    )
    assert source == (tmp_path / "lib.linnet").resolve()
    assert generics == {"H": 8, "Batch": 4}
    assert weights == (tmp_path / "w.safetensors").resolve() and root == "Root"
    assert bindings == (tmp_path / "bindings.json").resolve()
    _, _, weights, _, bindings = loader_arguments(tmp_path, None, {"x": 1}, None, None)
    assert weights == {"x": 1} and bindings is None  # the card's bindings go with its weights
    assert loader_arguments("src.linnet", None, None, None, None)[0] == "src.linnet"


def test_a_card_may_list_several_weight_sources(tmp_path: Path) -> None:
    write_card(
        tmp_path,
        {"source": "lib.linnet", "weights": ["../folder", "rope_factors.safetensors"]},
        {"H": 8},
    )
    card = read_card(tmp_path)
    assert card.weights == (
        (tmp_path.parent / "folder").resolve(),
        (tmp_path / "rope_factors.safetensors").resolve(),
    )
    (tmp_path / "nest.toml").write_text('source = "lib.linnet"\nweights = ["a", 3]\n')
    with pytest.raises(LinnetError, match="`weights` must be a string or a list of strings"):
        read_card(tmp_path)
