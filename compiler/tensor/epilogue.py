"""Fused epilogues: what happens to an accumulator tile between the GEMM and the STORE."""

from __future__ import annotations

from dataclasses import dataclass

from tensorfab.isa import AluOp
from tensorfab.isa.formats import IMM_MAX as _IMM_MAX
from tensorfab.isa.formats import IMM_MIN as _IMM_MIN

from .errors import CompileError
from .quantize import MAX_MULTIPLIER, MAX_SHIFT


@dataclass(frozen=True)
class Epilogue:
    """A fused epilogue, applied in this order to every int32 accumulator ``a``:

    1. ``bias``: ``a = bias + Σ x·w`` (the bias is loaded into the accumulators and
       moved into the tile before the first GEMM);
    2. ``requant = (mult, shift)``: ``a = SHR_RND(a · mult, shift)`` (see
       :mod:`.quantize`);
    3. ``relu``: ``a = max(a, 0)``;
    4. ``clip = (lo, hi)``: ``a = min(max(a, lo), hi)``; with ``requant`` and no
       ``clip``, ``a`` is saturated to int8 (``clip = (-128, 127)``).

    The STORE then keeps the low byte of ``a``: without ``requant`` or ``clip`` int32
    values wrap.

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
    """

    bias: bool = False
    requant: tuple[int, int] | None = None
    relu: bool = False
    clip: tuple[int, int] | None = None

    def __post_init__(self) -> None:
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

    def alu_ops(self) -> list[tuple[AluOp, int]]:
        """The ALU instructions (operation, immediate) after the GEMM, in order."""
        ops: list[tuple[AluOp, int]] = []
        if self.requant is not None:
            mult, shift = self.requant
            ops.append((AluOp.MUL, mult))
            if shift:
                ops.append((AluOp.SHR_RND, shift))
        if self.relu:
            ops.append((AluOp.MAX, 0))
        clip = self.clip
        if clip is None and self.requant is not None:
            clip = (-128, 127)
        if clip is not None:
            lo, hi = clip
            if lo == -hi - 1:
                ops.append((AluOp.CLIP, hi))
            else:
                if not (self.relu and lo <= 0):
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
        if self.relu:
            parts.append("relu")
        if self.clip is not None:
            parts.append(f"clip{self.clip}")
        return "+".join(parts) or "none"


__all__ = ["Epilogue"]
