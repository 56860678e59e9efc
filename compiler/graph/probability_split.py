"""Softmax probabilities in two int8 parts, for attention over long sequences.

Attention's ``P·V`` reads the softmax probabilities ``P`` in ``[0, 1]``. One symmetric
int8 scale gives them steps of ``1/127``; when attention spreads over ``n`` tokens the
typical weight is ``1/n`` (0.008 at 128 tokens), one step, and the rounding error of
``P·V`` reaches a few percent of its magnitude (MiniLM's cosine to float fell to 0.98 at
113 tokens). :func:`split_probabilities` rewrites every ``matmul(softmax(x), v)`` into

``matmul(hi, v) + matmul(P - hi, v)`` with ``hi = dequantize(quantize(P, 1/127))``

``hi`` is already int8 (its scale fixed to ``1/127``, the full range of a probability);
the remainder ``P - hi`` lies within half a step and gets its own calibrated int8 scale
(about ``1/(254·127)``), so the two accelerator matmuls together see ``P`` in steps of
about ``3·10⁻⁵``. The remainder's subtraction and the sum of the two products run on the
CPU in float; the second matmul costs ``1/(4·hidden/seq + …)`` of a layer's MACs (3 % at
128 tokens for MiniLM).
"""

from __future__ import annotations

import numpy as np

from .infer import infer_types
from .ir import Call, Constant, Expr, Function, post_order
from .rewrite import rebuild

__all__ = ["PROBABILITY_SCALE", "split_probabilities"]

#: The int8 scale of the high part: probabilities 0..1 over 0..127.
PROBABILITY_SCALE = np.float32(1.0 / 127.0)


def _high_part(p: Expr, ndim: int) -> Call:
    """``dequantize(quantize(p, 1/127, 0), 1/127, 0)``, per tensor, of a ``ndim``-D ``p``."""
    axis = 1 if ndim >= 2 else 0
    s = Constant(np.asarray(PROBABILITY_SCALE, np.float32))
    z = Constant(np.zeros((), np.int8))
    q = Call("qnn.quantize", [p, s, z], {"axis": axis, "out_dtype": "int8"}, p.virtual_device)
    return Call("qnn.dequantize", [q, s, z], {"axis": axis}, p.virtual_device)


def split_probabilities(fn: Function) -> Function:
    """``fn`` with every ``matmul`` whose first operand is a ``nn.softmax`` and whose
    second is an activation split into a high and a low int8 part (see the module
    docstring); unchanged when it has none."""
    infer_types(fn)
    new: dict[int, Expr] = {}
    changed = False
    for node in post_order(fn):
        rebuilt = rebuild(node, new)
        if (isinstance(node, Call) and node.op == "matmul"
                and isinstance(node.args[0], Call) and node.args[0].op == "nn.softmax"
                and not isinstance(node.args[1], Constant)):
            p, v = new[id(node.args[0])], new[id(node.args[1])]
            hi = _high_part(p, len(node.args[0].checked_type.shape))  # type: ignore[union-attr]
            lo = Call("subtract", [p, hi], {}, node.virtual_device)
            rebuilt = Call("add", [Call("matmul", [hi, v], node.attrs, node.virtual_device,
                                        node.name),
                                   Call("matmul", [lo, v], node.attrs, node.virtual_device,
                                        f"{node.name}.low" if node.name else "")],
                           {}, node.virtual_device, node.name)
            changed = True
        new[id(node)] = rebuilt
    if not changed:
        return fn
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out
