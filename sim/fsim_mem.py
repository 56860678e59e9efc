"""LOAD and STORE: 2-D DMA between DRAM and the on-chip buffers."""

from __future__ import annotations

import numpy as np

from tensorfab.isa import Buffer, ErrorCode, Load, Store, buffer_depth, buffer_entry_bytes
from tensorfab.isa.formats import (
    REQUANT_MAX_SHIFT,
    REQUANT_RECORD_WORDS,
    REQUANT_SHIFT_BYTE,
    uop_format,
)
from tensorfab.isa.requant_record import acc_record_rows, unpack_requant_records

from .fsim_alu import requant_values
from .machine import Machine, range_error
from .race import Access, Block, Span

_BUFFER_NAME = {Buffer.INP: "inp", Buffer.WGT: "wgt", Buffer.ACC: "acc", Buffer.UOP: "uop"}


def _dram_block(m: Machine, acc: Access, dram: int, y: int, x: int, stride: int,
                entry_bytes: int) -> Block:
    """The DRAM bytes of a ``y × x`` block of entries, range-checked."""
    start = dram * entry_bytes
    end = start + ((y - 1) * stride + x) * entry_bytes  # one past the highest byte
    if end > m.dram.size:
        raise range_error(acc, ErrorCode.DRAM_RANGE, "dram",
                          f"DRAM bytes {start:#x}..{end - 1:#x} (dram = {dram}, y = {y}, "
                          f"x = {x}, stride = {stride}, {entry_bytes}-byte entries) run past "
                          f"the end of DRAM at {m.dram.size:#x}")
    return Block(start, y, x * entry_bytes, stride * entry_bytes)


def _decode_uops(m: Machine, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Micro-op fields of little-endian micro-op words given as ``(n, word_bytes)``."""
    fmt = uop_format(m.cfg)
    words = np.zeros(raw.shape[0], dtype=np.uint64)
    for b in range(min(raw.shape[1], -(-fmt.used_bits // 8))):  # the rest is reserved
        words |= raw[:, b].astype(np.uint64) << np.uint64(8 * b)
    offsets = fmt.offsets()
    out = []
    for name in ("acc", "src", "wgt"):
        f = fmt.field(name)
        mask = np.uint64((1 << f.width) - 1)
        out.append(((words >> np.uint64(offsets[name])) & mask).astype(np.int64))
    return out[0], out[1], out[2]


def exec_load(m: Machine, acc: Access, insn: Load) -> None:
    """Execute a LOAD: zero-padded 2-D block from DRAM into a buffer."""
    name = _BUFFER_NAME[insn.buffer]
    depth = buffer_depth(m.cfg, insn.buffer)
    n = insn.rows * insn.cols
    if insn.sram + n > depth:
        raise range_error(acc, ErrorCode.SRAM_RANGE, "sram",
                          f"writes {name}[{insn.sram}..{insn.sram + n - 1}] "
                          f"({insn.rows} × {insn.cols} entries), past the {name} depth {depth}")
    eb = buffer_entry_bytes(m.cfg, insn.buffer)
    src = _dram_block(m, acc, insn.dram, insn.y, insn.x, insn.stride, eb)
    if m.dram_may_be_written(src.start, src.start + ((insn.y - 1) * insn.stride + insn.x) * eb):
        m.trackers["dram"].read(acc, src)
    m.trackers[name].write(acc, Span(insn.sram, insn.sram + n))
    data = np.array(src.get(m.dram)).reshape(insn.y, insn.x, eb)
    nbytes = insn.y * insn.x * eb
    c = m.counters
    if insn.buffer is Buffer.UOP:
        a, s, w = _decode_uops(m, data.reshape(n, eb))
        sl = slice(insn.sram, insn.sram + n)
        m.uop_acc[sl], m.uop_src[sl], m.uop_wgt[sl] = a, s, w
        m.forget_plans(insn.sram + n)
        c.load_bytes_uop += nbytes
        return
    buf = {Buffer.INP: m.inp, Buffer.WGT: m.wgt, Buffer.ACC: m.acc}[insn.buffer]
    raw = buf.reshape(depth, -1).view(np.uint8)
    block = raw[insn.sram: insn.sram + n].reshape(insn.rows, insn.cols, eb)
    if n != insn.y * insn.x:
        block[...] = 0
    block[insn.pad_top: insn.pad_top + insn.y, insn.pad_left: insn.pad_left + insn.x] = data
    if insn.buffer is Buffer.INP:
        c.load_bytes_inp += nbytes
    elif insn.buffer is Buffer.WGT:
        c.load_bytes_wgt += nbytes
    else:
        c.load_bytes_acc += nbytes


def exec_store(m: Machine, acc: Access, insn: Store) -> None:
    """Execute a STORE: accumulators narrowed to their low byte, into DRAM."""
    n = insn.y * insn.x
    depth = m.cfg.acc_depth
    if insn.sram + n > depth:
        raise range_error(acc, ErrorCode.SRAM_RANGE, "sram",
                          f"reads acc[{insn.sram}..{insn.sram + n - 1}], past the acc depth "
                          f"{depth}")
    eb = m.cfg.out_entry_bytes
    dst = _dram_block(m, acc, insn.dram, insn.y, insn.x, insn.stride, eb)
    dst_end = dst.start + (dst.rows - 1) * dst.pitch + dst.width
    if dst.start < m.insn_end and m.insn_start < dst_end:
        raise range_error(acc, ErrorCode.DRAM_RANGE, "dram",
                          f"writes DRAM byte {max(dst.start, m.insn_start):#x} (dram = "
                          f"{insn.dram}), inside the instruction stream [{m.insn_start:#x}, "
                          f"{m.insn_end:#x})")
    m.trackers["acc"].read(acc, Span(insn.sram, insn.sram + n))
    values = m.acc[insn.sram: insn.sram + n]
    if insn.requant:
        values = _requantized(m, acc, insn, values)
    m.trackers["dram"].write(acc, dst)
    data = values.astype(np.int8).view(np.uint8)
    dst.set(m.dram, data.reshape(insn.y, insn.x * eb))
    m.counters.store_bytes += n * eb


def _requantized(m: Machine, acc: Access, insn: Store, values: np.ndarray) -> np.ndarray:
    """``values`` through REQUANT with the records in ``acc[rec..rec+2]``; ``SHIFT_RANGE``
    (before anything is written) if a record's shift is past REQUANT_MAX_SHIFT."""
    span = Span(insn.rec, insn.rec + REQUANT_RECORD_WORDS)
    m.trackers["acc"].read(acc, span)
    rec = unpack_requant_records(acc_record_rows(m.acc[insn.rec: insn.rec + REQUANT_RECORD_WORDS]))
    bad = np.flatnonzero(rec["shift"] > REQUANT_MAX_SHIFT)
    if bad.size:
        o = int(bad[0])
        raise range_error(acc, ErrorCode.SHIFT_RANGE, "rec",
                          f"REQUANT shift {int(rec['shift'][o])} outside "
                          f"0..{REQUANT_MAX_SHIFT} in the record of channel {o} "
                          f"(lane {o} of acc[{insn.rec + REQUANT_SHIFT_BYTE // 4}])")
    return requant_values(values, **{k: v[None, None, :] for k, v in rec.items()})


__all__ = ["exec_load", "exec_store"]
