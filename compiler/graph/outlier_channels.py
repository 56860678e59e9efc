"""Outlier input channels of dense layers kept in float (LLM.int8()'s decomposition).

A transformer's hidden states have a few channels tens of times larger than the rest
(BERT's layer-norm outputs and GELU outputs); one int8 scale per tensor cannot hold both.
:func:`split_outlier_channels` finds, from calibration data, the ``k`` input channels of
each dense layer (``matmul`` with a constant 2-D weight) with the largest magnitude and
rewrites ``x @ W`` into

``(x * mask) @ W + take(x, outliers, axis=-1) @ W[outliers]``

where ``mask`` is 0 on the outlier channels and 1 elsewhere. Quantization then sees
``x * mask`` (its scale set by the ordinary channels) for the accelerator's GEMM, while the
``k`` outlier channels stay a small float matmul on the CPU. A bias ``add`` after the
dense layer stays on the first (accelerator) term so that it fuses there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from .calibration import ChannelMinMaxObserver, observe
from .infer import infer_types
from .ir import Call, Constant, Expr, Function, post_order
from .rewrite import rebuild

__all__ = ["split_outlier_channels"]


def _dense(e: Expr) -> bool:
    if not (isinstance(e, Call) and e.op == "matmul"):
        return False
    x, w = e.args
    return (not isinstance(x, Constant) and isinstance(w, Constant) and w.data.ndim == 2
            and w.data.dtype == np.float32
            and x.checked_type.dtype == "float32"  # type: ignore[union-attr]
            and w.data.shape[0] > 0)


def split_outlier_channels(fn: Function, calibration: Iterable[Mapping[str, np.ndarray]],
                           channels: int) -> tuple[Function, frozenset[int]]:
    """``fn`` with the ``channels`` largest input channels of every dense layer computed
    apart in float (see the module docstring; unchanged for ``channels`` 0), and the ids
    of the float outlier matmuls (which quantization must leave float)."""
    if channels <= 0:
        return fn, frozenset()
    infer_types(fn)
    nodes = list(post_order(fn))
    dense = [e for e in nodes if _dense(e) and e.args[1].data.shape[0] > channels]  # type: ignore[union-attr]
    if not dense:
        return fn, frozenset()
    dense_ids = {id(d) for d in dense}
    outliers: set[int] = set()
    inputs = list({id(d.args[0]): d.args[0] for d in dense}.values())
    observers = observe(fn, inputs, calibration,
                        observers=[ChannelMinMaxObserver() for _ in inputs])
    amax = {id(x): o.channel_amax() for x, o in zip(inputs, observers, strict=True)}  # type: ignore[attr-defined]
    readers: dict[int, list[Call]] = defaultdict(list)
    for e in nodes:
        if isinstance(e, Call):
            for a in e.args:
                readers[id(a)].append(e)
    new: dict[int, Expr] = {}
    biased: dict[int, Expr] = {}  # a dense layer's bias add -> its float outlier term
    for node in nodes:
        rebuilt = rebuild(node, new)
        if isinstance(node, Call) and id(node) in dense_ids:
            x, w = new[id(node.args[0])], node.args[1].data  # type: ignore[union-attr]
            top = np.sort(np.argsort(amax[id(node.args[0])], kind="stable")[-channels:])
            mask = np.ones(w.shape[0], np.float32)
            mask[top] = 0.0
            main = Call("matmul", [Call("multiply", [x, Constant(mask)]), node.args[1]],
                        {}, node.virtual_device)
            outlier = Call("matmul", [Call("take", [x, Constant(top.astype(np.int64))],
                                           {"axis": -1}),
                                      Constant(np.ascontiguousarray(w[top]))])
            outliers.add(id(outlier))
            r = readers[id(node)]
            if len(r) == 1 and r[0].op == "add" and r[0].args[0] is node and \
                    isinstance(r[0].args[1], Constant):
                biased[id(r[0])] = outlier
                rebuilt = main
            else:
                rebuilt = Call("add", [main, outlier])
        elif id(node) in biased:
            rebuilt = Call("add", [rebuilt, biased[id(node)]])
        new[id(node)] = rebuilt
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out, frozenset(outliers)
