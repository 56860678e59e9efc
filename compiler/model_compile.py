"""An ONNX model to a runtime program in one call: the pipeline of ``tensorfab compile``
and of ``tensorfab run model.onnx``.

:func:`compile_onnx` imports the model (checked, shapes inferred), folds batch norms and
constants, optionally quantizes it to int8 from calibration data (tensorfab's own
post-training quantization, :mod:`tensorfab.compiler.graph.ptq`, or onnxruntime's QDQ
quantizer), lowers QDQ patterns to integer operators with the accelerator's exact
per-channel requantization, and either plans it for the CPU or, given an accelerator
config, partitions it, plans devices, packs blocked layouts and compiles each
convolution chain with the tensor compiler. The result is the runtime's
:class:`~tensorfab.runtime.interpreter.GraphProgram`, ready for ``.tfm``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnx

from tensorfab.isa import HwConfig, TensorfabError, get_config
from tensorfab.runtime.artifact import CPU_CONVOLUTION_COMMENT
from tensorfab.runtime.interpreter import GraphProgram

from .frontend.onnx_import import PreparedOnnx
from .graph.cpu_operators import cpu_operators
from .graph.ir import Call, Function, post_order
from .graph.partitioning import cpu_convolutions
from .graph.printer import astext
from .graph.types import GraphError
from .tensor.schedule_source import ScheduleSource
from .tensor.vector_program import vector_program_refusal

__all__ = ["DEFAULT_QUANTIZER", "QUANTIZERS", "CompiledModel", "FloatModelError",
           "ModelCompileError", "calibration_batches", "compile_onnx", "is_quantized"]

#: Post-training quantizers: tensorfab's own, or onnxruntime's ``quantize_static``.
QUANTIZERS = ("tensorfab", "ort")
#: The default quantizer (see docs/quantization.md for why).
DEFAULT_QUANTIZER = "tensorfab"
#: Calibration batch size for inputs whose batch dim is symbolic.
CALIBRATION_BATCH = 64


class ModelCompileError(TensorfabError):
    """A model and options that cannot compile (names the file, the input, the fix)."""


class FloatModelError(ModelCompileError):
    """A float model compiled for the accelerator without calibration data.

    Attributes
    ----------
    where : str
        The model (its file, or a description of the graph).
    """

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.where = where


@dataclass
class CompiledModel:
    """What :func:`compile_onnx` returns.

    Attributes
    ----------
    program : GraphProgram
        The runtime program.
    function : Function
        The compiled graph (planned; accelerator chains as ``accel.program`` calls).
    config : HwConfig or None
        The accelerator's config (None: all on the CPU).
    quantized : bool
        Whether the program computes in int8.
    graph_text : str
        ``function``'s text form with its large constants as ``meta[c<slot>]``, the
        program's constant slots (stored in the ``.tfm``; ``tensorfab inspect`` prints
        it). With an accelerator, it starts with one ``//`` comment line per convolution
        left on the CPU, saying why (the parser skips comments).
    cpu_convolutions : tuple of str
        With an accelerator: the convolutions left on the CPU, each with the reason
        (:func:`~tensorfab.compiler.graph.partitioning.cpu_convolutions`).
    cpu_operators : tuple of str
        With an accelerator: every operator kind left on the CPU, with its count and
        reason (:func:`~tensorfab.compiler.graph.cpu_operators.cpu_operators`).
    integer_function : Function or None
        The graph after lowering to integer operators, before partitioning: evaluated
        on the CPU kernels (:func:`~tensorfab.compiler.graph.lower_runtime.evaluate`) it
        is the bit-exact reference of ``program`` on any executor.
    """

    program: GraphProgram
    function: Function
    config: HwConfig | None
    quantized: bool
    graph_text: str = ""
    cpu_convolutions: tuple[str, ...] = ()
    integer_function: Function | None = None
    cpu_operators: tuple[str, ...] = ()


def check_input_shapes(model: PreparedOnnx, input_shapes: Mapping[str, Sequence[int | str]]
                       | None = None) -> None:
    """Raise :class:`ModelCompileError` if ``input_shapes`` (``--shape``) names no input
    of ``model``, gives an input another number of dims than the model declares, or a
    dim of zero or less."""
    graph = model.proto.graph
    inits = {i.name for i in graph.initializer}
    inputs = {v.name: v for v in graph.input if v.name not in inits}
    for name, dims in (input_shapes or {}).items():
        value = inputs.get(name)
        if value is None:
            raise ModelCompileError(f"{model.where}: --shape {name}=...: the model has no "
                                    f"input {name!r}; its inputs: {', '.join(inputs)}")
        bad = [(k, d) for k, d in enumerate(dims) if isinstance(d, int) and d < 1]
        if bad:
            k, d = bad[0]
            raise ModelCompileError(f"{model.where}: input {name!r} given the shape "
                                    f"{tuple(dims)}: dim {k} is {d}; every dim is at "
                                    "least 1")
        t = value.type.tensor_type
        if value.type.WhichOneof("value") == "tensor_type" and t.HasField("shape") \
                and len(t.shape.dim) != len(dims):
            declared = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or "?"
                             for d in t.shape.dim)
            raise ModelCompileError(
                f"{model.where}: input {name!r} given the shape {tuple(dims)} of "
                f"{len(dims)} dims, but the model declares {len(declared)}: {declared}")


def check_fixed_inputs(model: PreparedOnnx, input_shapes: Mapping[str, Sequence[int | str]]
                       | None = None) -> None:
    """Raise :class:`ModelCompileError` if an input of ``model`` keeps a symbolic dim
    (the accelerator needs fixed shapes), suggesting the ``--shape`` that fixes it.

    Parameters
    ----------
    model : PreparedOnnx
        The loaded ONNX model (:func:`~tensorfab.compiler.frontend.onnx_import.load_onnx`).
    input_shapes : mapping, optional
        The shapes given per input name.
    """
    from .frontend.onnx_import import symbolic_inputs

    check_input_shapes(model, input_shapes)
    for name, dims in (input_shapes or {}).items():
        if any(isinstance(d, str) for d in dims):
            raise ModelCompileError(
                f"{model.where}: --shape {name}={','.join(map(str, dims))}: the "
                "accelerator needs fixed shapes: give every dim as a number")
    symbolic = symbolic_inputs(model, dict(input_shapes or {}))
    if symbolic:
        name, shape = symbolic[0]
        raise ModelCompileError(
            f"{model.where}: input {name!r} has symbolic dims {shape}; the accelerator "
            f"needs fixed shapes: {shape_hint(name, shape)}")


def shape_hint(name: str, shape: Sequence[int | str]) -> str:
    """The ``--shape`` that fixes input ``name``'s symbolic dims: ``pass --shape
    x=1,3,D2,8 (D2, D3, ... the sizes to run it at)`` (the batch as 1)."""
    example = ",".join(str(d) if isinstance(d, int) else "1" if i == 0 else f"D{i}"
                       for i, d in enumerate(shape))
    sizes = ("any fixed sizes" if "D" not in example
             else "D2, D3, ... the sizes to run it at")
    return f"pass --shape {name}={example} ({sizes})"


#: What the frontend says of an operator whose run-time parameters leave its rank
#: unknown (:meth:`~tensorfab.compiler.frontend.onnx_ops.NodeContext.output_shape`).
RUN_TIME_RANK = "with parameters computed at run time the rank must be known"


@contextmanager
def hint_shape_on_symbol(model: PreparedOnnx,
                         input_shapes: Mapping[str, Sequence[int | str]] | None) -> Iterator[None]:
    """Add the ``--shape`` hint (:func:`shape_hint`) to a :class:`GraphError` raised
    inside that names a symbolic dim of an input of ``model`` (``height is the symbol
    'x_d2'; it must be static``), or that a shape computed at run time from them has
    no known rank (a PyTorch export's ``x.view(x.size(0), -1)``: ``Shape → Gather →
    Concat → Reshape``, a constant once the input's shape is fixed): on the CPU, where
    symbolic inputs are allowed up to an operator that needs the dim fixed. Any other
    error passes through unchanged (with the model's file it names)."""
    from .frontend.onnx_import import symbolic_inputs

    try:
        yield
    except GraphError as exc:
        message = str(exc)
        run_time_shape = RUN_TIME_RANK in message
        for name, shape in symbolic_inputs(model, dict(input_shapes or {})):
            if run_time_shape or any(f"symbol {d!r}" in message
                                     for d in shape if isinstance(d, str)):
                exc.args = (f"{message}: {shape_hint(name, shape)}", *exc.args[1:])
                break
        raise


def calibration_batches(fn: Function, arrays: Mapping[str, np.ndarray] | np.ndarray
                        ) -> list[dict[str, np.ndarray]]:
    """Calibration samples (input name to an array of samples along axis 0, or one array
    for a model with one input) cut into batches that fit ``fn``'s inputs: the fixed
    batch size of an input whose dim 0 is fixed (samples repeated when there are
    fewer), else :data:`CALIBRATION_BATCH`. Arrays of one more dim than their inputs
    (inputs without a batch axis, rank-0 ones included) give one run per sample; the
    other inputs then give one sample a run (a batch of 1). A rank-0 input given one
    value (a 0-dim array) takes that value in every run.

    Raises
    ------
    ModelCompileError
        A missing or unknown input name, a 0-dim array for an input of rank 1 or more,
        inputs with different sample counts, or inputs given one sample per run while
        another's batch dim is fixed above 1.
    """
    names = [p.name for p in fn.params]
    if isinstance(arrays, np.ndarray):
        if len(names) != 1:
            raise ModelCompileError(f"calibration data: one array fits a model with one "
                                    f"input; the model takes {names}: give an .npz keyed "
                                    "by input name")
        arrays = {names[0]: arrays}
    missing = [n for n in names if n not in arrays]
    extra = [n for n in arrays if n not in names]
    if missing or extra:
        raise ModelCompileError(f"calibration data: inputs missing {missing}, unknown "
                                f"{extra}; the model takes {names}")
    shapes = {p.name: p.type_annotation.shape  # type: ignore[union-attr]
              for p in fn.params}
    scalars = [n for n in names if np.ndim(arrays[n]) == 0 and len(shapes[n])]
    if scalars:
        raise ModelCompileError(f"calibration data: input {scalars[0]!r} is a single value "
                                "(a 0-dim array), not samples along axis 0: give an array "
                                "of shape (samples, ...)")
    # a rank-0 input given one value: the same in every run
    fixed_values = {n: np.asarray(arrays[n]) for n in names if np.ndim(arrays[n]) == 0}
    sampled = [n for n in names if n not in fixed_values]
    if not sampled:
        return [fixed_values]
    counts = {len(np.asarray(arrays[n])) for n in sampled}
    if len(counts) != 1:
        raise ModelCompileError(f"calibration data: the inputs have different sample "
                                f"counts {sorted(counts)}")
    count = counts.pop()
    if count == 0:
        raise ModelCompileError("calibration data: no samples")
    data = {n: np.asarray(arrays[n]) for n in sampled}
    # an array of one more dim than its input holds whole inputs along axis 0 (an input
    # without a batch axis, (8,) or (), given as (samples, 8) or (samples,)): one run
    # per sample, the batched inputs one sample (a batch of 1) each
    whole = [n for n in sampled if data[n].ndim == len(shapes[n]) + 1]
    if whole:
        batched = [n for n in sampled if n not in whole]
        for n in batched:
            if isinstance(shapes[n][0], int) and shapes[n][0] != 1:
                w = whole[0]
                raise ModelCompileError(
                    f"calibration data: {w!r} has one sample per run (its array "
                    f"{data[w].shape} for an input of {len(shapes[w])} dims) while {n!r} "
                    f"takes batches of {shapes[n][0]} (its dim 0 is fixed): give {n!r} "
                    f"whole inputs too, an array of shape (samples, {shapes[n][0]}, ...)")
        return [{n: (data[n][i] if n in whole else data[n][i:i + 1]) if n in data
                 else fixed_values[n] for n in names} for i in range(count)]
    fixed = [d for n in sampled for d in shapes[n][:1] if isinstance(d, int)]
    batch = fixed[0] if fixed else CALIBRATION_BATCH
    if fixed and count < batch:  # repeat the samples to fill one batch
        data = {n: np.resize(v, (batch, *v.shape[1:])).astype(v.dtype)
                for n, v in data.items()}
        count = batch
    stop = count - count % batch if fixed else count  # a fixed batch: whole batches
    return [{n: data[n][i:i + batch] if n in data else fixed_values[n] for n in names}
            for i in range(0, stop, batch)]


#: ONNX operators of a model that is quantized already (QDQ or integer operators).
QUANTIZED_OP_TYPES = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv",
                                "QLinearMatMul", "ConvInteger", "MatMulInteger"})


