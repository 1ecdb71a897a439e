"""The node pack loads as ComfyUI loads a `custom_nodes` folder, and every node keeps the contract.

ComfyUI is not installable here, so `standin.load_custom_node` reproduces its
loader (see `standin`): the shipped folder is copied into a `custom_nodes`
folder (and, separately, linked there), imported by path, and its tables read.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import ClassVar

import pytest

pytest.importorskip("torch")

from comfy_cases import PACK
from standin import Registry, contract_problems, load_custom_node

import linnet.comfyui as pack

NODES = {
    "LinnetLoadModel", "LinnetLoadCard", "LinnetRunEntry", "LinnetModelInfo",
    "LinnetResetState", "LinnetGenerateText", "LinnetImageToTensor",
    "LinnetTensorToImage", "LinnetArgmax", "LinnetTensorFromValues",
}  # fmt: skip


def test_copied_into_custom_nodes_loads_every_node(tmp_path: Path) -> None:
    target = tmp_path / "ComfyUI" / "custom_nodes" / "linnet_comfyui"
    shutil.copytree(PACK, target)
    registry = load_custom_node(str(target))
    assert set(registry.classes) == NODES
    assert registry.classes == pack.NODE_CLASS_MAPPINGS
    assert set(registry.titles) == NODES
    assert all(isinstance(t, str) and t for t in registry.titles.values())
    assert len(set(registry.titles.values())) == len(NODES)
    assert registry.classes["LinnetRunEntry"].RELATIVE_PYTHON_MODULE == (  # type: ignore[attr-defined]
        "custom_nodes.linnet_comfyui"
    )


def test_symlinked_into_custom_nodes_loads(tmp_path: Path) -> None:
    folder = tmp_path / "custom_nodes"
    folder.mkdir()
    (folder / "linnet_comfyui").symlink_to(PACK, target_is_directory=True)
    registry = load_custom_node(str(folder / "linnet_comfyui"), Registry())
    assert set(registry.classes) == NODES


@pytest.mark.parametrize("name", sorted(NODES))
def test_node_keeps_the_contract(name: str) -> None:
    cls = pack.NODE_CLASS_MAPPINGS[name]
    assert contract_problems(name, cls) == []
    assert cls.CATEGORY.startswith("Linnet")  # type: ignore[attr-defined]
    assert isinstance(cls.DESCRIPTION, str) and cls.DESCRIPTION  # type: ignore[attr-defined]


def test_the_contract_check_can_fail() -> None:
    class Broken:
        RETURN_TYPES: ClassVar[list[str]] = ["STRING"]
        FUNCTION = "go"
        CATEGORY = "x"

        @staticmethod
        def INPUT_TYPES() -> dict[str, object]:
            return {"required": {"a": ("INT", {"default": 5, "min": 0, "max": 3})}}

        def go(self) -> tuple[str]:
            return ("",)

    assert contract_problems("Broken", Broken) == ["Broken: INPUT_TYPES must be a classmethod"]
    Broken.INPUT_TYPES = classmethod(
        lambda cls: {"required": {"a": ("INT", {"default": 5, "min": 0, "max": 3})}}
    )  # type: ignore[assignment,method-assign]
    problems = contract_problems("Broken", Broken)
    assert "Broken.a: default 5 outside [0, 3]" in problems
    assert "Broken: RETURN_TYPES must be a tuple of strings" in problems
    assert "Broken: go() has no parameter for input `a`" in problems


def test_without_linnet_the_folder_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "custom_nodes" / "linnet_comfyui"
    shutil.copytree(PACK, target)
    monkeypatch.setitem(sys.modules, "linnet.comfyui", None)  # an import of it fails
    with pytest.raises(ImportError, match=r"needs linnet-lang in ComfyUI's Python.*pip install"):
        load_custom_node(str(target))
