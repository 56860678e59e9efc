"""Inference batch norm folded into the convolution before it, or else rewritten as a
per-channel multiply and add."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .ir import Call, Constant, Expr, Function, post_order
from .rewrite import rewrite


def fold_batch_norm(fn: Function) -> Function:
    """``fn`` with every ``nn.batch_norm`` of constant parameters removed.

    ``batch_norm(conv2d(x, W) [+ b], gamma, beta, mean, var)`` becomes
    ``conv2d(x, W * s) + ((b - mean) * s + beta)`` with ``s = gamma / sqrt(var + eps)``
    when the convolution (plain NCHW/OIHW layouts, constant weight) has no other reader;
    any other batch norm becomes ``x * s + (beta - mean * s)`` per channel.
    """
    readers = Counter(id(a) for e in post_order(fn) if isinstance(e, Call) for a in e.args)

    def rule(e: Expr, old: Expr) -> Expr:
        if not (isinstance(e, Call) and e.op == "nn.batch_norm"):
            return e
        x, *params = e.args
        if not all(isinstance(p, Constant) for p in params):
            return e
        gamma, beta, mean, var = (p.data.astype(np.float64) for p in params)  # type: ignore[union-attr]
        dtype = params[0].data.dtype  # type: ignore[union-attr]
        scale = gamma / np.sqrt(var + e.attrs["epsilon"])
        shift = beta - mean * scale
        ndim = x.checked_type.ndim  # type: ignore[union-attr]
        per_channel = (-1,) + (1,) * (ndim - 2)
        dev = e.virtual_device
        conv, bias = _conv_and_bias(x, old.args[0], readers)  # type: ignore[union-attr]
        if conv is not None:
            w = conv.args[1].data.astype(np.float64)  # type: ignore[union-attr]
            folded_w = (w * scale.reshape(-1, 1, 1, 1)).astype(dtype)
            new_conv = Call("nn.conv2d", [conv.args[0], Constant(folded_w, conv.args[1]
                                                                  .virtual_device)],
                            conv.attrs, conv.virtual_device)
            b = np.zeros_like(scale) if bias is None else bias.reshape(-1).astype(np.float64)
            total = ((b - mean) * scale + beta).astype(dtype).reshape(per_channel)
            return Call("add", [new_conv, Constant(total, dev)], {}, dev)
        mul = Call("multiply", [x, Constant(scale.astype(dtype).reshape(per_channel), dev)],
                   {}, dev)
        return Call("add", [mul, Constant(shift.astype(dtype).reshape(per_channel), dev)],
                    {}, dev)

    return rewrite(fn, rule)


def _conv_and_bias(x: Expr, x_old: Expr, readers: Counter
                   ) -> tuple[Call | None, np.ndarray | None]:
    """The plain-layout conv (and its constant per-channel bias) that ``x`` is, when
    nothing else reads them (``readers`` counts readers of the original nodes, ``x_old``
    is ``x`` before rewriting)."""
    bias = None
    if (isinstance(x, Call) and x.op == "add" and isinstance(x.args[1], Constant)
            and readers[id(x_old)] <= 1):
        c = x.args[1].data
        channels = x.checked_type.shape[1]  # type: ignore[union-attr]
        if c.size == channels and c.shape in ((channels, 1, 1), (1, channels, 1, 1)):
            bias, x, x_old = c, x.args[0], x_old.args[0]  # type: ignore[union-attr]
    if (isinstance(x, Call) and x.op == "nn.conv2d" and isinstance(x.args[1], Constant)
            and x.attrs["data_layout"] == "NCHW" and x.attrs["kernel_layout"] == "OIHW"
            and readers[id(x_old)] <= 1):
        return x, bias
    return None, None
