"""Stateful example entries (KV-cache `prefill` / `decode`) through `linnet stablehlo` and back.

`linnet stablehlo` writes an entry that reads and assigns `state` members as
`@main(inputs, params, state) -> (results, next state)`, recorded in the
module's `linnet.state` / `linnet.next_state` attributes. `import_stablehlo`
makes each such member a `state` member of the imported model at its path,
read where the entry read it and assigned where it made the new value. The
imported entry, started from the same cache values, must give the results and
the caches of the example itself on `linnet.torch` and of the text compiled
by XLA (1e-5).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

from jax_import_support import STD  # noqa: E402
from test_import_stablehlo import (  # noqa: E402
    ROOT,
    binds,
    compiled,
    example_array,
    stablehlo_text,
)

import linnet.torch as lt  # noqa: E402
from linnet.errors import LinnetError  # noqa: E402
from linnet.jax import import_stablehlo  # noqa: E402

DECODER = ["Vocab=11", "H=8", "Heads=2", "KvHeads=1", "Inner=16", "Layers=2", "Batch=2",
           "MaxSeq=8"]  # fmt: skip
GPT2 = ["Batch=2", "Vocab=11", "H=8", "Heads=2", "Layers=2", "Positions=8"]
SIZES = {"01-llama": [*DECODER, "T=f32"], "gpt2": GPT2, "phi3": DECODER, "qwen2": DECODER,
         "qwen3": DECODER}  # fmt: skip
ENTRY_SIZES = {"prefill": ["S=5"], "decode": [], "prefill_slots": ["S=5", "M=2"],
               "decode_rows": [], "decode_slots": ["M=2"]}  # fmt: skip
FAST = {("01-llama", "decode"), ("01-llama", "prefill_slots"), ("gpt2", "prefill")}
CASES = [
    pytest.param(e, n, marks=() if (e, n) in FAST else pytest.mark.slow)
    for e in SIZES
    for n in ENTRY_SIZES
]


@pytest.mark.parametrize(("example", "entry"), CASES)
def test_stateful_entry_imports_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, example: str, entry: str
) -> None:
    from linnet.jax.dtypes import x64_scope
    from linnet.jax.importer.mlir import functions, parse_module, tensor_type
    from linnet.jax.stablehlo import parse_contract

    sizes = [*SIZES[example], *ENTRY_SIZES[entry]]
    path = ROOT / "examples" / example / "src/lib.linnet"
    text = stablehlo_text(capsys, path, "--entry", entry, *binds(sizes))
    module = parse_module(text)
    contract = parse_contract(module)
    assert contract.state and contract.next_state
    formals = functions(module)["main"].regions[0].blocks[0].arguments
    arrays = [example_array(*t) for t in (tensor_type(a.type) for a in formals) if t]
    n_in, n_params = len(contract.inputs), len(contract.params)
    params = dict(zip(contract.params, arrays[n_in : n_in + n_params], strict=True))
    state = dict(zip(contract.state, arrays[n_in + n_params :], strict=True))
    result = import_stablehlo(
        text, params, output=tmp_path / "model.linnet", weights=tmp_path / "weights"
    )
    assert sorted(result.state) == sorted(contract.state)
    assert set(result.parameters.values()) <= set(contract.params)
    assert result.entry == entry
    assert result.weights is not None
    imported = lt.load(result.output, weights=result.weights,
                       bindings=result.weights.parent / "bindings.json", std_root=STD)  # fmt: skip
    generics: dict[str, object] = {}
    for size in SIZES[example]:
        key, value = size.split("=")
        generics[key] = value if value == "f32" else int(value)
    original = lt.load(path, generics=generics, weights=result.weights, std_root=STD,
                       strict=False)  # fmt: skip
    for model in (imported, original):
        for member, value in state.items():
            model.tensor(member).copy_(torch.from_numpy(value))
    inputs = [torch.from_numpy(np.asarray(a)) for a in arrays[:n_in]]
    with torch.no_grad():
        got = imported.run_entry(entry, inputs)
        want = original.run_entry(entry, inputs)
    with x64_scope(True):
        xla = compiled(text).execute([jax.device_put(a) for a in arrays])
    assert contract.results == 1
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.numpy(), np.asarray(xla[0]), rtol=1e-5, atol=1e-5)
    for member, after in zip(contract.next_state, xla[1:], strict=True):
        mine = imported.tensor(member).numpy()
        np.testing.assert_allclose(mine, original.tensor(member).numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(mine, np.asarray(after), rtol=1e-5, atol=1e-5)
        assert not np.allclose(mine, state[member]), member  # the entry wrote the cache


def test_a_state_named_twice_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = ROOT / "examples" / "gpt2" / "src/lib.linnet"
    text = stablehlo_text(capsys, path, "--entry", "decode", *binds(GPT2))
    first = "transformer.h.0.attn.k_cache"
    doubled = text.replace('"transformer.h.0.attn.v_cache"', f'"{first}"', 1)
    assert doubled != text
    with pytest.raises(LinnetError, match=r"names `transformer\.h\.0\.attn\.k_cache` twice"):
        import_stablehlo(doubled, {}, output=tmp_path / "model.linnet")
    assert not (tmp_path / "model.linnet").exists()
