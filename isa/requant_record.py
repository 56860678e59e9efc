"""REQUANT's per-channel records: how they are laid out in a weight-buffer entry.

A REQUANT micro-op reads one weight entry; row ``o`` of it (``w[o][0:block_in]``, the
bytes of output channel ``o``) holds that channel's record, :data:`.formats.REQUANT_RECORD`:
the multiplier, the bias, the right shift, the zero point and the clamp bounds.
"""

from __future__ import annotations

import numpy as np

from .config import HwConfig
from .errors import UsageError
from .formats import (
    REQUANT_MAX_SHIFT,
    REQUANT_MULTIPLIER_BITS,
    REQUANT_RECORD,
    REQUANT_RECORD_BYTES,
    REQUANT_RECORD_WORDS,
    alu_requant_supported,
    requant_supported,
)

__all__ = ["acc_record_rows", "pack_requant_acc_records", "pack_requant_records",
           "requant_rows_acc_records", "unpack_requant_records"]

#: Legal values per field: the field's width, but the shift up to REQUANT_MAX_SHIFT and
#: the multiplier within its REQUANT_MULTIPLIER_BITS.
_RANGES = {name: ((-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if signed
                  else (0, (1 << (8 * size)) - 1))
           for name, _, size, signed in REQUANT_RECORD} | {
    "shift": (0, REQUANT_MAX_SHIFT), "multiplier": (0, (1 << REQUANT_MULTIPLIER_BITS) - 1)}


def pack_requant_records(cfg: HwConfig, **fields: np.ndarray | int) -> np.ndarray:
    """The weight entries holding one REQUANT record per output channel.

    Parameters
    ----------
    cfg : HwConfig
        Gives the entry shape (``block_out × block_in`` int8).
    **fields : numpy.ndarray | int
        Every field of :data:`.formats.REQUANT_RECORD` (``multiplier``, ``bias``,
        ``shift``, ``zero_point``, ``lo``, ``hi``), each an ``(O,)`` array or a scalar
        for every channel; ``O`` comes from the arrays.

    Returns
    -------
    numpy.ndarray
        int8 ``(ceil(O / block_out), block_out, block_in)``; channels past ``O`` get
        all-zero records (multiplier 0: their outputs are clamped zero points).

    Raises
    ------
    UsageError
        ``cfg`` has no REQUANT in its ALU, a field is missing or unknown, or a value does not fit
        its field (the shift must be 0..REQUANT_MAX_SHIFT).
    """
    if not alu_requant_supported(cfg):
        raise UsageError(f"config {cfg.name!r} has no REQUANT in its ALU: a weight row "
                         f"holds {cfg.block_in} bytes, a record {REQUANT_RECORD_BYTES}"
                         + ("" if cfg.vector_alu else ", and it has no vector ALU"))
    return _record_rows(cfg, cfg.block_in, fields)


def _record_rows(cfg: HwConfig, width: int, fields: dict[str, np.ndarray | int]
                 ) -> np.ndarray:
    """The records of ``fields`` as int8 ``(blocks, block_out, width)`` rows."""
    names = [name for name, *_ in REQUANT_RECORD]
    if sorted(fields) != sorted(names):
        raise UsageError(f"REQUANT records need the fields {names}, got {sorted(fields)}")
    arrays = {k: np.asarray(v, dtype=np.int64).reshape(-1) for k, v in fields.items()}
    sizes = {k: a.size for k, a in arrays.items() if a.size != 1}
    if len(set(sizes.values())) > 1:
        raise UsageError("REQUANT fields have different channel counts: "
                         + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    n = max(a.size for a in arrays.values())
    rows = np.zeros((-(-n // cfg.block_out) * cfg.block_out, width), dtype=np.uint8)
    for name, offset, size, _signed in REQUANT_RECORD:
        a = np.broadcast_to(arrays[name], (n,))
        lo, hi = _RANGES[name]
        bad = np.flatnonzero((a < lo) | (a > hi))
        if bad.size:
            raise UsageError(f"REQUANT {name} of channel {int(bad[0])} is {int(a[bad[0]])}, "
                             f"outside {lo}..{hi}")
        u = a & ((1 << (8 * size)) - 1)
        for k in range(size):
            rows[:n, offset + k] = (u >> (8 * k)) & 0xFF
    return rows.view(np.int8).reshape(-1, cfg.block_out, width)


def unpack_requant_records(rows: np.ndarray) -> dict[str, np.ndarray]:
    """The record fields of weight rows: ``rows`` is int8 ``(..., block_in)`` (any
    leading shape, e.g. ``(entries, block_out)``); returns int64 arrays of the leading
    shape per field name, as stored (REQUANT ignores the multiplier field's top bit,
    :func:`tensorfab.sim.fsim_alu.requant_values`; a shift above
    :data:`.formats.REQUANT_MAX_SHIFT` is returned, not rejected)."""
    b = np.asarray(rows).astype(np.int64) & 0xFF
    out: dict[str, np.ndarray] = {}
    for name, offset, size, signed in REQUANT_RECORD:
        v = np.zeros(b.shape[:-1], dtype=np.int64)
        for k in range(size):
            v |= b[..., offset + k] << (8 * k)
        if signed:
            v = np.where(v >= 1 << (8 * size - 1), v - (1 << (8 * size)), v)
        out[name] = v
    return out


def pack_requant_acc_records(cfg: HwConfig, **fields: np.ndarray | int) -> np.ndarray:
    """The accumulator entries holding the records of a requantizing STORE.

    Parameters
    ----------
    cfg : HwConfig
        Gives the entry shape (``batch × block_out`` int32).
    **fields : numpy.ndarray | int
        As :func:`pack_requant_records`.

    Returns
    -------
    numpy.ndarray
        int32 ``(ceil(O / block_out) × 3, batch, block_out)``: per block of
        ``block_out`` channels, three entries whose batch row 0 holds the records'
        little-endian words (:data:`.formats.REQUANT_RECORD_WORDS`); the other rows are 0.

    Raises
    ------
    UsageError
        ``cfg``'s STOREs do not requantize
        (:func:`~tensorfab.isa.formats.requant_supported`), or as
        :func:`pack_requant_records`.
    """
    if not requant_supported(cfg):
        raise UsageError(f"config {cfg.name!r} has no REQUANT in its STOREs")
    return requant_rows_acc_records(cfg, _record_rows(cfg, REQUANT_RECORD_BYTES, fields))


def requant_rows_acc_records(cfg: HwConfig, rows: np.ndarray) -> np.ndarray:
    """The accumulator entries of :func:`pack_requant_acc_records` holding the records
    in weight rows ``rows`` (int8 ``(blocks, block_out, block_in)``, as
    :func:`pack_requant_records` returns them): int32 ``(blocks × 3, batch,
    block_out)``."""
    rows = np.asarray(rows, dtype=np.int8)  # (blocks, block_out, block_in)
    words = np.ascontiguousarray(rows[..., :REQUANT_RECORD_BYTES]).view("<i4")
    out = np.zeros((rows.shape[0], REQUANT_RECORD_WORDS, cfg.batch, cfg.block_out),
                   dtype=np.int32)
    out[:, :, 0, :] = words.transpose(0, 2, 1)
    return out.reshape(-1, cfg.batch, cfg.block_out)


def acc_record_rows(entries: np.ndarray) -> np.ndarray:
    """The records of a requantizing STORE as weight rows: ``entries`` is the int32
    ``(3, batch, block_out)`` accumulator entries ``rec..rec+2``; returns int8
    ``(block_out, 12)``, the rows :func:`unpack_requant_records` reads."""
    words = np.ascontiguousarray(np.asarray(entries, dtype=np.int32)[:, 0, :].T)
    return words.astype("<i4").view(np.int8).reshape(-1, REQUANT_RECORD_BYTES)
