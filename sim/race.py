"""Race detection with vector clocks.

Every engine keeps a vector clock (one sequence number per engine). Executing its
``n``-th instruction sets its own component to ``n``; a token carries the pusher's
clock and popping it merges (element-wise max) into the popper's clock. An access
by engine ``E`` is ordered after an earlier access by engine ``W != E`` at sequence
number ``s`` iff ``s <= clock_E[W]``.

A :class:`Tracker` covers one buffer (per entry) or DRAM (per byte): last writer
``(engine, seq)`` and the last read sequence number of every engine, all numpy
arrays updated through :class:`Sel` selections so checks stay vectorized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tensorfab.isa import Engine

from .errors import RaceError

#: A sequence number larger than any.
INF = np.iinfo(np.int64).max
ENGINE_NAMES = tuple(e.name.lower() for e in Engine)


# ------------------------------------------------------------------------- selections
class Sel:
    """A selection of elements of a 1-D array: read, write, and name selected elements."""

    def get(self, arr: np.ndarray) -> np.ndarray:
        """The selected elements (a view or a copy)."""
        raise NotImplementedError

    def set(self, arr: np.ndarray, value: object) -> None:
        """Assign ``value`` to the selected elements, in selection order."""
        raise NotImplementedError

    def addresses(self, mask: np.ndarray) -> np.ndarray:
        """Element addresses of the positions where ``mask`` (shaped like :meth:`get`)
        is true."""
        raise NotImplementedError


@dataclass(frozen=True)
class Span(Sel):
    """Elements ``start .. stop-1``."""

    start: int
    stop: int

    def get(self, arr: np.ndarray) -> np.ndarray:
        return arr[self.start: self.stop]

    def set(self, arr: np.ndarray, value: object) -> None:
        arr[self.start: self.stop] = value

    def addresses(self, mask: np.ndarray) -> np.ndarray:
        return self.start + np.flatnonzero(mask)


@dataclass(frozen=True)
class Gather(Sel):
    """Elements at an array of indices (any shape, repeats allowed)."""

    index: np.ndarray

    def get(self, arr: np.ndarray) -> np.ndarray:
        return arr[self.index]

    def set(self, arr: np.ndarray, value: object) -> None:
        arr[self.index] = value

    def addresses(self, mask: np.ndarray) -> np.ndarray:
        return np.asarray(self.index)[mask].ravel()


@dataclass(frozen=True)
class Block(Sel):
    """A 2-D block: ``rows`` rows of ``width`` elements, ``pitch`` elements apart,
    starting at ``start`` (rows may overlap when ``pitch < width``)."""

    start: int
    rows: int
    width: int
    pitch: int

    def get(self, arr: np.ndarray) -> np.ndarray:
        base = arr[self.start:]
        step = base.strides[0]
        return as_strided(base, shape=(self.rows, self.width),
                          strides=(self.pitch * step, step), writeable=False)

    def set(self, arr: np.ndarray, value: object) -> None:
        if self.rows == 1 or self.pitch >= self.width:
            base = arr[self.start:]
            step = base.strides[0]
            view = as_strided(base, shape=(self.rows, self.width),
                              strides=(self.pitch * step, step))
            view[...] = value
            return
        val = np.broadcast_to(np.asarray(value), (self.rows, self.width))
        for r in range(self.rows):  # overlapping rows: later rows win
            lo = self.start + r * self.pitch
            arr[lo: lo + self.width] = val[r]

    def addresses(self, mask: np.ndarray) -> np.ndarray:
        r, c = np.nonzero(mask)
        return self.start + r * self.pitch + c


# ----------------------------------------------------------------------- zeroed arrays
class ZeroedArrays:
    """Zero-filled 1-D arrays kept across runs, so that a run's trackers do not allocate
    their arrays again: allocating tens of MB of zeros for a resident model's DRAM
    tracker costs milliseconds per program once the allocator stops mapping fresh pages
    for them (glibc raises its mmap threshold after such blocks are freed, and
    ``calloc`` then clears them). A :class:`Tracker` takes its arrays here and gives
    them back zeroed again (:meth:`Tracker.release`), clearing only what it set.

    Parameters
    ----------
    sizes : int
        Array sizes kept (the oldest size's arrays are dropped past this).
    per_size : int
        Arrays kept per size and dtype.
    """

    def __init__(self, sizes: int = 4, per_size: int = 8) -> None:
        self.sizes = sizes
        self.per_size = per_size
        self._free: dict[tuple[int, str], list[np.ndarray]] = {}

    def take(self, size: int, dtype: type) -> np.ndarray:
        """A zeroed array of ``size`` elements of ``dtype`` (kept or new)."""
        free = self._free.get((size, np.dtype(dtype).str))
        if free:
            try:
                return free.pop()
            except IndexError:  # another thread took the last one
                pass
        return np.zeros(size, dtype=dtype)

    def give(self, arr: np.ndarray) -> None:
        """Keep ``arr``, which the caller has zeroed again."""
        if self.sizes <= 0 or self.per_size <= 0:
            return
        key = (arr.size, arr.dtype.str)
        free = self._free.get(key)
        if free is None:
            sizes = {k[0] for k in self._free}
            if key[0] not in sizes and len(sizes) >= self.sizes:
                oldest = next(iter(self._free))[0]
                for k in [k for k in self._free if k[0] == oldest]:
                    del self._free[k]
            free = self._free.setdefault(key, [])
        if len(free) < self.per_size:
            free.append(arr)


# --------------------------------------------------------------------------- context
@dataclass(frozen=True)
class Access:
    """The instruction performing an access.

    Attributes
    ----------
    index : int
        Instruction index in the program.
    engine : int
        Engine number (0 load, 1 compute, 2 store).
    seq : int
        1-based sequence number of the instruction within its engine.
    mnemonic : str
        Its mnemonic.
    clock : numpy.ndarray
        Four int64: the engine's vector clock with its own component and the
        "nobody" slot set to :data:`INF`.
    """

    index: int
    engine: int
    seq: int
    mnemonic: str
    clock: np.ndarray


def access_clock(engine: int, clock: Sequence[int]) -> np.ndarray:
    """The comparison clock of :class:`Access` for ``engine`` with vector ``clock``."""
    c = np.array([*clock, INF], dtype=np.int64)
    c[engine] = INF
    return c


class Tracker:
    """Last writer and last readers of every element of one resource.

    Parameters
    ----------
    resource : str
        Name used in messages (``inp``, ``dram``...).
    size : int
        Number of elements (entries, or bytes for DRAM).
    locate : Callable[[int, int], tuple[int, str]]
        Maps an engine number and a sequence number to the program index and
        mnemonic of that instruction, for messages.
    describe : Callable[[int, int], str]
        Renders an element range for messages, e.g. ``inp[0..15]``.
    arrays : ZeroedArrays, optional
        Where the tracker takes its arrays (and gives them back on :meth:`release`);
        default: new arrays of its own.
    """

    def __init__(self, resource: str, size: int,
                 locate: Callable[[int, int], tuple[int, str]],
                 describe: Callable[[int, int], str],
                 arrays: ZeroedArrays | None = None) -> None:
        self.resource = resource
        self.size = size
        self._locate = locate
        self._describe = describe
        self._arrays = arrays if arrays is not None else ZeroedArrays(0, 0)
        self._w_eng: np.ndarray | None = None
        self._w_seq: np.ndarray | None = None
        self._writers: set[int] = set()
        self._r_seq: list[np.ndarray | None] = [None, None, None]
        # what was set, per array: cleared again on release
        self._read_sels: list[list[Sel]] = [[], [], []]
        self._write_sels: list[Sel] = []

    def release(self) -> None:
        """Zero what this tracker set and give its arrays back to its
        :class:`ZeroedArrays`; the tracker is empty afterwards."""
        for engine, r in enumerate(self._r_seq):
            if r is not None:
                for sel in self._read_sels[engine]:
                    sel.set(r, 0)
                self._arrays.give(r)
        for arr in (self._w_eng, self._w_seq):
            if arr is not None:
                for sel in self._write_sels:
                    sel.set(arr, 0)
                self._arrays.give(arr)
        self._w_eng = self._w_seq = None
        self._writers = set()
        self._r_seq = [None, None, None]
        self._read_sels = [[], [], []]
        self._write_sels = []

    def read(self, acc: Access, sel: Sel) -> None:
        """Record a read; raise :class:`RaceError` if an unordered write precedes it."""
        if self._w_eng is not None and self._writers - {acc.engine}:
            assert self._w_seq is not None
            eng = sel.get(self._w_eng)
            seq = sel.get(self._w_seq)
            bad = seq > acc.clock[eng]
            if bad.any():
                self._raise(acc, "reads", "written by", "RAW", sel, bad, eng, seq)
        r = self._r_seq[acc.engine]
        if r is None:
            r = self._r_seq[acc.engine] = self._arrays.take(self.size, np.int32)
        self._read_sels[acc.engine].append(sel)
        sel.set(r, acc.seq)

    def write(self, acc: Access, sel: Sel) -> None:
        """Record a write; raise :class:`RaceError` if an earlier write or read by
        another engine is not ordered before it."""
        if self._w_eng is not None and self._writers - {acc.engine}:
            assert self._w_seq is not None
            eng = sel.get(self._w_eng)
            seq = sel.get(self._w_seq)
            bad = seq > acc.clock[eng]
            if bad.any():
                self._raise(acc, "writes", "written by", "WAW", sel, bad, eng, seq)
        for other, r in enumerate(self._r_seq):
            if r is None or other == acc.engine:
                continue
            seq = sel.get(r)
            bad = seq > acc.clock[other]
            if bad.any():
                eng = np.full(seq.shape, other, dtype=np.uint8)
                self._raise(acc, "writes", "read by", "WAR", sel, bad, eng, seq)
        if self._w_eng is None:
            # an unwritten entry's sequence number 0 is never past any clock, so its
            # engine is never read
            self._w_eng = self._arrays.take(self.size, np.uint8)
            self._w_seq = self._arrays.take(self.size, np.int32)
        assert self._w_seq is not None
        self._writers.add(acc.engine)
        self._write_sels.append(sel)
        sel.set(self._w_eng, acc.engine)
        sel.set(self._w_seq, acc.seq)

    def _raise(self, acc: Access, verb: str, relation: str, kind: str, sel: Sel,
               bad: np.ndarray, eng: np.ndarray, seq: np.ndarray) -> None:
        bad = np.asarray(bad)
        eng = np.asarray(eng)
        seq = np.asarray(seq)
        pos = tuple(int(p[0]) for p in np.nonzero(bad))
        o_eng, o_seq = int(eng[pos]), int(seq[pos])
        same = bad & (eng == o_eng) & (seq == o_seq)
        addrs = sel.addresses(same)
        lo, hi = int(addrs.min()), int(addrs.max())
        o_index, o_mnem = self._locate(o_eng, o_seq)
        me, other = ENGINE_NAMES[acc.engine], ENGINE_NAMES[o_eng]
        raise RaceError(
            f"{me} instruction {acc.index} ({acc.mnemonic}) {verb} {self._describe(lo, hi)} "
            f"{relation} {other} instruction {o_index} ({o_mnem}) with no token ordering them",
            resource=self.resource, kind=kind, lo=lo, hi=hi, index=acc.index, engine=me,
            other_index=o_index, other_engine=other)


__all__ = ["INF", "Access", "Block", "Gather", "Sel", "Span", "Tracker", "ZeroedArrays",
           "access_clock"]
