"""Parameter manifests of top-level blocks (language.md 12.7, 18.2 `inspect --parameters`).

Stage: after a program checked without errors. In: a module's `BlockInfo`s
with resolved member types. Out: one `BlockManifest` per top-level block:
every `param`/`buffer`/`state` of the instantiated tree with its path
(`layers[*].attn.q.weight`), kind, dtype, shape (the root's generics
symbolic, every sub-block's arguments substituted), the lengths of the
arrays along its path (`repeat`, outermost first) and whether it is
optional (declared `?`, or any optional `sub` on its path).
"""

from __future__ import annotations

from linnet.check.decls import BlockInfo, ModuleInfo
from linnet.check.program import BlockManifest, ManifestEntry
from linnet.check.types import (
    ArrayType,
    BlockType,
    OptionalType,
    Subst,
    TensorType,
    shape_str,
)


def module_manifests(module: ModuleInfo) -> list[BlockManifest]:
    return [
        block_manifest(item)
        for item in module.items.values()
        if isinstance(item, BlockInfo) and item.members_state == "done"
    ]


def block_manifest(block: BlockInfo) -> BlockManifest:
    generics = [("*" if g.is_pack else "") + g.name for g in block.generics]
    entries: list[ManifestEntry] = []
    _walk(block, Subst(), "", [], False, entries, (block,))
    return BlockManifest(block.name, block.module.name, generics, entries)


def _walk(
    block: BlockInfo,
    subst: Subst,
    prefix: str,
    repeat: list[str],
    optional: bool,
    out: list[ManifestEntry],
    ancestors: tuple[BlockInfo, ...],
) -> None:
    for member in block.members.values():
        t = member.type
        if t is None:
            continue
        path = prefix + member.name
        if member.kind == "sub":
            child_optional = optional
            if isinstance(t, OptionalType):
                child_optional = True
                t = t.inner
            child_repeat = repeat
            if isinstance(t, ArrayType):
                child_repeat = [*repeat, str(subst.dim(t.length))]
                path += "[*]"
                t = t.elem
            if not isinstance(t, BlockType) or t.info in ancestors:
                continue  # a block containing itself was reported as E2122
            _walk(
                t.info,
                subst.compose(t.subst),
                path + ".",
                child_repeat,
                child_optional,
                out,
                (*ancestors, t.info),
            )
            continue
        tensor = t.inner if isinstance(t, OptionalType) else t
        if not isinstance(tensor, TensorType):
            continue
        shape = subst.shape(tensor.shape)
        out.append(
            ManifestEntry(
                path=path,
                kind=member.kind,
                dtype=str(subst.dtype(tensor.dtype)),
                shape=[shape_str((item,)) for item in shape],
                repeat=list(repeat),
                optional=optional or isinstance(t, OptionalType),
            )
        )