def is_quantized(model: PreparedOnnx) -> bool:
    """Whether the ONNX ``model`` is quantized already (QDQ pairs or integer operators):
    its quantization is the model's, and calibration data has nothing to do."""
    return any(n.op_type in QUANTIZED_OP_TYPES for n in model.proto.graph.node)


def _has_int8(fn: Function) -> bool:
    return any(isinstance(e, Call) and e.op.startswith("qnn.") for e in post_order(fn))


def compile_onnx(model: onnx.ModelProto | str | os.PathLike | PreparedOnnx, *,
                 config: str | HwConfig | None = None,
                 calibration: Mapping[str, np.ndarray] | np.ndarray | None = None,
                 quantizer: str = DEFAULT_QUANTIZER, method: str = "minmax",
                 percentile: float = 99.99,
                 input_shapes: Mapping[str, Sequence[int | str]] | None = None,
                 progress: Callable[[str], None] | None = None,
                 residual_adds: str = "auto",
                 quantize_options: Mapping[str, bool | int] | None = None,
                 schedules: ScheduleSource | None = None,
                 requant_stage: str = "store") -> CompiledModel:
    """Compile an ONNX model for the runtime (see the module docstring).

    Parameters
    ----------
    model : onnx.ModelProto, path or PreparedOnnx
        The model (float, or already quantized in QDQ form); loaded and checked once
        here, not at all when given prepared
        (:func:`~tensorfab.compiler.frontend.load_onnx`).
    config : str or HwConfig, optional
        The accelerator (a preset name or a JSON config file); None: all on the CPU.
    calibration : mapping, optional
        Calibration samples, input name to an array (samples along axis 0), or one array
        for a model with one input; given, the model is quantized to int8 with
        ``quantizer``, unless it is quantized already (:func:`is_quantized`: then the
        data is not used).
    quantizer : str
        ``"tensorfab"`` (:func:`~tensorfab.compiler.graph.ptq.quantize_graph`) or
        ``"ort"`` (:func:`~tensorfab.compiler.frontend.quantize_onnx`).
    method, percentile : str, float
        The activation observer (``"minmax"`` or ``"percentile"``) and its percentile.
    input_shapes : mapping, optional
        Shapes replacing the declared shapes of named inputs.
    progress : callable, optional
        Called with a description of each step.
    residual_adds : str
        Where int8 residual adds run with an accelerator: ``"auto"`` (fused into the
        convolution before them where they can be,
        :func:`~tensorfab.compiler.graph.residual_fusion.fuse_residual_adds`, the others
        by the partitioner's cost model), ``"cpu"`` or ``"accel"`` (separate adds,
        :func:`~tensorfab.compiler.graph.partitioning.annotate_accelerator`).
    quantize_options : mapping, optional
        Options of tensorfab's quantizer
        (:func:`~tensorfab.compiler.graph.ptq.quantize_graph`: ``activation_matmuls``,
        ``residual_adds``, ``per_channel_outputs``, for transformers).
    schedules : ScheduleSource, optional
        Asked for each accelerator convolution's schedule (e.g. a tuning log) before
        the tile search.
    requant_stage : str
        Where the accelerator convolutions' one-pass REQUANT runs
        (:attr:`~tensorfab.compiler.Epilogue.requant_stage`): ``"store"`` (the STOREs
        requantize) or ``"alu"`` (an ALU pass before them).

    Raises
    ------
    ModelCompileError
        Symbolic dims with an accelerator (the message suggests ``--shape``), a float
        model for the accelerator without calibration, an unknown quantizer.
    OnnxImportError, GraphError, CompileError
        From the steps (each names the file, node or layer).
    """
    from .frontend import from_onnx, quantize_onnx
    from .frontend.onnx_import import load_onnx
    from .frontend.onnx_ops import OnnxImportError
    from .graph import accel
    from .graph.accel_lowering import accel_chain_macs, lower_accelerator_chains, with_macs
    from .graph.activation_matmul_lowering import lower_activation_matmuls
    from .graph.asymmetric_qdq import lower_asymmetric_qdq
    from .graph.batch_norm_folding import fold_batch_norm
    from .graph.channel_affine_as_conv import channel_affine_as_conv
    from .graph.channel_shuffle import channel_shuffles_as_permutes
    from .graph.constant_folding import fold_constants
    from .graph.dense_as_conv import dense_as_conv
    from .graph.fixed_point import fixed_point_requantize, rounding_for
    from .graph.layout_planning import pack_accel_layouts
    from .graph.lower_runtime import lower_to_runtime
    from .graph.mobile_activations import fold_hard_sigmoid, recognize_hard_swish
    from .graph.partitioning import annotate_accelerator
    from .graph.planning import plan_devices
    from .graph.ptq import quantize_graph
    from .graph.qdq_lowering import lower_qdq
    from .graph.residual_fusion import fuse_residual_adds
    from .graph.stem_im2col import im2col_small_channel_convs

    say = progress or (lambda _text: None)
    if quantizer not in QUANTIZERS:
        raise ModelCompileError(f"unknown quantizer {quantizer!r}; known: "
                                f"{', '.join(QUANTIZERS)}")
    cfg = get_config(config) if isinstance(config, str | os.PathLike) else config
    say("importing the ONNX model")
    prepared = load_onnx(model)
    where = prepared.where
    if cfg is not None:  # (it checks the --shape names and ranks first)
        check_fixed_inputs(prepared, input_shapes)
    else:
        check_input_shapes(prepared, input_shapes)
    with hint_shape_on_symbol(prepared, input_shapes):
        fn = fold_constants(fold_hard_sigmoid(recognize_hard_swish(
            fold_batch_norm(from_onnx(prepared, input_shapes)))))
    if calibration is not None and is_quantized(prepared):
        # (onnxruntime's quantizer would quantize the QDQ pairs again into an invalid
        # model; tensorfab's would change the model's own choice of float layers)
        say("the model is quantized already: the calibration data is not used")
    elif calibration is not None:
        batches = calibration_batches(fn, calibration)
        if quantizer == "ort":
            say(f"quantizing with onnxruntime ({method}, {len(batches)} calibration "
                "batches)")
            try:
                qdq = quantize_onnx(prepared.proto, batches, per_channel=True, method=method,
                                    percentile=percentile)
            except OnnxImportError as e:
                raise OnnxImportError(f"{where}: {e}") from e
            fn = fold_constants(from_onnx(qdq, input_shapes))
        else:
            if cfg is not None:  # unfoldable batch norms run on the accelerator
                fn = channel_affine_as_conv(fn)
            say(f"quantizing ({method}, {len(batches)} calibration batches)")
            fn = fold_constants(quantize_graph(fn, batches, method=method,
                                               percentile=percentile,
                                               **(quantize_options or {})))
    say("lowering to integer operators")
    # dense layers as 1x1 convolutions reach the accelerator
    rounding = rounding_for(cfg)
    fn = fixed_point_requantize(dense_as_conv(lower_qdq(lower_asymmetric_qdq(fn))),
                                per_channel=True, rounding=rounding,
                                every_q31=cfg is not None and not cfg.vector_alu)
    if cfg is not None:  # one operator the accelerator runs, not three data moves
        fn = channel_shuffles_as_permutes(fn)
    if cfg is not None and rounding == "single" and residual_adds == "auto" \
            and vector_program_refusal(cfg) is None:
        say("fusing residual adds into the convolutions before them")
        fn = fuse_residual_adds(fn)
    quantized = _has_int8(fn)
    integer = fn
    if cfg is None:
        fn = plan_devices(fn)
    else:
        if not quantized and calibration is None:
            raise FloatModelError(
                f"{where} is a float model and the accelerator runs int8 layers: pass "
                "calibration data (--calib) to quantize it, or no --config to run it on "
                "the CPU", where)
        name = cfg.name
        say(f"partitioning and planning for the accelerator ({name})")
        plain = im2col_small_channel_convs(plan_devices(annotate_accelerator(
            fn, accel(cfg), residual_adds=residual_adds)))
        planned = pack_accel_layouts(plain)
        say(f"compiling the accelerator layers ({name})")
        fn = with_macs(lower_accelerator_chains(planned, schedules, requant_stage),
                       accel_chain_macs(plain))
        fn = lower_activation_matmuls(fn, accel(cfg))
    say("lowering to the runtime")
    slots: dict[int, int] = {}
    program = lower_to_runtime(fn, slots)
    text = astext(fn, lambda c: f"c{slots[id(c)]}" if id(c) in slots else None)
    on_cpu = tuple(cpu_convolutions(fn, cfg)) if cfg is not None else ()
    text = "".join(f"{CPU_CONVOLUTION_COMMENT}{line}\n" for line in on_cpu) + text
    cpu_ops = tuple(cpu_operators(fn, cfg)) if cfg is not None else ()
    return CompiledModel(program, fn, cfg, quantized, text, on_cpu, integer, cpu_ops)
