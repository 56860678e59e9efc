"""Per-channel scale and shift as depthwise 1×1 convolutions, so that the accelerator
runs them.

A batch norm that cannot fold into the convolution before it (DenseNet's and
Inception's after a concatenation) is left by
:func:`~tensorfab.compiler.graph.batch_norm_folding.fold_batch_norm` as
``x * s + t`` with constant ``(C, 1, 1)`` vectors: float element-wise work on the CPU
between accelerator layers. It is exactly the depthwise 1×1 convolution of ``x`` with
the ``(C, 1, 1, 1)`` kernel ``s`` plus the bias ``t``, which the quantizer treats as any
convolution (per-channel int8 weights, an int32 bias, the ReLU after it fused into the
epilogue) and the accelerator runs as a grouped convolution
(:mod:`tensorfab.compiler.tensor.grouped_conv`).

The convolutions made here carry names ending in :data:`CHANNEL_AFFINE_SUFFIX`, so
that MAC accounting can leave them out of the model's multiply-accumulates (ONNX's
batch norm has none).
"""

from __future__ import annotations

import numpy as np

from .ir import Call, Constant, Expr, Function, Var
from .rewrite import rewrite
from .types import TensorType

__all__ = ["CHANNEL_AFFINE_SUFFIX", "channel_affine_as_conv", "is_channel_affine"]

#: The name suffix of the convolutions that :func:`channel_affine_as_conv` makes.
CHANNEL_AFFINE_SUFFIX = ".channel_affine"


def is_channel_affine(e: Expr) -> bool:
    """Whether ``e`` is a convolution made by :func:`channel_affine_as_conv` (or the
    integer convolution lowered from one)."""
    return isinstance(e, Call) and bool(e.name) and e.name.endswith(CHANNEL_AFFINE_SUFFIX)


def _channel_vector(e: Expr, channels: int) -> np.ndarray | None:
    """A float32 constant of shape ``(C, 1, 1)`` or ``(1, C, 1, 1)`` as ``(C,)``."""
    if not (isinstance(e, Constant) and e.data.dtype == np.float32):
        return None
    if e.data.shape not in ((channels, 1, 1), (1, channels, 1, 1)):
        return None
    return e.data.reshape(channels)


def channel_affine_as_conv(fn: Function) -> Function:
    """``fn`` with every ``x * s + t`` (``x`` float32 NCHW, ``s`` and ``t`` constant
    per-channel vectors) as ``conv2d(x, s[:, None, None, None], groups=C) + t``.

    A scale and shift of a model input (an input normalization) stays: quantized
    before it, the input would get one int8 scale for channels of different ranges.

    Parameters
    ----------
    fn : Function
        A float program (batch norms already folded or rewritten by
        :func:`~tensorfab.compiler.graph.batch_norm_folding.fold_batch_norm`).

    Returns
    -------
    Function
        ``fn`` with those rewritten; other nodes unchanged.
    """
    def rule(e: Expr, _old: Expr) -> Expr:
        if not (isinstance(e, Call) and e.op == "add" and isinstance(e.args[0], Call)
                and e.args[0].op == "multiply"):
            return e
        mul = e.args[0]
        x = mul.args[0]
        if isinstance(x, Var):
            return e
        xt = x.checked_type
        if not (isinstance(xt, TensorType) and xt.ndim == 4 and xt.dtype == "float32"
                and isinstance(xt.shape[1], int)):
            return e
        channels = xt.shape[1]
        scale = _channel_vector(mul.args[1], channels)
        shift = _channel_vector(e.args[1], channels)
        if scale is None or shift is None:
            return e
        dev = e.virtual_device
        name = f"{mul.name or e.name or 'scale_shift'}{CHANNEL_AFFINE_SUFFIX}"
        kernel = Constant(np.ascontiguousarray(scale.reshape(channels, 1, 1, 1)))
        conv = Call("nn.conv2d", [x, kernel],
                    {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1),
                     "groups": channels, "data_layout": "NCHW", "kernel_layout": "OIHW"},
                    dev, name)
        return Call("add", [conv, Constant(np.ascontiguousarray(shift.reshape(-1, 1, 1)))],
                    {}, dev, e.name)
    return rewrite(fn, rule)
