"""Integer dense layers as 1×1 convolutions, so that the accelerator runs them too.

An int8 ``qnn.matmul_integer(x, W)`` with an ``x`` ``(M, K)``, a constant int8
weight ``W`` ``(K, N)`` and zero points 0 is the convolution of ``x`` viewed as
``(M, K, 1, 1)`` with the ``(N, K, 1, 1)`` kernel ``Wᵀ``. An ``x`` with more dims
(``(1, seq, hidden)``, a transformer's linears) is the same with its leading dims
flattened into ``M``, and the result reshaped back to ``(..., N)``. :func:`dense_as_conv`
rewrites each such matmul together with the epilogue that follows it (a constant bias
``add``, a requantization with constant scales, ``relu``, ``clip``: the chain the
partitioner fuses) into that 4-D form between two ``reshape`` calls. The int32 and int8
results are identical; afterwards the convolution passes apply unchanged (per-channel
fixed-point requantization, partitioning, blocked layouts, the tensor compiler's
epilogues), which is how a classifier or a projection reaches the accelerator.
"""

from __future__ import annotations

import numpy as np

from .infer import infer_types
from .ir import Call, Constant, Expr, Function, post_order
from .rewrite import call_readers, rebuild, single_reader_chain
from .types import TensorType

#: Operators of the epilogue carried into the 4-D form (as the partitioner's chains).
_EPILOGUE = ("add", "qnn.requantize", "qnn.requantize_fixed", "relu", "clip")


def _zero(e: Expr) -> bool:
    return isinstance(e, Constant) and not np.any(e.data)


def _dense(e: Expr) -> bool:
    """An int8 matmul the accelerator can run as a convolution."""
    if not (isinstance(e, Call) and e.op == "qnn.matmul_integer"):
        return False
    x, w = (infer_types(a) for a in e.args[:2])
    return (isinstance(x, TensorType) and x.ndim >= 2 and x.dtype == "int8"
            and all(isinstance(d, int) for d in x.shape)
            and isinstance(e.args[1], Constant) and e.args[1].data.dtype == np.int8
            and isinstance(w, TensorType) and w.ndim == 2
            and all(_zero(z) for z in e.args[2:]))


def _per_channel(c: Constant, n: int) -> Constant | None:
    """A constant broadcast along the last dim (scalar, ``(N,)``, ``(1, N)``,
    ``(1, 1, N)``...) in its 4-D form."""
    d = c.data
    if d.size == 1:
        return c
    if d.size == n and d.shape[-1] == n:
        return Constant(np.ascontiguousarray(d.reshape(1, n, 1, 1)), c.virtual_device)
    return None


def _step(e: Call, n: int, ndim: int) -> Call | None:
    """``e`` (whose first argument is the chain so far) in 4-D, or ``None`` if the
    chain cannot carry it."""
    if e.op not in _EPILOGUE:
        return None
    if e.op == "add":
        b = e.args[1]
        c = _per_channel(b, n) if isinstance(b, Constant) else None
        return None if c is None else Call("add", [e.args[0], c], e.attrs, e.virtual_device)
    if e.op == "qnn.requantize":
        if e.attrs.get("axis", 1) not in (ndim - 1, -1):
            return None
        rest = [_per_channel(a, n) if isinstance(a, Constant) else None for a in e.args[1:]]
        if any(r is None for r in rest):
            return None
        attrs = {**e.attrs, "axis": 1}
        return Call(e.op, [e.args[0], *rest], attrs, e.virtual_device, e.name)  # type: ignore[list-item]
    return e


def dense_as_conv(fn: Function) -> Function:
    """``fn`` with every int8 dense chain as a 1×1 convolution chain (see the module
    docstring); other nodes are unchanged."""
    infer_types(fn)
    readers = call_readers(fn)
    ends: dict[int, list[Call]] = {}
    for e in post_order(fn):
        if not _dense(e):
            continue
        n = int(e.args[1].data.shape[1])  # type: ignore[union-attr]
        ndim = infer_types(e.args[0]).ndim  # type: ignore[union-attr]
        follow = single_reader_chain(e, fn, readers,  # type: ignore[arg-type]
                                     lambda nxt, prev, n=n, ndim=ndim: _step(nxt, n, ndim)
                                     if nxt.args[0] is prev else None)
        end = follow[-1][0] if follow else e
        ends[id(end)] = [e, *(step for _, step in follow)]  # type: ignore[list-item]
    new: dict[int, Expr] = {}
    for node in post_order(fn):
        rebuilt = rebuild(node, new)
        if id(node) in ends:
            rebuilt = _four_d(ends[id(node)], new)
        new[id(node)] = rebuilt
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out


def _four_d(chain: list[Call], new: dict[int, Expr]) -> Expr:
    matmul, steps = chain[0], chain[1:]
    dev = matmul.virtual_device
    x = new[id(matmul.args[0])]
    *lead, k = infer_types(matmul.args[0]).shape  # type: ignore[union-attr]
    m = int(np.prod(lead))
    w = matmul.args[1].data  # type: ignore[union-attr]
    n = w.shape[1]
    kernel = Constant(np.ascontiguousarray(w.T.reshape(n, k, 1, 1)), matmul.args[1].virtual_device)
    zeros = [Constant(np.zeros((), z.data.dtype), z.virtual_device)  # type: ignore[union-attr]
             for z in matmul.args[2:]]
    e: Expr = Call("qnn.conv2d_integer",
                   [Call("reshape", [x], {"newshape": (m, k, 1, 1)}, dev, matmul.name), kernel,
                    *zeros], {}, dev, matmul.name)
    for s in steps:
        e = Call(s.op, [e, *[new.get(id(a), a) for a in s.args[1:]]], s.attrs,
                 s.virtual_device, s.name)
    last = steps[-1] if steps else matmul
    return Call("reshape", [e], {"newshape": (*lead, n)}, last.virtual_device, last.name)


__all__ = ["dense_as_conv"]
