"""Lowering: checked AST + bound generics -> Core IR (architecture.md "Core IR").

Stage: after binding (`linnet.ir.bind`), before the passes. The modules split
the work by concept: `values` (what an expression lowers to), `context`
(builders, frames, params and state), `exprs` (operators, names, members,
`if`, `match`), `calls` (inlining and `op` call regions), `prelude`,
`index` (comprehensions, reductions, element accesses), `slicing`, `stmts`
(statements, `static for`, `while`), `entry` (functions and programs) and
`reuse` (`op` regions and method bodies lowered once and cloned for every
later call with the same signature: a stack of layers is lowered once).

Lowering never reports user errors on a valid program except two kinds of
`LinnetError`: inputs that do not fit an entry (from binding), and valid
constructs it does not support yet, named in the message. Anything else that
goes wrong is an `InternalError`.

>>> from linnet.pipeline import check_source
>>> from linnet.ir.bind import bind
>>> from linnet.ir.core import TensorType
>>> model = bind(check_source('''module m
... pub block Scale<H: Dim> {
...     param gain: Tensor[H; f32]
...     pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {
...         let y[b, h] = x[b, h] * gain[h]
...         return y
...     }
... }'''), generics={"H": 4})
>>> fn = lower_entry(model, "forward", [TensorType((2, 4), "f32")])
>>> [op.kind for op in fn.body.ops]
['param', 'mul']
>>> fn.results[0].type
TensorType(shape=(2, 4), dtype='f32')
"""

from linnet.ir.lower.entry import lower_entry, lower_function, lower_program

__all__ = ["lower_entry", "lower_function", "lower_program"]
