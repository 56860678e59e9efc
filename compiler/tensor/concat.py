"""Channel concatenation on the accelerator: ``qnn.concat_q31(a, b)`` as a gather
program (:mod:`.channel_gather`).

Output channel ``c`` is ``a``'s channel ``c`` while ``c < C_a``, else ``b``'s channel
``c - C_a``, in the blocked layout ``NCHW{batch}n{block}c`` with one batch block: an
output block takes one block of an input when ``C_a`` is a whole number of blocks (one
GEMM micro-op per entry, a copy), two or three blocks of both inputs otherwise. When an
input's scale or zero point is not the output's, each tile's STORE (or, with
``requant_stage="alu"``, one ALU REQUANT before it) requantizes with a record per output
channel: its input's ``(x - z_x) · s_x / s_y + z_y``, rounded once. The
graph's ``qnn.concat_q31`` (see :mod:`tensorfab.compiler.graph.ops`) is computed by the
CPU kernel with the same REQUANT arithmetic, so both agree bit for bit. Needs
``block_in == block_out``, 8-bit inputs and 32-bit accumulators, and REQUANT for an
input whose scale differs from the output's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorfab.isa import HwConfig
from tensorfab.isa.formats import alu_requant_supported
from tensorfab.isa.program import Program
from tensorfab.isa.requant_record import pack_requant_records

from .channel_gather import gather_program
from .errors import CompileError

__all__ = ["CONCAT_ATTRS", "CONCAT_INPUTS", "concat_attrs", "concat_channels",
           "concat_program", "is_copy", "record_fields"]

#: The two inputs' names: their segments and the prefixes of their attributes.
CONCAT_INPUTS = ("a", "b")

#: The attributes of ``qnn.concat_q31`` the program reads.
CONCAT_ATTRS = tuple(f"{x}_{k}" for x in CONCAT_INPUTS
                     for k in ("multiplier", "shift", "zero_point")) + ("zero_point",)

#: ``(multiplier, shift)`` of a scale of exactly 1 (TFLite's Q31 form of 1.0).
_UNIT = (1 << 30, 1)


def concat_attrs(s_a: float, z_a: int, s_b: float, z_b: int, s_y: float, z_y: int
                 ) -> dict[str, int]:
    """The ``qnn.concat_q31`` attributes of ``quantize(concatenate((a - z_a) s_a,
    (b - z_b) s_b), s_y, z_y)``: per input the Q31 multiplier and exponent of
    ``s_x / s_y`` (exactly 1 when the scales are equal) and its zero point."""
    from .requant import quantize_multiplier_q31

    attrs = {"zero_point": z_y}
    for x, s, z in (("a", s_a, z_a), ("b", s_b, z_b)):
        m, e = _UNIT if np.float32(s) == np.float32(s_y) else quantize_multiplier_q31(
            float(np.float32(s)) / float(np.float32(s_y)))
        attrs |= {f"{x}_multiplier": m, f"{x}_shift": e, f"{x}_zero_point": z}
    return attrs


def is_copy(attrs: Mapping[str, Any], x: str) -> bool:
    """Whether input ``x`` enters the output unchanged (scale 1, the output's zero
    point)."""
    return ((attrs[f"{x}_multiplier"], attrs[f"{x}_shift"]) == _UNIT
            and attrs[f"{x}_zero_point"] == attrs["zero_point"])


def record_fields(attrs: Mapping[str, Any], x: str) -> dict[str, int]:
    """The REQUANT record of input ``x``: ``clamp(RDBPOT((v - z_x) · m, 31 - e) + z_y,
    -128, 127)``."""
    return {"multiplier": attrs[f"{x}_multiplier"], "bias": -attrs[f"{x}_zero_point"],
            "shift": 31 - attrs[f"{x}_shift"], "zero_point": attrs["zero_point"],
            "lo": -128, "hi": 127}


def concat_channels(attrs: Mapping[str, Any], a_shape: Sequence[int],
                    b_shape: Sequence[int], block: int) -> list[tuple[int, int]]:
    """The gather's ``(input, channel)`` of each output channel: ``a``'s channels, then
    ``b``'s (``a_channels``/``b_channels``, or whole blocks of the blocked shapes)."""
    ca = attrs.get("a_channels") or a_shape[1] * block
    cb = attrs.get("b_channels") or b_shape[1] * block
    return [(0, c) for c in range(ca)] + [(1, c) for c in range(cb)]


def concat_program(cfg: HwConfig, a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                   attrs: Mapping[str, Any], a: np.ndarray | None = None,
                   b: np.ndarray | None = None, *, tile: int = 256,
                   requant_stage: str = "store") -> Program:
    """A program computing ``qnn.concat_q31(a, b)`` (see the module docstring).

    Parameters
    ----------
    cfg : HwConfig
        The accelerator configuration.
    a_shape, b_shape : tuple[int, ...]
        Blocked ``NCHW{batch}n{block}c`` shapes (6-D) of the inputs; their channel counts
        are the attributes ``a_channels`` and ``b_channels`` (default: whole blocks).
    attrs : Mapping[str, Any]
        The ``qnn.concat_q31`` attributes (:data:`CONCAT_ATTRS`).
    a, b : numpy.ndarray | None
        Initial contents of segments ``a`` and ``b`` (int8; None: zeros).
    tile : int
        Pixels per tile.
    requant_stage : str
        Where a requantized input's REQUANT runs: ``"store"`` (the STOREs) or ``"alu"``
        (:func:`~.channel_gather.gather_program`).

    Returns
    -------
    Program
        Segments ``a``, ``b`` (int8 inputs), ``out`` (int8 output), ``gather`` and, when
        an input is requantized, ``record`` (constants).

    Raises
    ------
    CompileError
        For a configuration or shapes the program cannot take, missing attributes, or a
        requantized input on a config without REQUANT.
    """
    missing = [k for k in CONCAT_ATTRS if k not in attrs]
    if missing:
        raise CompileError(f"qnn.concat_q31: missing attributes {', '.join(missing)}")
    scaled = [x for x in CONCAT_INPUTS if not is_copy(attrs, x)]
    if scaled and not alu_requant_supported(cfg):
        raise CompileError(f"config {cfg.name!r} has no REQUANT: qnn.concat_q31 can only "
                           f"copy inputs at the output's scale ({', '.join(scaled)} differ)")
    channels = concat_channels(attrs, a_shape, b_shape, cfg.block_out)
    records = None
    if scaled:
        fields = [record_fields(attrs, CONCAT_INPUTS[x]) for x, _ in channels]
        blocks = -(-len(channels) // cfg.block_out)
        rows = pack_requant_records(cfg, **{k: np.array([f[k] for f in fields], np.int64)
                                            for k in fields[0]})
        records = np.zeros((blocks, cfg.block_out, cfg.block_in), np.int8)
        records[:rows.shape[0]] = rows
    return gather_program(cfg, "qnn.concat_q31", [("a", tuple(a_shape)), ("b", tuple(b_shape))],
                          channels, records, [a, b], tile=tile, requant_stage=requant_stage)
