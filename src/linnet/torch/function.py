"""`linnet.torch.load_function`: a module-level entry (language.md 11.7) as a torch callable.

Stage: the PyTorch backend for code without weights or state: a loss, a
metric, a preprocessing step. In: a program and the entry's name. Out: a
`LinnetFunction` (an `nn.Module` without parameters, so it composes like
`nn.CrossEntropyLoss`): each call binds the entry's generics from its inputs
(6.7 step 4), lowers and optimises it once per input types, and runs it
interpreted or as generated source. Gradients flow to the inputs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from linnet.check.program import CheckedProgram
from linnet.errors import LinnetError
from linnet.ir.bind import EntrySignature, generics_key, module_entry
from linnet.ir.core import TensorType
from linnet.ir.inputs import check_inputs, order_inputs
from linnet.pipeline import check_program
from linnet.torch.load import Source
from linnet.torch.module import Prepared, Result, convert_input, make_runner


class LinnetFunction(nn.Module):
    """A module-level Linnet entry; call it with tensors (see the module docstring)."""

    def __init__(
        self,
        program: CheckedProgram,
        module: str,
        name: str,
        *,
        device: torch.device | str = "cpu",
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.program = program
        self.module_name = module
        self.name = name
        self.signature: EntrySignature = module_entry(program, module, name)
        self.device = torch.device(device)
        self.compiled = compile
        self._prepared: dict[tuple[object, ...], Prepared] = {}
        self._latest: Prepared | None = None

    def forward(self, *inputs: object, **named: object) -> Result:
        return self.call(inputs, named)

    def call(
        self,
        inputs: Sequence[object],
        named: Mapping[str, object] | None = None,
        generics: Mapping[str, object] | None = None,
    ) -> Result:
        """Run the entry; `generics` fixes generics that no input determines."""
        owner = f"entry `{self.name}`"
        signature = self.signature
        values = order_inputs(signature, inputs, named or {})
        converted = [
            convert_input(v, spec, signature, self.device, owner)
            for v, spec in zip(values, signature.inputs[: len(values)], strict=True)
        ]
        prepared = self.prepare([t for _, t, _ in converted], generics)
        check_inputs(prepared.checks, [h for _, _, h in converted], owner)
        results, _ = prepared.run({}, {}, [t for t, _, _ in converted])
        if not results:
            return None
        return results[0] if len(results) == 1 else tuple(results)

    def prepare(
        self, input_types: Sequence[TensorType], generics: Mapping[str, object] | None = None
    ) -> Prepared:
        key = (tuple(input_types), generics_key(generics))
        found = self._prepared.get(key)
        if found is None:
            from linnet.ir.lower import lower_function
            from linnet.ir.passes import optimize

            fn = lower_function(
                self.program, self.module_name, self.name, input_types, generics=generics
            )
            fn = optimize(fn)
            run = make_runner(fn, self.device, compile=self.compiled, trainable=True)
            found = self._prepared[key] = Prepared(fn, run)
        self._latest = found
        return found

    def generated_source(self, input_types: Sequence[TensorType] | None = None) -> str:
        """The generated Python source for `input_types`, or for the latest call."""
        if not self.compiled:
            raise LinnetError("generated source exists only with compile=True")
        prepared = self.prepare(input_types) if input_types is not None else self._latest
        if prepared is None:
            raise LinnetError(f"entry `{self.name}` has not run yet; pass input_types")
        source = prepared.source
        assert source is not None
        return source

    def extra_repr(self) -> str:
        return f"{self.module_name}::{self.name}"


def load_function(
    source: Source,
    name: str,
    *,
    module: str | None = None,
    std_root: str | os.PathLike[str] | None = None,
    device: torch.device | str = "cpu",
    compile: bool = False,
) -> LinnetFunction:
    """A module-level entry (or function) `name` as a callable `nn.Module`.

    `module` picks the module by key or dotted name (`std.nn.loss`); by
    default it is the root module of `source`.

    >>> import torch
    >>> f = load_function('''module doc
    ... pub entry spread<N: Dim>(x: Tensor[N; f32]) -> f32 {
    ...     return max[i] x[i] - min[i] x[i]
    ... }''', "spread")
    >>> f(torch.tensor([1.0, 4.0, 2.0]))
    tensor(3.)
    """
    program = check_program(source, std_root)
    if module is None:
        if not program.graph.roots:
            raise LinnetError("the program has no root module")
        module = program.graph.roots[0]
    return LinnetFunction(program, module, name, device=device, compile=compile)
