"""The PyTorch backend on a CUDA device (skipped without one).

The small Llama runs on the GPU, interpreted and generated, and must agree with
the same module on the CPU: f32 within the contract's tolerance (the GPU's
matrix products may reassociate), bf16 within bf16 precision. The op-by-op
tests run on the GPU too when `LINNET_TEST_DEVICE=cuda` is set.
"""

from __future__ import annotations

import pytest
import torch
from test_torch_model import GENERICS, LLAMA, llama_weights

import linnet.torch as lt
from linnet.errors import LinnetError

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_llama_on_cuda_matches_cpu(compile: bool, dtype: str) -> None:
    weights = {k: torch.from_numpy(v) for k, v in llama_weights().items()}
    if dtype == "bf16":
        weights = {k: v.to(torch.bfloat16) for k, v in weights.items()}
    generics = {**GENERICS, "T": dtype}
    cpu = lt.load(LLAMA, generics=generics, weights=weights, compile=compile)
    gpu = lt.load(LLAMA, generics=generics, weights=weights, compile=compile, device="cuda")
    ids = torch.tensor([[3, 17, 5, 9]], dtype=torch.int32)
    tol = 1e-4 if dtype == "f32" else 5e-2
    with torch.no_grad():
        expected = cpu(ids).float()
        got = gpu(ids.cuda()).float().cpu()
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol)
        step = torch.tensor([[11]], dtype=torch.int32)
        expected = cpu.run_entry("decode", [step, 4]).float()
        got = gpu.run_entry(
            "decode", [step.cuda(), torch.tensor(4, device="cuda", dtype=torch.int32)]
        )
        torch.testing.assert_close(got.float().cpu(), expected, rtol=tol, atol=tol)
    cache = gpu.tensor("layers.0.self_attn.k_cache")
    assert cache.device.type == "cuda"
    with pytest.raises(LinnetError, match="ids"):
        gpu(ids)  # a CPU input for a CUDA model names the input


def test_module_moves_with_to() -> None:
    weights = {k: torch.from_numpy(v) for k, v in llama_weights().items()}
    m = lt.load(LLAMA, generics=GENERICS, weights=weights, compile=True)
    ids = torch.tensor([[1, 2, 3]], dtype=torch.int32)
    with torch.no_grad():
        expected = m(ids)
        m.to("cuda")
        assert m.device.type == "cuda"
        got = m(ids.cuda()).cpu()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_gpu_inputs_are_converted_and_host_inputs_still_checked() -> None:
    """int64 ids on the GPU cross as i32 (their values unchecked: they stay on the
    device); a Python position is on the host and is checked as on the CPU."""
    weights = {k: torch.from_numpy(v) for k, v in llama_weights().items()}
    gpu = lt.load(LLAMA, generics=GENERICS, weights=weights, device="cuda")
    ids = torch.tensor([[3, 17, 5, 9]], dtype=torch.int32, device="cuda")
    with torch.no_grad():
        narrow = gpu(ids)
        wide = gpu(ids.to(torch.int64))
    torch.testing.assert_close(wide, narrow, rtol=0, atol=0)
    step = torch.tensor([[11]], dtype=torch.int32, device="cuda")
    with pytest.raises(LinnetError, match=r"input `pos` 8 is outside 0\.\.7: the cache holds"):
        gpu.run_entry("decode", [step, 8])
