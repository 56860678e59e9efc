"""cocotb driving of a fully pipelined unit (``in_valid`` in, ``out_valid`` out, no
back-pressure): reset, then a stream of inputs with the results collected in order."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

T = TypeVar("T")


async def reset_pipeline(dut, inputs: Sequence[Any]) -> None:
    """Start the clock, zero ``in_valid`` and ``inputs``, hold reset for two cycles."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for port in (dut.in_valid, *inputs):
        port.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0


async def drive_pipeline(dut, items: Sequence[T], apply: Callable[[T], None],
                         capture: Callable[[], Any], *, gaps: random.Random | None = None,
                         max_idle: int = 30, spacing: int = 1,
                         on_idle: Callable[[], None] | None = None) -> list[Any]:
    """Feed ``items`` one per cycle (or with random idle cycles when ``gaps`` is given)
    and return ``capture()`` of every cycle with ``out_valid``, in order.

    ``apply(item)`` sets the unit's inputs; ``in_valid`` is driven here. ``spacing``:
    an item's inputs are held, ``in_valid`` low, for ``spacing - 1`` cycles after it
    (a unit that takes its operands over several cycles). ``on_idle()``, if given, is
    called in each idle cycle whose inputs need not be held (it may set them). Fails
    when no result arrives for ``max_idle`` idle cycles, or when more results than
    inputs come.
    """
    got: list[Any] = []
    i = 0
    idle = 0
    held = 0
    while len(got) < len(items):
        await FallingEdge(dut.clk)
        if int(dut.out_valid.value):
            got.append(capture())
        if held == 0 and i < len(items) and not (gaps and gaps.random() < 0.3):
            apply(items[i])
            dut.in_valid.value = 1
            i += 1
            idle = 0
            held = spacing - 1
        else:
            if held == 0 and on_idle is not None:
                on_idle()
            held = max(0, held - 1)
            dut.in_valid.value = 0
            idle += 1
            assert idle < max_idle, "results stopped arriving"
    await FallingEdge(dut.clk)
    assert not int(dut.out_valid.value), "more results than inputs"
    return got
