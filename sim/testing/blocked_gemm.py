"""Hand-scheduled blocked GEMM with virtual threads: a fixture of the tests and of the
RTL benchmarks (whose cycle counts the timing model is calibrated on), not public API;
users compile GEMMs with :func:`tensorfab.compiler.dense`.

:func:`build_blocked_gemm` emits a complete :class:`~tensorfab.isa.Program` computing
``C[m, n] = A[m, k] @ B[k, n]`` (int8 operands, int32 accumulation, int8 results)
with the standard VTA virtual-thread token discipline, so that with ``vthreads >= 2``
the load engine fills one thread's buffers while the compute engine works on
another's and the store engine drains a third's.

DRAM layouts (all packed, row-major, in the units LOAD and STORE address):

``A``
    ``(m/batch, k/block_in, batch, block_in)`` int8: input entry ``(mb, kb)`` is
    ``A[mb*batch:(mb+1)*batch, kb*block_in:(kb+1)*block_in]``
    (:func:`pack_activations`).
``B``
    ``(n/block_out, k/block_in, block_out, block_in)`` int8: weight entry ``(nb, kb)``
    is the block ``B[kb*block_in:..., nb*block_out:...]`` transposed, so each of its
    ``block_out`` rows is one output channel (:func:`pack_weights`).
``C``
    ``(m/batch, n/block_out, batch, block_out)`` int8, the program's output
    (:func:`unpack_outputs` turns it back into ``(m, n)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import (
    Alu,
    AluOp,
    Buffer,
    Gemm,
    HwConfig,
    Load,
    Program,
    Segment,
    Store,
    Uop,
)
from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.errors import UsageError
from tensorfab.isa.formats import MAX_ITER, MAX_XFER
from tensorfab.isa.layout import pack_nchw, pack_oihw, unpack_nchw

#: Fixed cost of one tile step (instruction issue, DMA latency), in cycles, when
#: ranking tilings.
_STEP_OVERHEAD_CYCLES = 64


# ----------------------------------------------------------------------- packing
def _check_dims(cfg: HwConfig, m: int, n: int, k: int) -> None:
    for name, value, unit, unit_name in (("m", m, cfg.batch, "batch"),
                                         ("n", n, cfg.block_out, "block_out"),
                                         ("k", k, cfg.block_in, "block_in")):
        if not isinstance(value, int | np.integer) or value < 1:
            raise UsageError(f"{name} = {value!r} must be a positive integer")
        if value % unit:
            raise UsageError(f"{name} = {value} is not a multiple of {unit_name} = {unit}")


def pack_activations(cfg: HwConfig, a: np.ndarray) -> np.ndarray:
    """Pack an ``(m, k)`` activation matrix into input entries
    ``(m/batch, k/block_in, batch, block_in)`` (:func:`~tensorfab.isa.layout.pack_nchw`
    of the matrix as ``m × k × 1 × 1``)."""
    a = np.asarray(a)
    m, k = a.shape
    _check_dims(cfg, m, cfg.block_out, k)
    return np.ascontiguousarray(pack_nchw(a[:, :, None, None], cfg.batch, cfg.block_in)[:, :, 0, 0])


def pack_weights(cfg: HwConfig, b: np.ndarray) -> np.ndarray:
    """Pack a ``(k, n)`` weight matrix into weight entries
    ``(n/block_out, k/block_in, block_out, block_in)``, one output channel per row
    (:func:`~tensorfab.isa.layout.pack_oihw` of ``bᵀ`` as ``n × k × 1 × 1``)."""
    b = np.asarray(b)
    k, n = b.shape
    _check_dims(cfg, cfg.batch, n, k)
    return np.ascontiguousarray(
        pack_oihw(b.T[:, :, None, None], cfg.block_out, cfg.block_in)[:, :, 0, 0])


def unpack_outputs(cfg: HwConfig, c: np.ndarray) -> np.ndarray:
    """Turn packed outputs ``(m/batch, n/block_out, batch, block_out)`` into ``(m, n)``."""
    c = np.asarray(c)
    mb, nb, batch, bo = c.shape
    if (batch, bo) != (cfg.batch, cfg.block_out):
        raise UsageError(f"output entries are {batch}x{bo}, the config's are "
                         f"{cfg.batch}x{cfg.block_out}")
    return unpack_nchw(c[:, :, None, None], mb * batch, nb * bo)[:, :, 0, 0]


# ------------------------------------------------------------------------ tiling
@dataclass(frozen=True)
class GemmTiling:
    """Tile shape of a blocked GEMM, in blocks (input rows of ``batch``, output
    channels of ``block_out``, reduction steps of ``block_in``).

    Attributes
    ----------
    tm, tn, tk : int
        Tile extents along m (in ``batch`` rows), n (in ``block_out`` columns) and
        k (in ``block_in`` columns).
    vthreads : int
        Virtual threads; each owns ``1/vthreads`` of the inp, wgt and acc buffers.
    """

    tm: int
    tn: int
    tk: int
    vthreads: int = 1

    def check(self, cfg: HwConfig) -> None:
        """Raise ``ValueError`` if one thread's tile does not fit its buffer slices."""
        v = self.vthreads
        if min(self.tm, self.tn, self.tk, v) < 1:
            raise UsageError(f"{self}: extents and vthreads must be positive")
        ic, wc, ac = cfg.inp_depth // v, cfg.wgt_depth // v, cfg.acc_depth // v
        if self.tm * self.tk > ic:
            raise UsageError(f"{self}: input tile of {self.tm * self.tk} entries exceeds "
                             f"the {ic}-entry slice of inp_depth")
        if self.tn * self.tk > wc:
            raise UsageError(f"{self}: weight tile of {self.tn * self.tk} entries exceeds "
                             f"the {wc}-entry slice of wgt_depth")
        if self.tm * self.tn > ac:
            raise UsageError(f"{self}: accumulator tile of {self.tm * self.tn} entries "
                             f"exceeds the {ac}-entry slice of acc_depth")
        if v * (self.tk + 2) > cfg.uop_depth:
            raise UsageError(f"{self}: {v * (self.tk + 2)} micro-ops exceed uop_depth")
        if max(self.tm, self.tn) > MAX_ITER:
            raise UsageError(f"{self}: tile extent exceeds the loop field ({MAX_ITER})")


