"""Architectural state of the functional simulator: DRAM, on-chip buffers, race
trackers and counters, plus the range-error helpers the instruction modules share."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import numpy as np

from tensorfab.isa import ErrorCode, HwConfig, Insn, Program, ProgramError, Store
from tensorfab.isa.device import Counters

from .race import ENGINE_NAMES, Access, Tracker, ZeroedArrays

T = TypeVar("T")
_MAX_PLANS = 4096

#: Byte order of the accumulator buffer (its raw bytes are the DRAM layout).
ACC_DTYPE = np.dtype("<i4")


class Machine:
    """DRAM image, buffers and bookkeeping of one run.

    Parameters
    ----------
    program : Program
        The program (config, layout for messages).
    dram : numpy.ndarray
        Writable ``uint8`` DRAM image, updated in place.
    streams : Sequence[Sequence[tuple[int, Insn]]]
        Per engine, its ``(index, instruction)`` stream: maps sequence numbers back
        to instructions for race messages.

    Attributes
    ----------
    inp : numpy.ndarray
        ``(inp_depth, batch, block_in)`` int8.
    wgt : numpy.ndarray
        ``(wgt_depth, block_out, block_in)`` int8.
    acc : numpy.ndarray
        ``(acc_depth, batch, block_out)`` little-endian int32.
    uop_acc, uop_src, uop_wgt : numpy.ndarray
        ``(uop_depth,)`` int64 micro-op fields.
    trackers : dict[str, Tracker]
        Race trackers of ``inp``, ``wgt``, ``acc``, ``uop`` (per entry) and ``dram``
        (per byte).
    counters : Counters
        Activity counters.
    insn_start, insn_end : int
        The instruction stream's byte range in DRAM (STOREs must not write into it).
    store_hull : tuple[int, int]
        Byte range ``[lo, hi)`` covering every STORE destination of the program.
    plan_cache : dict, optional
        GEMM/ALU evaluation plans by ``(micro-op table digest, instruction, fast)``, kept
        by the simulator across runs of the same configuration (a plan depends only on
        the instruction, the micro-op table and the configuration); default: this run's
        own.
    arrays : ZeroedArrays, optional
        Where the race trackers take their arrays, kept by the simulator across runs
        (:meth:`release` gives them back); default: new ones.
    """

    def __init__(self, program: Program, dram: np.ndarray,
                 streams: Sequence[Sequence[tuple[int, Insn]]],
                 plan_cache: dict[Hashable, Any] | None = None,
                 arrays: ZeroedArrays | None = None) -> None:
        cfg = program.config
        self.cfg: HwConfig = cfg
        self.program = program
        self.dram = dram
        self.insn_start = program.insn_base
        self.insn_end = self.insn_start + len(program.insns) * program.insn_bytes
        self.inp = np.zeros((cfg.inp_depth, cfg.batch, cfg.block_in), dtype=np.int8)
        self.wgt = np.zeros((cfg.wgt_depth, cfg.block_out, cfg.block_in), dtype=np.int8)
        self.acc = np.zeros((cfg.acc_depth, cfg.batch, cfg.block_out), dtype=ACC_DTYPE)
        self.uop_acc = np.zeros(cfg.uop_depth, dtype=np.int64)
        self.uop_src = np.zeros(cfg.uop_depth, dtype=np.int64)
        self.uop_wgt = np.zeros(cfg.uop_depth, dtype=np.int64)
        self.counters = Counters()
        self._streams = streams
        self._regions = sorted(((r.offset, r.offset + r.nbytes, name)
                                for name, r in program.layout().items() if r.nbytes),
                               key=lambda t: t[0])
        self.trackers: dict[str, Tracker] = {}
        for name, depth in (("inp", cfg.inp_depth), ("wgt", cfg.wgt_depth),
                            ("acc", cfg.acc_depth), ("uop", cfg.uop_depth)):
            self.trackers[name] = Tracker(name, depth, self._locate, _entry_describer(name),
                                          arrays)
        self.trackers["dram"] = Tracker("dram", int(dram.size), self._locate,
                                        self._describe_dram, arrays)
        self.store_hull = _store_hull(cfg, streams)
        self._plans: dict[Hashable, Any] = {} if plan_cache is None else plan_cache
        self._table: bytes | None = None  # digest of the micro-op table
        self._uops_loaded = 0  # entries past the highest load are still zero

    def release(self) -> None:
        """Give the race trackers' arrays back (zeroed) for the next run."""
        for tracker in self.trackers.values():
            tracker.release()

    def _uop_table(self) -> bytes:
        if self._table is None:
            h = hashlib.blake2b(digest_size=16)
            for a in (self.uop_acc, self.uop_src, self.uop_wgt):
                h.update(a[:self._uops_loaded].data)
            self._table = h.digest()
        return self._table

    def cached_plan(self, key: Hashable) -> Any:
        """The plan cached under ``key`` for the current micro-op table, or None."""
        return self._plans.get((self._uop_table(), key))

    def remember(self, key: Hashable, plan: T) -> T:
        """Cache ``plan`` under ``key`` for the current micro-op table (bounded)."""
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        self._plans[(self._uop_table(), key)] = plan
        return plan

    def forget_plans(self, loaded_end: int = 0) -> None:
        """The micro-op table changed (a load ending at entry ``loaded_end``): plans are
        looked up under its new contents."""
        self._table = None
        self._uops_loaded = max(self._uops_loaded, loaded_end)

    def dram_may_be_written(self, start: int, end: int) -> bool:
        """Whether any STORE of the program can write a byte in ``[start, end)``: reads
        of bytes no STORE writes can never race, so LOADs skip tracking them."""
        lo, hi = self.store_hull
        return start < hi and lo < end

    def _locate(self, engine: int, seq: int) -> tuple[int, str]:
        index, insn = self._streams[engine][seq - 1]
        return index, insn.mnemonic

    def _describe_dram(self, lo: int, hi: int) -> str:
        names = [name for start, end, name in self._regions if start <= hi and lo < end]
        where = f" (segment {', '.join(repr(n) for n in names)})" if names else ""
        return f"DRAM bytes {lo:#x}..{hi:#x}{where}"


