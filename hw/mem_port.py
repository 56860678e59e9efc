"""The memory port: command, write-data and read-data streams (docs/architecture.md).

Three :mod:`amaranth.lib.stream` streams, seen from the master (the core):

``cmd``
    ``addr`` (byte address, beat aligned), ``write``, ``len`` (beats - 1, bursts of
    1 to 256 beats).
``wdata``
    exactly ``len + 1`` beats per write command, in command order.
``rdata``
    exactly ``len + 1`` beats per read command, in command order (memory to core).

Commands take effect in the order the memory accepts them. Engines see the two
halves of the port separately: :func:`MemReadSignature` (fetch, load) and
:func:`MemWriteSignature` (store); :class:`~tensorfab.hw.arbiter.MemArbiter` merges
them onto one :func:`MemPortSignature`.
"""

from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig

__all__ = [
    "LEN_WIDTH",
    "MAX_BURST",
    "MemCmdLayout",
    "MemDataLayout",
    "MemPortSignature",
    "MemReadSignature",
    "MemWriteSignature",
    "MemXferLayout",
]

#: Largest burst of one command, in beats (``len`` is 8 bits).
MAX_BURST = 256
#: Width of the ``len`` field.
LEN_WIDTH = 8


def MemCmdLayout(cfg: HwConfig) -> data.StructLayout:
    """Payload of the port's ``cmd`` stream: ``addr``, ``write``, ``len``.

    Parameters
    ----------
    cfg : HwConfig
        Gives the address width.

    Returns
    -------
    amaranth.lib.data.StructLayout
    """
    return data.StructLayout({"addr": unsigned(cfg.dram_addr_width), "write": unsigned(1),
                              "len": unsigned(LEN_WIDTH)})


def MemXferLayout(cfg: HwConfig) -> data.StructLayout:
    """Payload of an engine's command stream (direction implied): ``addr``, ``len``.

    Parameters
    ----------
    cfg : HwConfig
        Gives the address width.

    Returns
    -------
    amaranth.lib.data.StructLayout
    """
    return data.StructLayout({"addr": unsigned(cfg.dram_addr_width),
                              "len": unsigned(LEN_WIDTH)})


def MemDataLayout(cfg: HwConfig) -> data.StructLayout:
    """Payload of a data beat: ``data`` (``mem_bus_width`` bits).

    Parameters
    ----------
    cfg : HwConfig
        Gives the bus width.

    Returns
    -------
    amaranth.lib.data.StructLayout
    """
    return data.StructLayout({"data": unsigned(cfg.mem_bus_width)})


def MemPortSignature(cfg: HwConfig) -> wiring.Signature:
    """The full memory port, from the master's (core's) side.

    Parameters
    ----------
    cfg : HwConfig
        Address and bus widths.

    Returns
    -------
    amaranth.lib.wiring.Signature
        Members ``cmd`` (out), ``wdata`` (out), ``rdata`` (in).
    """
    return wiring.Signature({
        "cmd": Out(stream.Signature(MemCmdLayout(cfg))),
        "wdata": Out(stream.Signature(MemDataLayout(cfg))),
        "rdata": In(stream.Signature(MemDataLayout(cfg))),
    })


def MemReadSignature(cfg: HwConfig) -> wiring.Signature:
    """A read-only master's half of the port (fetch, load engine).

    Parameters
    ----------
    cfg : HwConfig
        Address and bus widths.

    Returns
    -------
    amaranth.lib.wiring.Signature
        Members ``cmd`` (out, ``addr``/``len``) and ``rdata`` (in).
    """
    return wiring.Signature({
        "cmd": Out(stream.Signature(MemXferLayout(cfg))),
        "rdata": In(stream.Signature(MemDataLayout(cfg))),
    })


def MemWriteSignature(cfg: HwConfig) -> wiring.Signature:
    """A write-only master's half of the port (store engine).

    Parameters
    ----------
    cfg : HwConfig
        Address and bus widths.

    Returns
    -------
    amaranth.lib.wiring.Signature
        Members ``cmd`` (out, ``addr``/``len``) and ``wdata`` (out).
    """
    return wiring.Signature({
        "cmd": Out(stream.Signature(MemXferLayout(cfg))),
        "wdata": Out(stream.Signature(MemDataLayout(cfg))),
    })
