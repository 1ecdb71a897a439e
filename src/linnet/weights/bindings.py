"""`bindings.json`: which stored tensor each Linnet parameter path reads (language.md 12.9).

Stage: weights, before anything is loaded. In: a JSON object (a file or a
mapping) from canonical Linnet paths to checkpoint tensor names. Out: a
`Bindings` that resolves any path to the checkpoint name it binds.

    {"layers.{i}.attn.q.weight": "model.layers.{i}.self_attn.q_proj.weight",
     "head.weight": "model.embed_tokens.weight"}

Rules (12.9: "it only selects sources and renames keys"):
- a key is a Linnet path; a `{name}` placeholder stands for a whole path
  segment that is an array position (digits), each placeholder at most once;
- the value is a checkpoint name using exactly the key's placeholders (in any
  place, any number of times); braces mean nothing else;
- an exact key (no placeholder) wins over patterns; among patterns the most
  specific one that matches wins, and two patterns that can match the same
  path without one being more specific are rejected when the file is read;
- a path no key matches binds the stored tensor of the same name, since
  canonical paths are `state_dict` names (12.7);
- tied weights are two paths bound to one stored name.
No expressions, transforms or callbacks exist; a tensor that needs
transposing is transposed in Linnet.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from linnet.errors import LinnetError
from linnet.records import record

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_POSITION = re.compile(r"[0-9]+")


@record(frozen=True)
class _Pattern:
    """A key with placeholders: per segment a literal, or None for a placeholder."""

    key: str
    segments: tuple[str | None, ...]
    names: tuple[str | None, ...]  # placeholder name per segment, None for literals
    template: str

    def match(self, path: tuple[str, ...]) -> dict[str, str] | None:
        if len(path) != len(self.segments):
            return None
        found: dict[str, str] = {}
        for part, literal, name in zip(path, self.segments, self.names, strict=True):
            if literal is None and name is not None:
                if not _POSITION.fullmatch(part):
                    return None
                found[name] = part
            elif part != literal:
                return None
        return found

    def overlaps(self, other: _Pattern) -> bool:
        """Whether some path matches both patterns."""
        if len(self.segments) != len(other.segments):
            return False
        for mine, theirs in zip(self.segments, other.segments, strict=True):
            if mine is not None and theirs is not None:
                if mine != theirs:
                    return False
            elif mine is not None or theirs is not None:
                literal = mine if mine is not None else theirs
                if literal is not None and not _POSITION.fullmatch(literal):
                    return False  # a placeholder only matches an array position
        return True

    def refines(self, other: _Pattern) -> bool:
        """Every literal segment of `other` is the same literal here (self is at least as specific)."""
        return all(
            theirs is None or mine == theirs
            for mine, theirs in zip(self.segments, other.segments, strict=True)
        )


class Bindings:
    """A validated binding manifest.

    >>> b = Bindings.from_mapping({"layers.{i}.q.weight": "model.layers.{i}.q_proj.weight"})
    >>> b.resolve("layers.3.q.weight")
    'model.layers.3.q_proj.weight'
    >>> b.resolve("norm.weight")
    'norm.weight'
    """

    def __init__(self, source: str, exact: dict[str, str], patterns: list[_Pattern]) -> None:
        self.source = source
        self.exact = exact
        self.patterns = patterns

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object], source: str = "bindings") -> Bindings:
        """Validate a mapping; every problem is listed in one LinnetError naming `source`."""
        problems: list[str] = []
        exact: dict[str, str] = {}
        patterns: list[_Pattern] = []
        for key, value in mapping.items():
            found = _parse_entry(key, value, problems)
            if isinstance(found, _Pattern):
                patterns.append(found)
            elif found is not None:
                exact[key] = found
        for index, first in enumerate(patterns):
            for second in patterns[index + 1 :]:
                if first.overlaps(second) and first.refines(second) == second.refines(first):
                    problems.append(
                        f"keys `{first.key}` and `{second.key}` both match some paths and "
                        "neither is more specific"
                    )
        if problems:
            raise LinnetError(
                f"{source}: invalid bindings:\n" + "\n".join(f"  - {p}" for p in problems)
            )
        return cls(source, exact, patterns)

    def rule_for(self, path: str) -> str | None:
        """The key that binds `path` (exact key first, then the most specific pattern)."""
        if path in self.exact:
            return path
        best = self._best_pattern(path)
        return None if best is None else best[0].key

    def resolve(self, path: str) -> str:
        """The checkpoint name `path` reads; the path itself when no key matches."""
        if path in self.exact:
            return self.exact[path]
        best = self._best_pattern(path)
        if best is None:
            return path
        pattern, values = best
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], pattern.template)

    def _best_pattern(self, path: str) -> tuple[_Pattern, dict[str, str]] | None:
        parts = tuple(path.split("."))
        best: tuple[_Pattern, dict[str, str]] | None = None
        for pattern in self.patterns:
            values = pattern.match(parts)
            if values is not None and (best is None or pattern.refines(best[0])):
                best = (pattern, values)
        return best


def load_bindings(path: str | os.PathLike[str]) -> Bindings:
    """Read and validate a `bindings.json` file; errors name the file and key."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LinnetError(f"{file}: cannot read the bindings file: {error}") from None

    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        result: dict[str, object] = {}
        for key, value in pairs:
            if key in result:
                raise LinnetError(f"{file}: key `{key}` appears twice")
            result[key] = value
        return result

    try:
        data = json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as error:
        raise LinnetError(f"{file}: invalid JSON: {error}") from None
    if not isinstance(data, dict):
        raise LinnetError(f"{file}: the bindings must be a JSON object of path -> tensor name")
    return Bindings.from_mapping(data, str(file))


def _parse_entry(key: object, value: object, problems: list[str]) -> _Pattern | str | None:
    if not isinstance(key, str) or not isinstance(value, str):
        problems.append(f"key {json.dumps(key)}: keys and values must be strings")
        return None
    if not value:
        problems.append(f"key `{key}`: the tensor name is empty")
        return None
    segments: list[str | None] = []
    names: list[str | None] = []
    ok = True
    for segment in key.split("."):
        placeholder = _PLACEHOLDER.fullmatch(segment)
        if placeholder is not None:
            if placeholder.group(1) in names:
                problems.append(f"key `{key}`: placeholder `{segment}` appears twice")
                ok = False
            segments.append(None)
            names.append(placeholder.group(1))
        elif _SEGMENT.fullmatch(segment):
            segments.append(segment)
            names.append(None)
        else:
            problems.append(
                f"key `{key}`: `{segment}` is not a path segment (a name, an array position, "
                "or a `{i}` placeholder for one)"
            )
            ok = False
    in_key = {name for name in names if name is not None}
    in_value = set(_PLACEHOLDER.findall(value))
    if "{" in _PLACEHOLDER.sub("", value) or "}" in _PLACEHOLDER.sub("", value):
        problems.append(
            f"key `{key}`: value `{value}` has a brace that is not a `{{name}}` placeholder"
        )
        ok = False
    if in_key != in_value:
        problems.append(
            f"key `{key}`: value `{value}` must use the same placeholders as the key "
            f"(key: {_names(in_key)}; value: {_names(in_value)})"
        )
        ok = False
    if not ok:
        return None
    if not in_key:
        return value
    return _Pattern(key, tuple(segments), tuple(names), value)


def _names(names: set[str]) -> str:
    return ", ".join(f"{{{n}}}" for n in sorted(names)) or "none"
