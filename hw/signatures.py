"""Interfaces shared by fetch, the engines, the token queues, the buffers and the core.

See docs/architecture.md, section "Hardware (hw/)". Every signature is seen from
the side that drives ``valid`` (the producer) unless stated otherwise.
"""

from __future__ import annotations

from amaranth.hdl import Mux, Value, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tensorfab.isa import HwConfig, insn_width, uop_format
from tensorfab.isa.config import log2
from tensorfab.isa.formats import FAST_RESET_LANES
from tensorfab.isa.insn import fast_reset_lanes

from .mem_port import MemPortSignature, MemReadSignature, MemWriteSignature

__all__ = [
    "WGT_OFFSET",
    "BufReadSignature",
    "BufWriteSignature",
    "ErrorSignature",
    "InsnStreamLayout",
    "MemPortSignature",
    "MemReadSignature",
    "MemWriteSignature",
    "ReadRequestSignature",
    "TokenSignature",
    "WriteRequestSignature",
    "ZeroSignature",
    "acc_entry_bits",
    "clamped_insn_count",
    "inp_entry_bits",
    "insn_index_width",
    "uop_entry_bits",
    "wgt_entry_bits",
    "wgt_entry_order",
    "zero_lanes",
]


def InsnStreamLayout(cfg: HwConfig) -> data.StructLayout:
    """Payload of an instruction stream: the ``word`` and its ``index`` in the program.

    Parameters
    ----------
    cfg : HwConfig
        Gives the instruction width.

    Returns
    -------
    amaranth.lib.data.StructLayout
    """
    return data.StructLayout({"word": unsigned(insn_width(cfg)),
                              "index": unsigned(insn_index_width(cfg))})