def _store_hull(cfg: HwConfig, streams: Sequence[Sequence[tuple[int, Insn]]]
                ) -> tuple[int, int]:
    """Smallest byte range ``[lo, hi)`` covering every STORE's destination."""
    lo, hi = 0, 0
    eb = cfg.out_entry_bytes
    for stream in streams:
        for _, insn in stream:
            if isinstance(insn, Store):
                start = insn.dram * eb
                end = start + ((insn.y - 1) * insn.stride + insn.x) * eb
                lo, hi = (start, end) if hi == 0 else (min(lo, start), max(hi, end))
    return lo, hi


def _entry_describer(name: str) -> Callable[[int, int], str]:
    def describe(lo: int, hi: int) -> str:
        return f"{name}[{lo}]" if lo == hi else f"{name}[{lo}..{hi}]"
    return describe


def range_error(acc: Access, code: ErrorCode, field: str, message: str) -> ProgramError:
    """A :class:`ProgramError` naming the instruction of ``acc``, its engine and ``field``."""
    return ProgramError(f"{acc.mnemonic}: {message}", code=code, index=acc.index,
                        engine=ENGINE_NAMES[acc.engine], field=field)


def check_uop_field(acc: Access, values: np.ndarray, begin: int, field: str, buffer: str,
                    depth: int) -> None:
    """Raise ``UOP_RANGE`` if a micro-op ``field`` value is past ``buffer``'s depth.

    Parameters
    ----------
    values : numpy.ndarray
        The field of micro-ops ``begin, begin+1, ...``.
    """
    bad = np.flatnonzero(values >= depth)
    if bad.size:
        u = begin + int(bad[0])
        raise range_error(acc, ErrorCode.UOP_RANGE, field,
                          f"micro-op {u}: {field} = {int(values[bad[0]])} is past the "
                          f"{buffer} depth {depth}")


def check_loop_index(acc: Access, uvals: np.ndarray, begin: int, loops: tuple[int, int],
                     factors: tuple[int, int], names: tuple[str, str, str], buffer: str,
                     depth: int) -> None:
    """Raise ``SRAM_RANGE`` if ``uvals[u] + i*f_out + j*f_in`` reaches ``depth`` for
    some iteration, naming the first offending iteration in loop order.

    Parameters
    ----------
    uvals : numpy.ndarray
        The micro-op field feeding the index, for micro-ops ``begin, ...``.
    loops : tuple[int, int]
        ``(iter_out, iter_in)``.
    factors : tuple[int, int]
        ``(factor_out, factor_in)`` (non-negative).
    names : tuple[str, str, str]
        Field names of the outer factor, inner factor and micro-op field; the error
        names the outer (inner) factor when the outer (inner) loop alone overflows at
        the first offending iteration, else the micro-op field.
    """
    (n_out, n_in), (f_out, f_in) = loops, factors
    umax = int(uvals.max())
    if umax + (n_out - 1) * f_out + (n_in - 1) * f_in < depth:
        return
    # first i with umax + i*f_out + (n_in-1)*f_in >= depth, then first j, then first u
    i = 0 if f_out == 0 else max(0, -(-(depth - umax - (n_in - 1) * f_in) // f_out))
    j = 0 if f_in == 0 else max(0, -(-(depth - umax - i * f_out) // f_in))
    base = i * f_out + j * f_in
    u = int(np.flatnonzero(uvals + base >= depth)[0])
    if j == 0 and i > 0:
        field = names[0]
    elif i == 0 and j > 0:
        field = names[1]
    else:
        field = names[2]
    value = int(uvals[u]) + base
    raise range_error(
        acc, ErrorCode.SRAM_RANGE, field,
        f"{buffer} index {value} = micro-op {begin + u} {names[2]} {int(uvals[u])} + "
        f"{i}×{names[0]} {f_out} + {j}×{names[1]} {f_in} is past the {buffer} depth "
        f"{depth} (iteration i={i}, j={j})")


__all__ = ["ACC_DTYPE", "Machine", "check_loop_index", "check_uop_field", "range_error"]
