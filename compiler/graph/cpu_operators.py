"""Why each operator left on the CPU is there, for every operator (not only
convolutions, which :func:`~.partitioning.cpu_convolutions` details).

:func:`cpu_operators` takes a program after accelerator lowering (its accelerator work is
``accel.program`` calls) and gives one line per CPU operator kind: the operator, how many
calls, and the reason. The accelerator runs int8 GEMMs (convolutions, dense layers,
batched matmuls of two activations) with their fused epilogues and residual adds; every
other operator is CPU work by design, and a GEMM left on the CPU says why.
"""

from __future__ import annotations

from collections import Counter

from tensorfab.compiler.tensor.vector_program import vector_program_refusal
from tensorfab.isa import HwConfig
from tensorfab.runtime.accel_contract import ACCEL_PROGRAM

from .infer import infer_types
from .ir import Call, Constant, Function, post_order
from .partitioning import ACCEL_ACTIVATIONS, MOVING_REFUSALS, accelerator_conv_refusal

__all__ = ["cpu_operators", "cpu_reason"]

#: Reasons by operator for the ones that are not GEMMs.
_REASONS: dict[str, str] = {
    "take": "an embedding lookup (a gather, no arithmetic)",
    "nn.layer_norm": "a float normalization (mean, variance, reciprocal square root)",
    "nn.softmax": "a float softmax (exponentials and a division per row)",
    "erf": "GELU's error function (float; the accelerator's ALU has no transcendental)",
    "tanh": "a float transcendental (the accelerator's ALU has none)",
    "sigmoid": "a float transcendental (the accelerator's ALU has none)",
    "exp": "a float transcendental (the accelerator's ALU has none)",
    "sqrt": "a float square root (the L2 normalization)",
    "divide": "a float division (pooling or normalization)",
    "hard_swish": "float hard-swish: its input is no int8 activation (int8 hard-swish runs "
                  "on the accelerator)",
    "hard_sigmoid": "float hard-sigmoid: it follows no convolution it could fold into (as "
                    "the clip of that convolution's epilogue)",
    "nn.global_avg_pool2d": "float average pooling: its input is no int8 activation (int8 "
                            "pooling runs on the accelerator)",
    "nn.max_pool2d": "max pooling has no accelerator lowering (int8 on the CPU when its "
                     "input is)",
    "nn.avg_pool2d": "windowed average pooling has no accelerator lowering (a division by "
                     "each window's count of unpadded elements; global average pooling "
                     "has one)",
    "nn.batch_norm": "a float batch norm that folds into no convolution (in onnxruntime's "
                     "QDQ models made without quant_pre_process its parameters are "
                     "dequantized weights and its input a dequantized activation)",
    "nn.lrn": "float local response normalization (a fractional power of a windowed sum "
              "of squares; the accelerator's ALU has no power)",
    "nn.im2col": "gathers a convolution's patches for its GEMM (data movement: a stem of "
                 "few input channels runs as one GEMM on the accelerator)",
    "mean": "a float reduction (mean pooling or a norm)",
    "qnn.quantize": "float to int8 at an accelerator input",
    "qnn.dequantize": "int8 to float at an accelerator output read by a float operator",
    "layout_transform": "relayout between plain and the accelerator's blocked layouts",
    "device_copy": "a copy between host and device memory",
}
_DATA_MOVEMENT = frozenset({"reshape", "transpose", "flatten", "squeeze", "expand_dims",
                            "strided_slice", "concatenate", "split", "identity", "cast"})
_ELEMENTWISE = frozenset({"add", "subtract", "multiply", "maximum", "minimum", "power",
                          "negative", "where", "clip", "relu"})


def cpu_reason(e: Call, cfg: HwConfig | None = None) -> str:
    """Why the CPU call ``e`` is not accelerator work."""
    if e.op in ("nn.conv2d", "qnn.conv2d_integer"):
        return accelerator_conv_refusal(e, cfg) or "no requantization to int8 follows it"
    if e.op == "qnn.matmul_integer":
        if isinstance(e.args[1], Constant):
            return "an int8 dense layer with no requantization to int8 after it"
        if cfg is None:
            return "no accelerator config"
        from .activation_matmul_lowering import activation_matmul_refusal

        return activation_matmul_refusal(e, cfg) or "no requantization to int8 follows it"
    if e.op == "matmul":
        x = e.args[0]
        if isinstance(x, Call) and x.op == "take" and isinstance(e.args[1], Constant):
            return ("a dense layer's outlier input channels, kept in float "
                    "(outlier_channels; the accelerator runs the rest)")
        return "not quantized to int8 (a float matmul)"
    if e.op == "take" and e.attrs.get("axis") in (-1,) and isinstance(e.args[1], Constant) \
            and e.args[1].data.ndim == 1:
        return "gathers a dense layer's outlier input channels for their float matmul"
    if e.op in _REASONS:
        return _REASONS[e.op]
    if e.op in _DATA_MOVEMENT:
        return "data movement (no arithmetic)"
    if e.op in _ELEMENTWISE:
        dtype = getattr(e.checked_type, "dtype", "float32")
        if dtype.startswith("float"):
            return ("float elementwise: its operands are no int8 activations (the int8 "
                    "forms of residual adds, channel-wise scales and ReLU6 run on the "
                    "accelerator)")
        return "int8/int32 elementwise outside an accelerator chain"
    if e.op in ACCEL_ACTIVATIONS:
        refusal = MOVING_REFUSALS.get(e.op)
        why = refusal(e, cfg) if refusal is not None and cfg is not None else None
        if why is not None:
            return why
        lacks = vector_program_refusal(cfg) if cfg is not None else None
        if lacks is not None:
            return f"int8 on the CPU: its program needs {lacks} (config {cfg.name!r})"
        if refusal is not None:
            return ("int8 on the CPU: an input is computed there, or no accelerator "
                    "operator reads the result (it would only travel to the host)")
        return ("int8 on the CPU: its input is computed there (a program would only move "
                "it to the device)")
    if e.op.startswith("qnn."):
        return "integer arithmetic outside an accelerator chain"
    return "no accelerator lowering for this operator"


def cpu_operators(fn: Function, cfg: HwConfig | None = None) -> list[str]:
    """One line per CPU operator kind of ``fn`` (after accelerator lowering):
    ``"<op> x<count>: <reason>"``, most frequent first; calls of one op with different
    reasons get a line each."""
    infer_types(fn)
    counts: Counter[tuple[str, str]] = Counter()
    for e in post_order(fn):
        if not isinstance(e, Call) or e.op in (ACCEL_PROGRAM, "on_device"):
            continue
        if e.virtual_device is not None and e.virtual_device.kind == "accel":
            continue
        counts[(e.op, cpu_reason(e, cfg))] += 1
    return [f"{op} x{n}: {why}" for (op, why), n in counts.most_common()]