def insn_index_width(cfg: HwConfig) -> int:
    """Bits of an instruction's index in its program.

    A program lies in DRAM, so it holds at most ``2**dram_addr_width / insn_bytes``
    instructions: indices ``0 … 2**w - 1`` with ``w = dram_addr_width -
    log2(insn_bytes)``; an instruction count needs one bit more.

    Parameters
    ----------
    cfg : HwConfig
        Gives the DRAM address width and the instruction width.

    Returns
    -------
    int
    """
    return cfg.dram_addr_width - log2(insn_width(cfg) // 8)


def clamped_insn_count(insn_count: Value, cfg: HwConfig) -> Value:
    """The host's 32-bit INSN_COUNT clamped to the most instructions DRAM holds,
    ``2**insn_index_width(cfg)``: the words the fetch unit reads, in
    ``insn_index_width(cfg) + 1`` bits."""
    most = 1 << insn_index_width(cfg)
    return Mux(insn_count > most, most, insn_count)[:insn_index_width(cfg) + 1]


#: A dependency token, from the producer's side: ``valid`` offers (or requests) a
#: token, ``ready`` takes it. An engine pops with ``In(TokenSignature)`` (the queue
#: drives ``valid`` = not empty, the engine ``ready`` = pop) and pushes with
#: ``Out(TokenSignature)`` (the engine drives ``valid`` = push, the queue
#: ``ready`` = not full). A token moves when both are high.
TokenSignature = wiring.Signature({"valid": Out(1), "ready": In(1)})

#: An error report: ``valid`` is a one-cycle pulse carrying ``code`` (an
#: :class:`~tensorfab.isa.ErrorCode`) and ``index`` (the instruction's index); the
#: core latches the first one.
ErrorSignature = wiring.Signature({"valid": Out(1), "code": Out(4), "index": Out(32)})


def BufWriteSignature(addr_width: int, data_width: int) -> wiring.Signature:
    """A buffer write port, from the writer's side.

    An entry is written at the clock edge where ``en`` and ``ready`` are both high
    (the core ties ``ready`` to 1; the load engine's write to the shared accumulator
    port is a :func:`WriteRequestSignature` that learns a cycle ahead whether the port
    is taken, its ``acc_taken_next``).

    Parameters
    ----------
    addr_width, data_width : int
        Entry index and entry widths.

    Returns
    -------
    amaranth.lib.wiring.Signature
    """
    return wiring.Signature({"addr": Out(addr_width), "data": Out(data_width),
                             "en": Out(1), "ready": In(1)})


def BufReadSignature(addr_width: int, data_width: int) -> wiring.Signature:
    """A synchronous buffer read port, from the reader's side.

    ``data`` holds entry ``addr`` the cycle after ``en`` was high.

    Parameters
    ----------
    addr_width, data_width : int
        Entry index and entry widths.

    Returns
    -------
    amaranth.lib.wiring.Signature
    """
    return wiring.Signature({"addr": Out(addr_width), "en": Out(1), "data": In(data_width)})


def ReadRequestSignature(addr_width: int) -> wiring.Signature:
    """The request half of a :func:`BufReadSignature`: ``addr`` and ``en``, from a
    component that reads a buffer whose ``data`` goes to another one.

    Parameters
    ----------
    addr_width : int
        Entry index width.

    Returns
    -------
    amaranth.lib.wiring.Signature
    """
    return wiring.Signature({"addr": Out(addr_width), "en": Out(1)})


def WriteRequestSignature(addr_width: int, data_width: int) -> wiring.Signature:
    """A buffer write request without back-pressure: entry ``addr`` takes ``data`` at
    the clock edge where ``en`` is high (:func:`BufWriteSignature` without ``ready``:
    the writer's client arbitrates between requests and owns the port).

    Parameters
    ----------
    addr_width, data_width : int
        Entry index and entry widths.

    Returns
    -------
    amaranth.lib.wiring.Signature
    """
    return wiring.Signature({"addr": Out(addr_width), "data": Out(data_width),
                             "en": Out(1)})


#: Accumulator entries one zero-flag row covers (at most; see :func:`zero_lanes`).
ZERO_LANES = FAST_RESET_LANES


def zero_lanes(cfg: HwConfig) -> int:
    """Accumulator entries whose zero flags share one row of the zero-flag memory: a
    fast reset zeroes at most this many entries per cycle
    (:func:`tensorfab.isa.insn.fast_reset_lanes`)."""
    return fast_reset_lanes(cfg)


def ZeroSignature(cfg: HwConfig) -> wiring.Signature:
    """Bulk zeroing of accumulator entries, from the compute engine's side.

    When ``en`` is high, entries ``row · L + k`` for every set bit ``k`` of ``mask``
    (``L`` = :func:`zero_lanes`) read as zero from the next cycle on, until written.
    ``en`` claims the accumulator's write port for the cycle (nothing else writes it
    then) even with an empty ``mask``.
    """
    lanes = zero_lanes(cfg)
    row_bits = max(1, (cfg.acc_depth // lanes - 1).bit_length())
    return wiring.Signature({"en": Out(1), "row": Out(row_bits), "mask": Out(lanes)})


def inp_entry_bits(cfg: HwConfig) -> int:
    """Bits of one input-buffer entry (``batch × block_in`` int8)."""
    return cfg.inp_entry_bytes * 8


def wgt_entry_bits(cfg: HwConfig) -> int:
    """Bits of one weight-buffer entry (``block_out × block_in`` int8)."""
    return cfg.wgt_entry_bytes * 8


#: The weight buffer holds each int8 weight ``w`` as the unsigned byte ``w + 128``
#: (offset binary: the two's-complement byte with its sign bit inverted).
WGT_OFFSET = 128


def wgt_entry_order(cfg: HwConfig) -> list[int]:
    """Where the load engine puts each byte of a weight tile in the buffer entry.

    A weight tile is ``w[o][k]`` row-major in DRAM (byte ``o·block_in + k``); the
    buffer keeps it column-major, ``w[o][k]`` at byte ``k·block_out + o`` of the
    entry, so that the GEMM core finds the weights that share an activation side
    by side (:class:`~tensorfab.hw.gemm.GemmCore`), and each byte offset by
    :data:`WGT_OFFSET` (a padding entry is all ``0x80``: weights of zero).

    Parameters
    ----------
    cfg : HwConfig
        Gives ``block_in`` and ``block_out``.

    Returns
    -------
    list of int
        Entry byte of each DRAM tile byte: ``order[o·block_in + k] = k·block_out + o``.
    """
    return [k * cfg.block_out + o for o in range(cfg.block_out) for k in range(cfg.block_in)]


def acc_entry_bits(cfg: HwConfig) -> int:
    """Bits of one accumulator entry (``batch × block_out`` int32)."""
    return cfg.acc_entry_bytes * 8


def uop_entry_bits(cfg: HwConfig) -> int:
    """Bits of one on-chip micro-op entry (the used low bits of the micro-op word)."""
    return uop_format(cfg).used_bits
