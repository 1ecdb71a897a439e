"""linnet-comfyui, the folder ComfyUI loads from `custom_nodes`: Linnet models as nodes.

ComfyUI imports this folder as a package and reads the two tables below. The
nodes themselves live in `linnet.comfyui`, installed with linnet-lang into
ComfyUI's Python (see README.md beside this file), so this folder never goes
out of step with the installed version.
"""

try:
    from linnet.comfyui import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS
except ImportError as exc:
    raise ImportError(
        f"linnet-comfyui needs linnet-lang in ComfyUI's Python ({exc}); install it with "
        "`python -m pip install 'linnet-lang[torch,onnx,serve]'` using the Python that runs "
        "ComfyUI"
    ) from exc

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
