"""Channel shuffles of int8 activations as one ``qnn.channel_permute``, which the
accelerator runs as a program (:mod:`tensorfab.compiler.tensor.channel_permute`), so
that the activations stay on the device.

ShuffleNet mixes the channel groups of its grouped convolutions with ``reshape → transpose
→ reshape``; any chain of reshapes and transposes from an NCHW tensor back to its shape
that only reorders the channels qualifies. The chain is found by running it on a probe
of element indices: output channel ``j`` is input channel ``perm[j]`` at every pixel.
The result is the same int8 tensor (data movement, exact), one operator instead of
three, which the partitioner places on the accelerator where its input is computed there
and an accelerator operator reads it.
"""

from __future__ import annotations

import numpy as np

from .infer import infer_types
from .ir import Call, Expr, Function
from .rewrite import rewrite

__all__ = ["channel_permutation", "channel_shuffles_as_permutes"]

_MOVES = ("reshape", "transpose")


def channel_permutation(e: Expr) -> tuple[Expr, np.ndarray] | None:
    """``(x, perm)`` when ``e`` is a chain of reshapes and transposes of the NCHW ``x``
    with ``x``'s shape whose channel ``j`` is ``x``'s channel ``perm[j]`` everywhere (and
    not the identity), else None."""
    from tensorfab.runtime.kernels import KERNELS

    chain: list[Call] = []
    x = e
    while isinstance(x, Call) and x.op in _MOVES and (not chain or len(_shape(x)) != 4):
        chain.append(x)
        x = x.args[0]
    shape = _shape(x)
    if len(chain) < 2 or len(shape) != 4 or _shape(e) != shape:
        return None
    n, c, h, w = shape
    probe = np.arange(n * c * h * w, dtype=np.int64).reshape(shape)
    out = probe
    for op in reversed(chain):
        out = KERNELS[op.op]([out], dict(op.attrs))
    out = np.asarray(out)
    if out.shape != shape:
        return None
    perm = out[0, :, 0, 0] // (h * w) % c
    if not np.array_equal(out, probe[:, perm]) or np.array_equal(perm, np.arange(c)):
        return None
    return x, perm


def channel_shuffles_as_permutes(fn: Function) -> Function:
    """``fn`` (an integer program) with each channel shuffle of an int8 tensor as
    ``qnn.channel_permute(x, perm)`` (see the module docstring)."""
    def rule(e: Expr, _old: Expr) -> Expr:
        if not (isinstance(e, Call) and e.op in _MOVES):
            return e
        found = channel_permutation(e)
        if found is None or infer_types(found[0]).dtype != "int8":  # type: ignore[union-attr]
            return e
        x, perm = found
        return Call("qnn.channel_permute", [x], {"perm": tuple(int(p) for p in perm)},
                    e.virtual_device, e.name)

    return rewrite(fn, rule)


def _shape(e: Expr) -> tuple[int, ...]:
    return tuple(infer_types(e).shape)  # type: ignore[union-attr]
