"""Shared fixtures of the standard-library tests: the installed JAX, recorded in the output."""

from __future__ import annotations

from typing import Any

import pytest

JAX_INFO = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def jax_random(request: pytest.FixtureRequest) -> Any:
    """`jax.random` with JAX's defaults (skips without JAX); records the version for the summary."""
    jax = pytest.importorskip("jax")
    partitionable = bool(jax.config.jax_threefry_partitionable)
    impl = str(jax.config.jax_default_prng_impl)
    request.config.stash[JAX_INFO] = (
        f"jax {jax.__version__} (default PRNG {impl}, jax_threefry_partitionable={partitionable})"
    )
    return jax.random


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    info = config.stash.get(JAX_INFO, None)
    if info is not None:
        terminalreporter.write_line(f"std.random compared bit for bit with {info}")
