"""Fused epilogues: what happens to an accumulator tile between the GEMM and the STORE."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import AluOp, HwConfig
from tensorfab.isa.formats import IMM_MAX as _IMM_MAX
from tensorfab.isa.formats import IMM_MIN as _IMM_MIN
from tensorfab.isa.formats import (
    REQUANT_RECORD_WORDS,
    alu_requant_supported,
    requant_supported,
)
from tensorfab.isa.requant_record import pack_requant_acc_records, pack_requant_records

from .errors import CompileError
from .quantize import MAX_MULTIPLIER, MAX_SHIFT
from .requant import MAX_EXPONENT, MIN_EXPONENT, ROUNDINGS, quantize_multipliers

#: Where a one-pass epilogue's REQUANT runs: ``"store"`` (the tile's STOREs requantize,
#: records in the accumulator buffer) or ``"alu"`` (an ALU REQUANT before the STOREs,
#: records in the weight buffer).
REQUANT_STAGES = ("store", "alu")


def check_requant_stage(stage: str, what: str = "") -> None:
    """Raise :class:`CompileError` (about ``what``, if given) unless ``stage`` is one of
    :data:`REQUANT_STAGES`."""
    if stage not in REQUANT_STAGES:
        raise CompileError(f"{what}{': ' if what else ''}requant_stage {stage!r} is neither "
                           f"{REQUANT_STAGES[0]!r} nor {REQUANT_STAGES[1]!r}")


@dataclass(frozen=True)
class Epilogue:
    """A fused epilogue, applied in this order to every int32 accumulator ``a``:

    1. ``bias``: ``a = bias + Σ x·w`` (the bias is loaded into the accumulators and
       moved into the tile before the first GEMM);
    2. requantization, one of
       - ``requant = (mult, shift)`` (the cheaper 16-bit path):
         ``a = SHR_RND(a · mult, shift)`` (see :mod:`.quantize`);
       - ``multiplier`` and ``shift`` per output channel (exact, TFLite's
         ``MultiplyByQuantizedMultiplier``, see :mod:`.requant`):
         ``a = SHR_RND(MULHI(SHL(a, max(e, 0)), M), max(-e, 0))`` with vector operands
         (``rounding="double"``, TFLite bit for bit), or, with ``rounding="single"``,
         one REQUANT that adds the bias, multiplies by ``M`` and rounds the exact
         product once by ``31 - e`` bits, adds the zero point and clamps (steps 1 to 5
         at once, see :attr:`requant_stage`);
    3. ``zero_point``: ``a = a + zero_point`` (the output's zero point);
    4. ``relu``: ``a = max(a, zero_point)``;
    5. ``clip = (lo, hi)``: ``a = min(max(a, lo), hi)``; with requantization and no
       ``clip``, ``a`` is saturated to int8 (``clip = (-128, 127)``).

    With ``residual`` (one pass only), a residual int8 tile ``r`` of the output's shape
    enters the accumulators before the convolution: ``a = r · residual[c] + Σ x·w``
    (the tile loaded into the input buffer, moved in by a GEMM with an identity weight
    entry, multiplied by the per-channel factor), so REQUANT rounds the sum of both
    once (a residual add fused into the convolution's program).

    The STORE then keeps the low byte of ``a``: without requantization or ``clip``
    int32 values wrap. A one-pass epilogue in the STOREs (:attr:`requant_stage`
    ``"store"``) does steps 1 to 5 in the STOREs themselves.

    Attributes
    ----------
    bias : bool
        Add a per-output-channel int32 bias.
    requant : tuple[int, int] | None
        ``(mult, shift)`` with ``0 <= mult <= 32767`` and ``0 <= shift <= 31``.
    relu : bool
        Apply ReLU after requantization.
    clip : tuple[int, int] | None
        Inclusive bounds, 16-bit signed, ``lo <= hi``.
    multiplier : tuple[int, ...] | None
        Per output channel Q31 multipliers in ``[0, 2^31)`` (numpy arrays are
        accepted and stored as tuples); see :func:`.requant.quantize_multiplier_q31`.
    shift : tuple[int, ...] | None
        Per output channel exponents in ``-31..30`` (TFLite's convention: the scale is
        ``multiplier · 2^(shift - 31)``); required with ``multiplier``.
    zero_point : int
        Output zero point, -128..127.
    headroom : int
        Bits the accumulators leave unused (``|a| < 2^(31 - headroom)``). A channel
        with a right shift ``r`` shifts ``a`` left by ``k = min(headroom, 31 - r)``
        before MULHI and right by ``r + k`` after it, so MULHI's rounding falls ``k``
        bits further below the result's and the result is closer to
        ``round(a · scale)``; 0 (the default) is TFLite's arithmetic bit for bit.
    rounding : str
        ``"double"`` (TFLite: MULHI rounds, then the right shift rounds again) or
        ``"single"`` (REQUANT: one rounding of the exact product, closer to float,
        in the STOREs or one ALU pass instead of four to six ALU passes; needs a config
        whose weight rows hold a record, :func:`~tensorfab.isa.formats.requant_supported`).
    requant_stage : str
        Where the one-pass REQUANT runs (``rounding="single"`` only): ``"store"`` (the
        default: the tile's STOREs requantize, one STORE per block of output channels,
        with the records in three accumulator entries per block at the top of the
        accumulator buffer, :meth:`acc_record_entries`) or ``"alu"`` (one ALU REQUANT
        pass over the tile before its STOREs, with the records in one weight entry per
        block at the top of the weight buffer, :meth:`record_entries`).
    residual : tuple[int, ...] | None
        Per output channel int32 factors of a fused residual (see above; needs
        ``rounding="single"``); the program gets an int8 input segment ``res`` of the
        output's shape.

    Every integer field (the scalars, the pairs' and the tuples' elements) takes an
    integer or a whole float (``3.0`` is 3) and is stored as an ``int``; a fraction, a
    NaN, a bool or a string is a :class:`CompileError` naming the field
    (``zero_point 2.5 is not an integer``), never truncated.
    """

    bias: bool = False
    requant: tuple[int, int] | None = None
    relu: bool = False
    clip: tuple[int, int] | None = None
    multiplier: tuple[int, ...] | None = None
    shift: tuple[int, ...] | None = None
    zero_point: int = 0
    headroom: int = 0
    rounding: str = "double"
    residual: tuple[int, ...] | None = None
    requant_stage: str = "store"

    def __post_init__(self) -> None:
        for name in ("zero_point", "headroom"):
            object.__setattr__(self, name, _whole(name, getattr(self, name)))
        for name in ("requant", "clip", "multiplier", "shift", "residual"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, tuple(
                    _whole(f"{name}[{i}]", x) for i, x in enumerate(np.asarray(v).reshape(-1))))
        self._check_per_channel()
        if self.requant is not None:
            mult, shift = self.requant
            if not 0 <= mult <= MAX_MULTIPLIER:
                raise CompileError(f"requant multiplier {mult} outside 0..{MAX_MULTIPLIER}")
            if not 0 <= shift <= MAX_SHIFT:
                raise CompileError(f"requant shift {shift} outside 0..{MAX_SHIFT}")
        if self.clip is not None:
            lo, hi = self.clip
            if not _IMM_MIN <= lo <= hi <= _IMM_MAX:
                raise CompileError(f"clip bounds {self.clip} must satisfy {_IMM_MIN} <= lo <= "
                                 f"hi <= {_IMM_MAX}")

    def _check_per_channel(self) -> None:
        if (self.multiplier is None) != (self.shift is None):
            raise CompileError("a per-channel epilogue needs both multiplier and shift")
        if not -128 <= self.zero_point <= 127:
            raise CompileError(f"zero_point {self.zero_point} outside -128..127")
        if not 0 <= self.headroom <= 31:
            raise CompileError(f"headroom {self.headroom} outside 0..31")
        if self.rounding not in ROUNDINGS:
            raise CompileError(f"rounding {self.rounding!r} is neither {ROUNDINGS[0]!r} nor "
                               f"{ROUNDINGS[1]!r}")
        check_requant_stage(self.requant_stage)
        if self.rounding == "single":
            if self.multiplier is None:
                raise CompileError("rounding='single' needs per-channel multiplier and shift")
            if self.headroom:
                raise CompileError("headroom only applies to rounding='double' (single "
                                   "rounding needs none)")
        if self.residual is not None:
            if self.rounding != "single" or self.multiplier is None:
                raise CompileError("a residual epilogue needs rounding='single' with "
                                   "per-channel multiplier and shift")
            if len(self.residual) != len(self.multiplier):
                raise CompileError(f"{len(self.residual)} residual factors for "
                                   f"{len(self.multiplier)} channels")
            if any(not -(1 << 31) <= k < 1 << 31 for k in self.residual):
                raise CompileError("residual factors must be int32")
        if self.multiplier is None or self.shift is None:
            return
        if self.requant is not None:
            raise CompileError("requant and per-channel multiplier/shift are exclusive")
        if len(self.multiplier) != len(self.shift) or not self.multiplier:
            raise CompileError(f"{len(self.multiplier)} multipliers and {len(self.shift)} "
                             "shifts: one of each per output channel")
        for c, (m, e) in enumerate(zip(self.multiplier, self.shift, strict=True)):
            if not 0 <= m < 1 << 31:
                raise CompileError(f"channel {c}: multiplier {m} outside 0..2^31-1")
            if not MIN_EXPONENT <= e <= MAX_EXPONENT:
                raise CompileError(f"channel {c}: shift {e} outside "
                                 f"{MIN_EXPONENT}..{MAX_EXPONENT}")

    @classmethod
    def from_scales(cls, real_scales: np.ndarray, *, zero_point: int = 0, relu: bool = False,
                    bias: bool = False, acc_bound: int | None = None,
                    rounding: str = "double", requant_stage: str = "store") -> Epilogue:
        """Exact per-channel requantization from real scales (TFLite's
        ``QuantizeMultiplier`` per channel, :func:`.requant.quantize_multipliers`).

        Parameters
        ----------
        real_scales : numpy.ndarray
            ``(O,)`` scales ``input_scale · weight_scale[c] / output_scale``.
        zero_point : int
            Output zero point.
        relu, bias : bool
            As the attributes.
        acc_bound : int | None
            The largest accumulator magnitude (:func:`.quantize.accumulator_bound`):
            sets :attr:`headroom` to the bits it leaves free. ``None``: no headroom,
            TFLite's arithmetic exactly. Ignored with ``rounding="single"``.
        rounding, requant_stage : str
            As the attributes.
        """
        mult, exp = quantize_multipliers(np.asarray(real_scales).reshape(-1))
        headroom = 0 if acc_bound is None or rounding == "single" \
            else max(0, 31 - int(acc_bound).bit_length())
        return cls(bias=bias, relu=relu, multiplier=tuple(int(m) for m in mult),
                   shift=tuple(int(e) for e in exp), zero_point=zero_point,
                   headroom=headroom, rounding=rounding, requant_stage=requant_stage)

    @property
    def per_channel(self) -> bool:
        """Exact per-channel requantization (``multiplier`` and ``shift``)."""
        return self.multiplier is not None

    @property
    def one_pass(self) -> bool:
        """The whole epilogue is one REQUANT instruction (``rounding="single"``)."""
        return self.rounding == "single" and self.per_channel

    @property
    def store_requant(self) -> bool:
        """The one-pass REQUANT runs in the tile's STOREs (:attr:`requant_stage`)."""
        return self.one_pass and self.requant_stage == "store"

    def check_config(self, cfg: HwConfig) -> None:
        """Raise :class:`CompileError` if ``cfg`` cannot run this epilogue."""
        if not self.store_requant and not cfg.vector_alu:
            raise CompileError(f"config {cfg.name!r} has no vector ALU: its only epilogue "
                               "is the STOREs' REQUANT (rounding='single', "
                               "requant_stage='store')")
        if self.store_requant and not requant_supported(cfg):
            raise CompileError(f"config {cfg.name!r} has no REQUANT in its STOREs (a "
                               f"weight row of {cfg.block_in} bytes cannot hold a record); "
                               "use rounding='double'")
        if self.one_pass and not self.store_requant and not alu_requant_supported(cfg):
            raise CompileError(f"config {cfg.name!r} has no REQUANT in its ALU (a weight "
                               f"row of {cfg.block_in} bytes cannot hold a record); use "
                               "rounding='double' or requant_stage='store'")

    def record_entries(self, cfg: HwConfig, out_channels: int, groups: int = 1) -> int:
        """Weight-buffer entries reserved for the one-pass epilogue (0 unless
        :attr:`one_pass`): one REQUANT record per block of output channels when the ALU
        requantizes, and a residual's identity entry."""
        if not self.one_pass:
            return 0
        blocks = 0 if self.store_requant else groups * -(-out_channels // cfg.block_out)
        return blocks + int(self.residual is not None)

    def acc_record_entries(self, cfg: HwConfig, out_channels: int, groups: int = 1) -> int:
        """Accumulator entries of a requantizing STORE's records (0 unless
        :attr:`store_requant`): three per block of output channels."""
        if not self.store_requant:
            return 0
        return REQUANT_RECORD_WORDS * groups * -(-out_channels // cfg.block_out)

    def records(self, cfg: HwConfig, bias: np.ndarray | None) -> np.ndarray:
        """REQUANT's records, one per output channel (:mod:`tensorfab.isa.requant_record`):
        int8 ``(ceil(O / block_out), block_out, block_in)``, the weight entries the ALU's
        REQUANT reads.

        Parameters
        ----------
        bias : numpy.ndarray | None
            ``(O,)`` int32 bias (with :attr:`bias`), else zeros.
        """
        return pack_requant_records(cfg, **self._record_fields(bias))

    def acc_records(self, cfg: HwConfig, bias: np.ndarray | None) -> np.ndarray:
        """The records of :meth:`records` as a requantizing STORE reads them: int32
        ``(3 · ceil(O / block_out), batch, block_out)`` accumulator entries
        (:func:`~tensorfab.isa.requant_record.pack_requant_acc_records`).

        Parameters
        ----------
        bias : numpy.ndarray | None
            ``(O,)`` int32 bias (with :attr:`bias`), else zeros.
        """
        return pack_requant_acc_records(cfg, **self._record_fields(bias))

    def _record_fields(self, bias: np.ndarray | None) -> dict[str, np.ndarray | int]:
        """The REQUANT record fields of every output channel."""
        assert self.multiplier is not None and self.shift is not None
        n = len(self.multiplier)
        lo, hi = self.clip if self.clip is not None else (-128, 127)
        lo, hi = max(lo, -128), min(hi, 127)
        if self.relu:
            lo = max(lo, self.zero_point)
        b = np.zeros(n, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
        if b.shape != (n,):
            raise CompileError(f"{b.size} bias values for {n} channels")
        return {"multiplier": np.array(self.multiplier), "bias": b,
                "shift": 31 - np.array(self.shift), "zero_point": self.zero_point,
                "lo": lo, "hi": hi}

    @property
    def requantizes(self) -> bool:
        """Either requantization path is on (the default clip is int8)."""
        return self.requant is not None or self.per_channel

    def vector_tiles(self) -> list[str]:
        """Names of the per-channel vectors the ALU reads, in their order in the
        accumulator slot after the bias tile: ``left_shift`` (only if some exponent is
        positive), ``multiplier``, ``right_shift`` (only if some exponent is negative)."""
        if self.one_pass:
            return ["residual_factor"] if self.residual is not None else []
        if self.shift is None:
            return []
        left, right = self._shifts()
        names = ["left_shift"] if left.max() > 0 else []
        names.append("multiplier")
        if right.max() > 0:
            names.append("right_shift")
        return names

    def _shifts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (left, right) shifts around MULHI, with :attr:`headroom`."""
        e = np.array(self.shift, dtype=np.int64)
        right = np.maximum(-e, 0)
        # a·2^k through MULHI keeps k more bits; the right shift grows by k (at most 31)
        moved = np.where(right > 0, np.minimum(self.headroom, MAX_SHIFT - right), 0)
        return np.maximum(e, 0) + moved, right + moved

    @property
    def channel_tiles(self) -> int:
        """Per-channel tiles the accumulator slot holds after the output tile: the bias
        and the vectors of :meth:`vector_tiles` (none in one pass: the records hold the
        bias)."""
        if self.one_pass:
            return len(self.vector_tiles())
        return int(self.bias) + len(self.vector_tiles())

    def channel_vectors(self) -> dict[str, np.ndarray]:
        """The per-channel int32 vectors by name (see :meth:`vector_tiles`)."""
        if self.multiplier is None or self.shift is None:
            return {}
        if self.one_pass:
            return {} if self.residual is None else {
                "residual_factor": np.array(self.residual, np.int64).astype(np.int32)}
        left, right = self._shifts()
        every = {"left_shift": left, "multiplier": np.array(self.multiplier, dtype=np.int64),
                 "right_shift": right}
        return {n: every[n].astype(np.int32) for n in self.vector_tiles()}

    def alu_ops(self) -> list[tuple[AluOp, int | str]]:
        """The ALU instructions after the GEMM, in order: ``(operation, immediate)``,
        or ``(operation, name)`` with a per-channel vector operand (:meth:`vector_tiles`)."""
        if self.one_pass:  # with store_requant, the STOREs requantize
            return [] if self.store_requant else [(AluOp.REQUANT, "records")]
        ops: list[tuple[AluOp, int | str]] = []
        if self.requant is not None:
            mult, shift = self.requant
            ops.append((AluOp.MUL, mult))
            if shift:
                ops.append((AluOp.SHR_RND, shift))
        vectors = self.vector_tiles()
        if "left_shift" in vectors:
            ops.append((AluOp.SHL, "left_shift"))
        if "multiplier" in vectors:
            ops.append((AluOp.MULHI, "multiplier"))
        if "right_shift" in vectors:
            ops.append((AluOp.SHR_RND, "right_shift"))
        if self.zero_point:
            ops.append((AluOp.ADD, self.zero_point))
        if self.relu:
            ops.append((AluOp.MAX, self.zero_point))
        clip = self.clip
        if clip is None and self.requantizes:
            clip = (-128, 127)
        if clip is not None:
            lo, hi = clip
            if lo == -hi - 1:
                ops.append((AluOp.CLIP, hi))
            else:
                if not (self.relu and lo <= self.zero_point):
                    ops.append((AluOp.MAX, lo))
                ops.append((AluOp.MIN, hi))
        return ops

    def describe(self) -> str:
        """Short text form, e.g. ``bias+requant(93,14)+relu``."""
        parts = []
        if self.bias:
            parts.append("bias")
        if self.requant is not None:
            parts.append(f"requant{self.requant}")
        if self.multiplier is not None:
            parts.append(f"requant_q31({len(self.multiplier)} channels"
                         + (f", headroom {self.headroom}" if self.headroom else "")
                         + (f", one pass in the {self.requant_stage})" if self.one_pass
                            else ")"))
        if self.zero_point:
            parts.append(f"zp{self.zero_point}")
        if self.relu:
            parts.append("relu")
        if self.clip is not None:
            parts.append(f"clip{self.clip}")
        if self.residual is not None:
            parts.append("residual")
        return "+".join(parts) or "none"


def _whole(name: str, value: object) -> int:
    """``value`` as an ``int``: an integer (Python or numpy, not a bool) or a float with
    no fraction; anything else raises :class:`CompileError` naming field ``name``."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float | np.floating) and math.isfinite(value) \
            and float(value).is_integer():
        return int(value)
    shown = value.item() if isinstance(value, np.generic) else value  # 2.5, not np.float64(2.5)
    raise CompileError(f"{name} {shown!r} is not an integer")


__all__ = ["REQUANT_STAGES", "Epilogue", "check_requant_stage"]
