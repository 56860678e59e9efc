"""Channel shuffles of int8 activations as 1×1 convolutions with a permutation kernel,
so that the accelerator runs them and the activations stay on the device.

ShuffleNet mixes the channel groups of its grouped convolutions with ``reshape → transpose
→ reshape`` (any chain of reshapes and transposes from an NCHW tensor back to its shape
that only reorders the channels qualifies). On the CPU it is data movement between
accelerator layers: the activations travel to the host and back. As a convolution with
the ``(C, C, 1, 1)`` kernel ``P[j, perm[j]] = 1`` it is exact: each output is one input
value times 1 (the int32 sums are the int8 values), and the requantization after it is
a scale of exactly 1 (multiplier ``2^30``, shift 1: both roundings leave integers as
they are). The convolution multiplies every channel by every channel, ``C²`` MACs per
pixel where the shuffle moves ``C`` values: it is taken only where that is at most
twice the channel blocks the permutation connects (:func:`dense_blocks_pay`: small
channel counts; a real ShuffleNet stage's shuffle would cost several times its
convolutions and stays on the CPU), and only between a convolution's
output and a convolution that reads nothing else (directly or through the padding of an
asymmetric model), where the alternative is the round trip through the host.

The convolutions made here carry names ending in :data:`CHANNEL_PERMUTATION_SUFFIX`, so
that MAC accounting leaves them out of the model's multiply-accumulates (the ONNX model's
shuffle has none).
"""

from __future__ import annotations

import numpy as np

from .infer import infer_types
from .ir import Call, Constant, Expr, Function
from .rewrite import call_readers, rewrite

__all__ = ["CHANNEL_PERMUTATION_SUFFIX", "channel_permutation", "channel_shuffles_as_convs",
           "dense_blocks_pay", "is_channel_permutation"]

#: The name suffix of the convolutions that :func:`channel_shuffles_as_convs` makes.
CHANNEL_PERMUTATION_SUFFIX = ".channel_permutation"

_MOVES = ("reshape", "transpose")
#: Producers of a convolution's int8 output (its epilogue's last operator).
_CONV_OUTPUTS = ("qnn.requantize_q31", "qnn.requantize_fixed", "relu", "clip")


def is_channel_permutation(e: Expr) -> bool:
    """Whether ``e`` is a convolution made by :func:`channel_shuffles_as_convs`."""
    return isinstance(e, Call) and bool(e.name) and e.name.endswith(CHANNEL_PERMUTATION_SUFFIX)


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


def dense_blocks_pay(perm: np.ndarray, block: int) -> bool:
    """Whether a dense permutation convolution of ``perm`` over ``block``-channel blocks
    multiplies at most twice the blocks the permutation really connects (output block
    ``J`` reading input block ``K``): true for few channels (ShuffleNet's 48: 9 of 9),
    false for a real stage's (240 channels in 3 groups: 225 blocks for about 90)."""
    blocks = -(-perm.size // block)
    used = {(j // block, int(k) // block) for j, k in enumerate(perm)}
    return blocks * blocks <= 2 * len(used)


def channel_shuffles_as_convs(fn: Function, rounding: str, block: int) -> Function:
    """``fn`` (an integer program after :func:`~.fixed_point.fixed_point_requantize`)
    with each channel shuffle of an int8 convolution output that one convolution reads
    as ``qnn.requantize_q31(qnn.conv2d_integer(x, P))`` (see the module docstring), where
    the dense convolution over ``block``-channel blocks pays (:func:`dense_blocks_pay`);
    ``rounding`` is the requantizations' (``"single"`` or ``"double"``)."""
    infer_types(fn)
    readers = call_readers(fn)

    def rule(e: Expr, old: Expr) -> Expr:
        if not (isinstance(e, Call) and e.op in _MOVES):
            return e
        if old is fn.body or not _read_by_one_conv(old):
            return e
        found = channel_permutation(e)
        if found is None:
            return e
        x, perm = found
        if not dense_blocks_pay(perm, block):
            return e
        if not (isinstance(x, Call) and x.op in _CONV_OUTPUTS
                and x.checked_type.dtype == "int8"):  # type: ignore[union-attr]
            return e
        c = perm.size
        kernel = np.zeros((c, c, 1, 1), np.int8)
        kernel[np.arange(c), perm] = 1
        zero = Constant(np.zeros((), np.int8))
        name = (e.name or "shuffle") + CHANNEL_PERMUTATION_SUFFIX
        conv = Call("qnn.conv2d_integer", [x, Constant(kernel), zero, zero], {}, e.virtual_device,
                    name)
        return Call("qnn.requantize_q31", [conv],
                    {"multiplier": [1 << 30] * c, "shift": [1] * c, "zero_point": 0,
                     "rounding": rounding}, e.virtual_device, e.name)

    def _read_by_one_conv(e: Expr) -> bool:
        """Read by one convolution, or by one padding that one convolution reads (an
        asymmetric model pads with its zero point apart)."""
        r = readers.get(id(e), [])
        if len(r) == 1 and r[0].op == "nn.pad":
            r = readers.get(id(r[0]), [])
        return len(r) == 1 and r[0].op == "qnn.conv2d_integer"

    return rewrite(fn, rule)


def _shape(e: Expr) -> tuple[int, ...]:
    return tuple(infer_types(e).shape)  # type: ignore[union-attr]
