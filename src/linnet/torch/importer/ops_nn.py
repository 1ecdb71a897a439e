"""ATen neural-network operators (linear, norms, activations, attention, conv, pooling).

Stage: the torch importer's second step. High-level ATen ops map straight to the
`linnet` domain nodes pattern recovery makes (`linear`, `layer_norm`,
`rms_norm`, `silu`, `gelu`, `lookup`), so they become std calls without a
pattern search; `scaled_dot_product_attention` is written in the spelled-out
form the attention recovery reads (`MatMul`, scale, boolean mask as `Where`,
`Softmax`, `MatMul`), so it becomes std attention, a causal mask included;
conv and pooling map to ONNX `Conv`, `MaxPool`, `AveragePool`,
`BatchNormalization`. `NN_OPS` maps ATen overload names to them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import fx

from linnet.sourcegen.builder import Skip
from linnet.torch.dtypes import linnet_dtype
from linnet.torch.importer.builder import (
    NUMPY,
    Builder,
    args_of,
    aten_key,
    axis_of,
    cast_to,
    kwargs_of,
    linnet_node,
    out_type,
    result,
    static,
)


def _linear(b: Builder, node: fx.Node) -> None:
    x, w = args_of(node)[0], args_of(node)[1]
    bias = args_of(node)[2] if len(args_of(node)) > 2 else None
    linnet_node(
        b, node, "linear", [b.value(x), b.value(w), b.value(bias) if bias is not None else ""]
    )


def _addmm(b: Builder, node: fx.Node) -> None:
    bias, x, w = args_of(node)[0], args_of(node)[1], args_of(node)[2]
    beta = kwargs_of(node).get("beta", 1)
    alpha = kwargs_of(node).get("alpha", 1)
    result(b, node, "Gemm", [b.value(x), b.value(w), b.value(bias)], alpha=float(alpha),
            beta=float(beta))  # fmt: skip


def _matmul(b: Builder, node: fx.Node) -> None:
    result(b, node, "MatMul", [b.value(args_of(node)[0]), b.value(args_of(node)[1])])


def _embedding(b: Builder, node: fx.Node) -> None:
    w, ids = args_of(node)[0], args_of(node)[1]
    if b.info(ids).shape == ():
        result(b, node, "Gather", [b.value(w), b.value(ids)], axis=0)
        return
    linnet_node(b, node, "lookup", [b.value(w), b.value(ids)])


def _softmax(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    rank = len(b.info(x).shape or ())
    axis = axis_of(int(args_of(node)[1]), rank)
    src = b.value(x)
    dtype, _ = out_type(b, node)
    src = cast_to(b, src, dtype)
    result(b, node, "Softmax", [src], axis=axis)


def _layer_norm(b: Builder, node: fx.Node) -> None:
    args = list(args_of(node)) + [None] * 5
    x, shape, w, bias = args[0], args[1], args[2], args[3]
    eps = float(args[4] if args[4] is not None else kwargs_of(node).get("eps", 1e-5))
    if len(shape) != 1:
        raise Skip("layer norm over more than the last axis")
    linnet_node(b, node, "layer_norm", [b.value(x), b.value(w) if w is not None else "",
            b.value(bias) if bias is not None else ""], eps=eps)  # fmt: skip


def _rms_norm(b: Builder, node: fx.Node) -> None:
    args = list(args_of(node)) + [None] * 4
    x, shape, w, eps = args[0], args[1], args[2], args[3]
    if len(shape) != 1 or w is None:
        raise Skip("RMS norm over more than the last axis, or without a weight")
    if eps is None:
        eps = float(torch.finfo(torch.float32).eps)
    linnet_node(b, node, "rms_norm", [b.value(x), b.value(w)], eps=float(eps))


def _gelu(b: Builder, node: fx.Node) -> None:
    approx = kwargs_of(node).get(
        "approximate", args_of(node)[1] if len(args_of(node)) > 1 else "none"
    )
    linnet_node(b, node, "gelu" if approx == "tanh" else "gelu_erf", [b.value(args_of(node)[0])])


def _sdpa(b: Builder, node: fx.Node) -> None:
    args = list(args_of(node)) + [None] * 6
    q, k, v = args[0], args[1], args[2]
    mask = args[3] if args[3] is not None else kwargs_of(node).get("attn_mask")
    dropout = args[4] if args[4] is not None else kwargs_of(node).get("dropout_p", 0.0)
    causal = args[5] if args[5] is not None else kwargs_of(node).get("is_causal", False)
    scale = kwargs_of(node).get("scale")
    if kwargs_of(node).get("enable_gqa"):
        raise Skip("attention with enable_gqa")
    if dropout:
        raise Skip("attention with dropout")
    qi, ki = b.info(q), b.info(k)
    qs, ks = qi.shape or (), ki.shape or ()
    rank = len(ks)
    if rank < 2 or len(qs) != rank:
        raise Skip("attention operands of different ranks")
    dtype = qi.dtype
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    kt = b.emit("Transpose", [b.value(k)], dtype, (*ks[:-2], ks[-1], ks[-2]), {"perm": perm})
    score_shape = (*qs[:-1], ks[-2])
    scores = b.emit("MatMul", [b.value(q), kt], dtype, score_shape)
    if scale is None:
        head = qs[-1]
        if not isinstance(head, int):
            raise Skip("a symbolic head size")
        scale = 1.0 / math.sqrt(head)
    np_dtype = NUMPY[dtype or "f32"]
    scaled = b.emit("Mul", [scores, b.const(np.array(scale, dtype=np_dtype))], dtype, score_shape)
    if causal:
        rows, cols = qs[-2], ks[-2]
        if not isinstance(rows, int) or not isinstance(cols, int):
            raise Skip("a causal mask over a symbolic length")
        tri = np.tril(np.ones((rows, cols), dtype=bool), cols - rows)
        mask_name: str | None = b.const(tri)
        mask_dtype: str | None = "bool"
    elif mask is not None:
        mask_name, mask_dtype = b.value(mask), b.info(mask).dtype
    else:
        mask_name = mask_dtype = None
    if mask_name is not None:
        if mask_dtype == "bool":
            zero = b.const(np.array(0.0, dtype=np_dtype))
            fill = b.const(np.array(-np.inf, dtype=np_dtype))
            mshape = b.graph.value_info[mask_name].shape if mask_name in b.graph.value_info else (
                tuple(b.graph.constants[mask_name].shape))  # fmt: skip
            additive = b.emit("Where", [mask_name, zero, fill], dtype, mshape or ())
        else:
            additive = mask_name
        scaled = b.emit("Add", [scaled, additive], dtype, score_shape)
    probs = b.emit("Softmax", [scaled], dtype, score_shape, {"axis": rank - 1})
    result(b, node, "MatMul", [probs, b.value(v)])


def _conv(b: Builder, node: fx.Node) -> None:
    key = aten_key(node)
    args = list(args_of(node)) + [None] * 9
    x, w, bias = args[0], args[1], args[2]
    if key.startswith("convolution"):
        stride, padding, dilation, transposed, _, groups = args[3:9]
        if transposed:
            raise Skip("transposed convolution")
    else:
        stride, padding, dilation, groups = args[3], args[4], args[5], args[6]
    ws = b.info(w).shape or ()
    spatial = len(ws) - 2
    stride = _per_axis(stride if stride is not None else 1, spatial)
    dilation = _per_axis(dilation if dilation is not None else 1, spatial)
    if isinstance(padding, str):
        raise Skip(f"padding={padding!r}")
    pads = _per_axis(padding if padding is not None else 0, spatial)
    inputs = [b.value(x), b.value(w)] + ([b.value(bias)] if bias is not None else [])
    result(b, node, "Conv", inputs, strides=stride, pads=pads + pads, dilations=dilation,
            group=int(groups or 1), kernel_shape=static(ws[2:]))  # fmt: skip


def _per_axis(value: Any, n: int) -> list[int]:
    if isinstance(value, int):
        return [value] * n
    values = [int(v) for v in value]
    return values * n if len(values) == 1 else values


def _max_pool(b: Builder, node: fx.Node) -> None:
    args = list(args_of(node)) + [None] * 6
    x, kernel, stride, padding, dilation, ceil = args[:6]
    n = len(kernel)
    k = _per_axis(kernel, n)
    s = _per_axis(stride if stride else kernel, n)
    p = _per_axis(padding if padding is not None else 0, n)
    d = _per_axis(dilation if dilation is not None else 1, n)
    result(b, node, "MaxPool", [b.value(x)], kernel_shape=k, strides=s, pads=p + p,
            dilations=d, ceil_mode=int(bool(ceil)))  # fmt: skip


def _avg_pool(b: Builder, node: fx.Node) -> None:
    args = list(args_of(node)) + [None] * 7
    x, kernel, stride, padding, ceil, include, divisor = args[:7]
    if divisor is not None:
        raise Skip("average pooling with a divisor_override")
    n = len(kernel)
    k = _per_axis(kernel, n)
    s = _per_axis(stride if stride else kernel, n)
    p = _per_axis(padding if padding is not None else 0, n)
    result(b, node, "AveragePool", [b.value(x)], kernel_shape=k, strides=s, pads=p + p,
            ceil_mode=int(bool(ceil)), count_include_pad=int(include is None or bool(include)))  # fmt: skip


def _adaptive_avg_pool(b: Builder, node: fx.Node) -> None:
    x = args_of(node)[0]
    size = [int(s) for s in args_of(node)[1]]
    shape = b.info(x).shape or ()
    spatial = shape[-len(size) :]
    if all(s == 1 for s in size):
        result(b, node, "GlobalAveragePool", [b.value(x)])
        return
    if not all(isinstance(e, int) and e % s == 0 for e, s in zip(spatial, size, strict=True)):
        raise Skip("adaptive pooling whose windows differ in size")
    k = [e // s for e, s in zip(static(spatial), size, strict=True)]
    result(b, node, "AveragePool", [b.value(x)], kernel_shape=k, strides=k, pads=[0] * (2 * len(k)))


def _batch_norm(b: Builder, node: fx.Node) -> None:
    args = list(args_of(node)) + [None] * 8
    key = aten_key(node)
    if key.startswith("_native_batch_norm_legit_no_training"):
        x, w, bias, mean, var, _, eps = args[:7]
    else:
        x, w, bias, mean, var, training, _, eps = args[:8]
        if training:
            raise Skip("batch norm in training mode")
    vals = node.meta.get("val")
    first = vals[0] if isinstance(vals, list | tuple) else vals
    if not isinstance(first, torch.Tensor):
        raise Skip("batch norm without a known result")
    dtype = linnet_dtype(first.dtype)
    shape = b.shape_of(first)
    c = (b.info(x).shape or (None, None))[1]
    np_dtype = NUMPY[dtype or "f32"]
    ones = w is None and b.const(np.ones(tuple(static([c])), dtype=np_dtype))
    zeros = bias is None and b.const(np.zeros(tuple(static([c])), dtype=np_dtype))
    name = b.emit("BatchNormalization", [b.value(x), ones or b.value(w), zeros or b.value(bias),
                  b.value(mean), b.value(var)], dtype, shape, {"epsilon": float(eps or 1e-5)},
                  out=node.name)  # fmt: skip
    b.names[node] = [name, "", ""] if isinstance(vals, list | tuple) else name


Handler = Callable[[Builder, fx.Node], None]


NN_OPS: dict[str, Handler] = {
    "gelu.default": _gelu,
    "linear.default": _linear,
    "addmm.default": _addmm,
    "matmul.default": _matmul,
    "bmm.default": _matmul,
    "mm.default": _matmul,
    "embedding.default": _embedding,
    "softmax.int": _softmax,
    "_softmax.default": _softmax,
    "layer_norm.default": _layer_norm,
    "rms_norm.default": _rms_norm,
    "scaled_dot_product_attention.default": _sdpa,
    "conv1d.default": _conv,
    "conv2d.default": _conv,
    "conv3d.default": _conv,
    "convolution.default": _conv,
    "max_pool1d.default": _max_pool,
    "max_pool2d.default": _max_pool,
    "max_pool3d.default": _max_pool,
    "avg_pool1d.default": _avg_pool,
    "avg_pool2d.default": _avg_pool,
    "avg_pool3d.default": _avg_pool,
    "adaptive_avg_pool1d.default": _adaptive_avg_pool,
    "adaptive_avg_pool2d.default": _adaptive_avg_pool,
    "batch_norm.default": _batch_norm,
    "_native_batch_norm_legit_no_training.default": _batch_norm,
}
"""The neural-network operators mapped, keyed by ATen overload name without `aten.`."""
