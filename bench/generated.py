"""Generators of large, valid programs for the front-end benchmark and tests.

`linnet_program(lines)` repeats a template that exercises the common paths of
the checker (contractions, broadcasting, reshape under `where` facts, slicing,
optional params with `match`, sub arrays with `static for`, entries) with fresh
names per copy, until the program has at least `lines` lines.
`python_program(lines)` does the same for a Python file, the yardstick for
CPython's own `ast.parse`.
"""

from __future__ import annotations

LINNET_TEMPLATE = """\
pub fn matmul_{i}<M: Dim, K: Dim, N: Dim>(
    a: Tensor[M, K; f32],
    b: Tensor[K, N; f32],
) -> Tensor[M, N; f32] {{
    let c[m, n] = sum[k] a[m, k] * b[k, n]
    return c
}}

pub fn heads_{i}<B: Dim, S: Dim, H: Dim, N: Dim>(x: Tensor[B, S, H; f32]) -> Tensor[B, N, S, H / N; f32]
where
    N > 0,
    H % N == 0
{{
    let split = reshape(x, [B, S, N, H / N])
    return permute(split, [0, 2, 1, 3])
}}

pub block Layer{i}<H: Dim, Inner: Dim> {{
    param up: Tensor[Inner, H; f32]
    param down: Tensor[H, Inner; f32]
    param bias: Tensor[H; f32]? = none

    pub fn forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H; f32] {{
        let hidden = max(matmul_{i}(x, permute(up, [1, 0])), 0.0)
        let y = matmul_{i}(hidden, permute(down, [1, 0])) * 0.5
        return match bias {{
            some(b) => x + y + b
            none => x + y
        }}
    }}
}}

pub block Stack{i}<H: Dim, Inner: Dim, Depth: Dim>
where H % 2 == 0 {{
    sub layers: [Layer{i}<H, Inner>; Depth]

    pub entry forward<B: Dim>(x: Tensor[B, H; f32]) -> Tensor[B, H / 2; f32] {{
        var h = x
        static for layer in layers {{
            h = layer.forward(h)
        }}
        let peak[b] = max[d] h[b, d]
        let centred = h - reshape(peak, [B, 1])
        return centred[:, 0::2]
    }}
}}

"""

PYTHON_TEMPLATE = """\
def matmul_{i}(a, b):
    rows = len(a)
    cols = len(b[0])
    inner = len(b)
    out = [[0.0] * cols for _ in range(rows)]
    for m in range(rows):
        for n in range(cols):
            total = 0.0
            for k in range(inner):
                total += a[m][k] * b[k][n]
            out[m][n] = total
    return out


class Layer{i}:
    def __init__(self, up, down, bias=None):
        self.up = up
        self.down = down
        self.bias = bias

    def forward(self, x):
        hidden = [[max(v, 0.0) for v in row] for row in matmul_{i}(x, self.up)]
        y = matmul_{i}(hidden, self.down)
        if self.bias is None:
            return [[a + b for a, b in zip(r, s)] for r, s in zip(x, y)]
        return [[a + b + c for a, b, c in zip(r, s, self.bias)] for r, s in zip(x, y)]


class Stack{i}:
    def __init__(self, layers):
        self.layers = layers

    def forward(self, x):
        h = x
        for layer in self.layers:
            h = layer.forward(h)
        peak = [max(row) for row in h]
        centred = [[v - p for v in row] for row, p in zip(h, peak)]
        return [row[0::2] for row in centred]


"""


def _repeat(header: str, template: str, lines: int) -> str:
    parts = [header]
    count = header.count("\n")
    per_copy = template.count("\n")
    i = 0
    while count < lines:
        parts.append(template.format(i=i))
        count += per_copy
        i += 1
    return "".join(parts).rstrip("\n") + "\n"


def linnet_program(lines: int) -> str:
    return _repeat("module bench.generated\n\n", LINNET_TEMPLATE, lines)


def python_program(lines: int) -> str:
    return _repeat('"""Generated."""\n\n\n', PYTHON_TEMPLATE, lines)