def _tile_candidates(extent: int, limit: int) -> list[int]:
    """Balanced tile sizes ``ceil(extent/q)`` not above ``limit``."""
    return sorted({-(-extent // q) for q in range(1, extent + 1)} & set(range(1, limit + 1)))


def choose_tiling(cfg: HwConfig, m: int, n: int, k: int, vthreads: int = 1) -> GemmTiling:
    """Tile shape minimising estimated cycles (then tile steps) for ``vthreads`` threads.

    Each thread gets ``1/vthreads`` of the inp, wgt and acc buffers; ``tk`` is the
    largest reduction tile the slices allow, balanced over the k-tiles. A step (one
    k-tile of one output tile) costs its GEMM micro-ops (one per cycle) and its input
    and weight loads (bytes over the memory bus), overlapped when ``vthreads >= 2``
    (the maximum of the two) and added otherwise, plus a fixed per-step overhead.
    Among equal estimates the tiling with fewer (hence larger) steps wins, which also
    keeps instructions large for the simulators. Tilings with fewer output tiles than
    threads are ranked last.

    Raises
    ------
    ValueError
        A dimension is not a multiple of its block, or no tile fits.
    """
    _check_dims(cfg, m, n, k)
    if vthreads < 1:
        raise UsageError(f"vthreads = {vthreads} must be at least 1")
    M, N, K = m // cfg.batch, n // cfg.block_out, k // cfg.block_in
    v = vthreads
    ic, wc, ac = cfg.inp_depth // v, cfg.wgt_depth // v, cfg.acc_depth // v
    uop_tk = cfg.uop_depth // v - 2
    if min(ic, wc, ac, uop_tk) < 1:
        raise UsageError(f"vthreads = {vthreads}: the buffers cannot be split that many ways")
    bus = cfg.mem_bus_bytes
    best: tuple[tuple[int, int, int], GemmTiling] | None = None
    for tm in _tile_candidates(M, min(ic, ac, MAX_ITER)):
        for tn in _tile_candidates(N, min(wc, ac // tm, MAX_ITER)):
            tk_max = min(K, ic // tm, wc // tn, uop_tk)
            if tk_max < 1:
                continue
            nk = -(-K // tk_max)
            tk = -(-K // nk)
            nm, nn = -(-M // tm), -(-N // tn)
            steps = nm * nn * nk
            load = -(-(tm * tk * cfg.inp_entry_bytes + tn * tk * cfg.wgt_entry_bytes)
                     // bus)
            compute = tm * tn * tk
            per_step = max(load, compute) if v > 1 else load + compute
            cycles = steps * (per_step + _STEP_OVERHEAD_CYCLES)
            key = (int(nm * nn < v), cycles, steps)
            if best is None or key < best[0]:
                best = (key, GemmTiling(tm, tn, tk, v))
    if best is None:
        raise UsageError(f"no tile of a {m}x{n}x{k} GEMM fits the {cfg.name} buffers "
                         f"with {vthreads} virtual threads")
    return best[1]


def _splits(extent: int, tile: int) -> list[tuple[int, int]]:
    return [(s, min(tile, extent - s)) for s in range(0, extent, tile)]


# -------------------------------------------------------------------- the program
def build_blocked_gemm(cfg: HwConfig, m: int, n: int, k: int, *, vthreads: int = 1,
                       a: np.ndarray | None = None, b: np.ndarray | None = None,
                       rng: np.random.Generator | None = None,
                       epilogue: Sequence[tuple[AluOp, int]] | None = None,
                       tiling: GemmTiling | None = None) -> Program:
    """Program computing ``C = A @ B`` in blocked tiles with virtual threads.

    Output tiles are dealt round-robin to ``vthreads`` virtual threads, each owning a
    slice of the inp, wgt and acc buffers and its own micro-op kernels (loaded once at
    the start). Per output tile and k-tile the load engine fills the thread's inp and
    wgt slices; the compute engine resets the tile's accumulators (first k-tile) and
    runs one GEMM (micro-ops over the k-tile, ``iter_out`` over tile rows, ``iter_in``
    over tile output blocks); after the last k-tile it runs the ALU ``epilogue`` and
    the store engine writes the tile to ``C``. Tokens: a load pops ``c2l`` when its slice
    was used before and its last LOAD pushes ``l2c``; compute pops ``l2c`` at the first
    GEMM of a step, pushes ``c2l`` after the last GEMM of a step whose slice is used
    again, pops ``s2c`` before resetting a reused acc slice and pushes ``c2s`` after a
    tile's last instruction; a store pops ``c2s`` and pushes ``s2c`` when its acc slice
    is used again. Every token pushed is popped; no queue holds more than ``vthreads``.

    Parameters
    ----------
    cfg : HwConfig
        Target configuration.
    m, n, k : int
        Problem size; multiples of ``batch``, ``block_out`` and ``block_in``.
    vthreads : int
        Virtual threads (at least 1, at most ``dep_queue_depth``).
    a, b : numpy.ndarray | None
        ``(m, k)`` and ``(k, n)`` int8 operands; random int8 from ``rng`` when omitted.
    rng : numpy.random.Generator | None
        Source of random operands (default: ``numpy.random.default_rng(0)``).
    epilogue : sequence of (AluOp, int) | None
        ALU operations with immediates applied to each finished accumulator tile
        before it is stored, e.g. ``[(AluOp.SHR, 8), (AluOp.CLIP, 127)]``. Without it
        results are the int32 sums' low bytes.
    tiling : GemmTiling | None
        Tile shape to use instead of :func:`choose_tiling`'s (its ``vthreads`` must
        equal ``vthreads``).

    Returns
    -------
    Program
        Segments ``A`` and ``B`` (packed inputs) and ``C`` (packed int8 output,
        ``output=True``).

    Raises
    ------
    ValueError
        A dimension is not a multiple of its block (the message names it), operands
        of the wrong shape or range, or a tiling that does not fit.
    ProgramError
        An epilogue immediate the ALU rejects (e.g. a shift outside 0..31).
    """
    _check_dims(cfg, m, n, k)
    if not 1 <= vthreads <= cfg.dep_queue_depth:
        raise UsageError(f"vthreads = {vthreads} must be between 1 and dep_queue_depth = "
                         f"{cfg.dep_queue_depth}")
    rng = rng if rng is not None else np.random.default_rng(0)
    if a is None:
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    if b is None:
        b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    for name, arr, shape in (("a", a, (m, k)), ("b", b, (k, n))):
        arr = np.asarray(arr)
        if arr.shape != shape:
            raise UsageError(f"{name} has shape {arr.shape}, expected {shape}")
        if arr.size and (arr.min() < -128 or arr.max() > 127):
            raise UsageError(f"{name} has values outside the int8 range")
    M, N, K = m // cfg.batch, n // cfg.block_out, k // cfg.block_in
    for name, value in (("k/block_in", K), ("n/block_out", N)):
        if value > MAX_XFER:
            raise UsageError(f"{name} = {value} exceeds the {MAX_XFER} DRAM stride field")
    if tiling is None:
        tiling = choose_tiling(cfg, m, n, k, vthreads)
    elif tiling.vthreads != vthreads:
        raise UsageError(f"tiling.vthreads = {tiling.vthreads} but vthreads = {vthreads}")
    tiling.check(cfg)
    epilogue = list(epilogue or [])

    bld = ProgramBuilder(cfg)
    bld.add_segment(Segment("A", "int8", (M, K, cfg.batch, cfg.block_in),
                            pack_activations(cfg, np.asarray(a))))
    bld.add_segment(Segment("B", "int8", (N, K, cfg.block_out, cfg.block_in),
                            pack_weights(cfg, np.asarray(b))))
    bld.add_segment(Segment("C", "int8", (M, N, cfg.batch, cfg.block_out), output=True))

    V = vthreads
    ic, wc, ac = cfg.inp_depth // V, cfg.wgt_depth // V, cfg.acc_depth // V
    gemm_uops, reset_uop, alu_uop = [], [], []
    for v in range(V):
        ib, wb, ab = v * ic, v * wc, v * ac
        gemm_uops.append(bld.add_uops([Uop(acc=ab, src=ib + kb, wgt=wb + kb)
                                       for kb in range(tiling.tk)])[0])
        reset_uop.append(bld.add_uops([Uop(acc=ab, src=0, wgt=0)])[0])
        alu_uop.append(bld.add_uops([Uop(acc=ab, src=ab, wgt=0)])[0])
    bld.load_uops()

    tiles = [(mt, nt) for mt in _splits(M, tiling.tm) for nt in _splits(N, tiling.tn)]
    ktiles = _splits(K, tiling.tk)
    n_tiles = len(tiles)

    def f(factor: int, extent: int) -> int:
        # A loop factor only matters when its loop runs more than once.
        return factor if extent > 1 else 0

    # Steps in program order: (tile index, thread, k-tile index).
    steps: list[tuple[int, int, int]] = []
    for g in range(0, n_tiles, V):
        for kt in range(len(ktiles)):
            for o in range(g, min(g + V, n_tiles)):
                steps.append((o, o - g, kt))
    last_step_of_thread: dict[int, int] = {}
    prev_use: list[int | None] = []
    for s, (_, v, _) in enumerate(steps):
        prev_use.append(last_step_of_thread.get(v))
        last_step_of_thread[v] = s
    has_next_use = [False] * len(steps)
    for p in prev_use:
        if p is not None:
            has_next_use[p] = True
    # FIFO pairing of c2l tokens: the j-th push must free the slot of the j-th pop.
    pushes = [s for s in range(len(steps)) if has_next_use[s]]
    pops = [p for p in prev_use if p is not None]
    assert pushes == pops, "non-monotone slot reuse breaks the c2l token FIFO"

    for s, (o, v, kt) in enumerate(steps):
        (m0, tmc), (n0, tnc) = tiles[o]
        k0, tkc = ktiles[kt]
        # Load engine: the thread's input and weight slices.
        bld.emit(Load(buffer=Buffer.INP, sram=v * ic, dram=m0 * K + k0, y=tmc, x=tkc,
                      stride=K, pop_next=prev_use[s] is not None), segment="A")
        bld.emit(Load(buffer=Buffer.WGT, sram=v * wc, dram=n0 * K + k0, y=tnc, x=tkc,
                      stride=K, push_next=True), segment="B")
        # Compute engine.
        first = True
        if kt == 0:
            bld.emit(Gemm(reset=True, uop_begin=reset_uop[v], uop_end=reset_uop[v] + 1,
                          iter_out=tmc, iter_in=tnc, acc_factor_out=f(tnc, tmc),
                          acc_factor_in=f(1, tnc), pop_prev=True, pop_next=o >= V))
            first = False
        last_k = kt == len(ktiles) - 1
        gi = bld.emit(Gemm(uop_begin=gemm_uops[v], uop_end=gemm_uops[v] + tkc,
                           iter_out=tmc, iter_in=tnc,
                           acc_factor_out=f(tnc, tmc), acc_factor_in=f(1, tnc),
                           inp_factor_out=f(tkc, tmc), inp_factor_in=0,
                           wgt_factor_out=0, wgt_factor_in=f(tkc, tnc),
                           pop_prev=first, push_prev=has_next_use[s],
                           push_next=last_k and not epilogue))
        if not last_k:
            continue
        for i, (op, imm) in enumerate(epilogue):
            bld.emit(Alu(op=AluOp(op), use_imm=True, imm=int(imm), uop_begin=alu_uop[v],
                         uop_end=alu_uop[v] + 1, iter_out=tmc, iter_in=tnc,
                         dst_factor_out=f(tnc, tmc), dst_factor_in=f(1, tnc),
                         src_factor_out=f(tnc, tmc), src_factor_in=f(1, tnc),
                         push_next=i == len(epilogue) - 1))
        assert epilogue or bld.insn(gi).push_next
        # Store engine.
        bld.emit(Store(sram=v * ac, dram=m0 * N + n0, y=tmc, x=tnc, stride=N,
                       pop_prev=True, push_prev=o + V < n_tiles), segment="C")
    return bld.build()


def gemm_stats(cfg: HwConfig, m: int, n: int, k: int) -> dict[str, int]:
    """Useful work of an ``m × n × k`` GEMM: ``macs`` and the micro-op count at
    ``batch × block_in × block_out`` MACs per micro-op (``gemm_uops``)."""
    _check_dims(cfg, m, n, k)
    macs = m * n * k
    return {"macs": macs, "gemm_uops": macs // cfg.peak_macs_per_cycle}


__all__ = [
    "GemmTiling",
    "ProgramBuilder",
    "build_blocked_gemm",
    "choose_tiling",
    "gemm_stats",
    "pack_activations",
    "pack_weights",
    "unpack_outputs",
]
