"""linnet.collector.collector_paused: the cyclic collector is off inside, and after the block
(an exception included) as it was before."""

from __future__ import annotations

import gc

import pytest

from linnet.collector import collector_paused


def test_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("inside")
    assert gc.isenabled()


def test_a_caller_that_turned_it_off_keeps_it_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
