"""Constant folding: calls whose arguments are all constants are evaluated with the
runtime's CPU kernels; items of literal tuples are taken."""

from __future__ import annotations

import numpy as np

from tensorfab.runtime.kernels import KERNELS

from .ir import Call, Constant, Expr, Function, Tuple, TupleGetItem
from .rewrite import rewrite

#: Operators never folded: device annotations (folding would drop the crossing).
NEVER_FOLDED = frozenset({"on_device", "device_copy"})


def fold_constants(fn: Function, *, keep_quantization: bool = True) -> Function:
    """``fn`` with constant sub-expressions evaluated.

    Parameters
    ----------
    keep_quantization : bool
        Leave ``qnn.*`` calls on constants alone (a quantized flow reads the int8
        weights behind a ``qnn.dequantize``), but ``qnn.quantize``: a float weight
        quantized in the model (a quantization-aware-trained export, a float16 model's
        weight cast to float32 and quantized) folds to the int8 weight that such a
        ``qnn.dequantize`` reads.
    """
    def rule(e: Expr, _old: Expr) -> Expr:
        if isinstance(e, TupleGetItem):
            t = e.tuple_value
            if isinstance(t, Tuple):
                return t.fields[e.index]
            if _foldable(t, keep_quantization):
                parts = KERNELS[t.op]([a.data for a in t.args], dict(t.attrs))  # type: ignore[union-attr]
                return Constant(np.asarray(parts[e.index]), e.virtual_device)
            return e
        if isinstance(e, Call) and e.op != "split" and _foldable(e, keep_quantization):
            value = KERNELS[e.op]([a.data for a in e.args], dict(e.attrs))  # type: ignore[union-attr]
            return Constant(np.asarray(value), e.virtual_device)
        return e
    return rewrite(fn, rule)


def _foldable(e: Expr, keep_quantization: bool) -> bool:
    return (isinstance(e, Call) and e.op not in NEVER_FOLDED and e.op in KERNELS
            and not (keep_quantization and e.op.startswith("qnn.") and e.op != "qnn.quantize")
            and all(isinstance(a, Constant) for a in e.args))
