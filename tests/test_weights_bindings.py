"""`bindings.json` (weights_bindings, language.md 12.9): placeholders, precedence, validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linnet.errors import LinnetError
from linnet.weights.bindings import Bindings, load_bindings


def test_placeholders_and_identity() -> None:
    b = Bindings.from_mapping(
        {
            "layers.{i}.attn.q.weight": "model.layers.{i}.self_attn.q_proj.weight",
            "blocks.{i}.experts.{j}.w": "blk.{i}.ffn.{j}.w.{i}",
            "embed.weight": "model.embed_tokens.weight",
        }
    )
    assert b.resolve("layers.11.attn.q.weight") == "model.layers.11.self_attn.q_proj.weight"
    assert b.resolve("blocks.2.experts.7.w") == "blk.2.ffn.7.w.2"
    assert b.resolve("embed.weight") == "model.embed_tokens.weight"
    # Unmatched paths bind the tensor of the same name (12.7: paths are state_dict names).
    assert b.resolve("norm.weight") == "norm.weight"
    # A placeholder only stands for an array position.
    assert b.resolve("layers.x.attn.q.weight") == "layers.x.attn.q.weight"
    assert b.rule_for("layers.0.attn.q.weight") == "layers.{i}.attn.q.weight"
    assert b.rule_for("norm.weight") is None


def test_exact_keys_and_specific_patterns_win() -> None:
    b = Bindings.from_mapping(
        {
            "layers.{i}.w": "generic.{i}",
            "layers.0.w": "first",
            "stack.{i}.sub.{j}.w": "any.{i}.{j}",
            "stack.{i}.sub.0.w": "zero.{i}",
        }
    )
    assert b.resolve("layers.0.w") == "first"
    assert b.resolve("layers.1.w") == "generic.1"
    assert b.resolve("stack.3.sub.0.w") == "zero.3"
    assert b.resolve("stack.3.sub.1.w") == "any.3.1"


def test_tied_weights_bind_two_paths_to_one_name() -> None:
    b = Bindings.from_mapping({"head.weight": "embed.weight"})
    assert b.resolve("head.weight") == b.resolve("embed.weight") == "embed.weight"


def test_validation_lists_every_problem_with_keys() -> None:
    with pytest.raises(LinnetError) as info:
        Bindings.from_mapping(
            {
                "layers.{i}.w": "model.{j}.w",  # placeholders differ
                "a.{i}.{i}": "x.{i}",  # repeated in the key
                "b.w": "",  # empty name
                "c.w{i}": "c.{i}",  # placeholder not a whole segment
                "d.{i}.w": "d.{i}.{oops",  # stray brace
                "e": 3,  # not a string
                "f.{i}.g.0": "p.{i}",  # ambiguous with the next one
                "f.0.g.{j}": "q.{j}",
                "h.{i}": "h1.{i}",  # same pattern twice (different names)
                "h.{k}": "h2.{k}",
            },
            source="my_bindings.json",
        )
    message = str(info.value)
    assert message.startswith("my_bindings.json: invalid bindings")
    for fragment in (
        "`layers.{i}.w`: value `model.{j}.w` must use the same placeholders",
        "`a.{i}.{i}`: placeholder `{i}` appears twice",
        "`b.w`: the tensor name is empty",
        "`c.w{i}`: `w{i}` is not a path segment",
        "`d.{i}.w`: value `d.{i}.{oops` has a brace",
        'key "e": keys and values must be strings',
        "keys `f.{i}.g.0` and `f.0.g.{j}` both match",
        "keys `h.{i}` and `h.{k}` both match",
    ):
        assert fragment in message, fragment


def test_non_overlapping_patterns_are_fine() -> None:
    b = Bindings.from_mapping({"f.{i}.g": "a.{i}", "f.{i}.h": "b.{i}", "f.x.g": "c"})
    assert b.resolve("f.2.h") == "b.2"


def test_load_bindings_file(tmp_path: Path) -> None:
    path = tmp_path / "bindings.json"
    path.write_text(json.dumps({"layers.{i}.w": "m.layers.{i}.weight"}))
    assert load_bindings(path).resolve("layers.4.w") == "m.layers.4.weight"
    path.write_text('{"a": "x", "a": "y"}')
    with pytest.raises(LinnetError, match=r"bindings\.json: key `a` appears twice"):
        load_bindings(path)
    path.write_text('["a"]')
    with pytest.raises(LinnetError, match=r"bindings\.json: the bindings must be a JSON object"):
        load_bindings(path)
    path.write_text('{"a": ')
    with pytest.raises(LinnetError, match=r"bindings\.json: invalid JSON"):
        load_bindings(path)
    path.write_text(json.dumps({"layers.{i}.w": "m.w"}))
    with pytest.raises(LinnetError, match=r"(?s)bindings\.json.*`layers\.\{i\}\.w`"):
        load_bindings(path)
    with pytest.raises(LinnetError, match="cannot read"):
        load_bindings(tmp_path / "absent.json")
