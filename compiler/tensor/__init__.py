"""tensorfab.compiler.tensor: the tensor-level compiler (schedules, tensorization,
tokens, tile search) for single int8 operators.

The tensor-level compiler turns an int8 operator (:func:`conv2d`, :func:`dense`,
:func:`batch_matmul`) with a fused :class:`Epilogue` into a
:class:`~tensorfab.isa.Program`: a :class:`Schedule` (default: :func:`default_schedule`)
fixes the tiling, :func:`lower` tensorizes it onto GEMM/ALU micro-ops and inserts the
dependency tokens.
"""

from tensorfab.isa.builder import ProgramBuilder
from tensorfab.isa.layout import (
    pack_activation,
    pack_bias,
    pack_nchw,
    pack_oihw,
    pack_weight,
    unpack_nchw,
    unpack_output,
)

from .cost_model import CostEstimate, estimate_cost, program_traffic, roofline_cycles
from .epilogue import Epilogue
from .errors import CompileError
from .lower import lower
from .operators import CompiledOp, batch_matmul, compile_workload, conv2d, dense
from .quantize import accumulator_bound, quantize_multiplier
from .requant import fold_input_zero_point, quantize_multiplier_q31, quantize_multipliers
from .schedule import Primitive, Schedule, ScheduleError
from .tile_plan import TilePlan
from .tile_search import default_schedule, search_plan
from .tokens import Step, check_program_order, insert_tokens
from .workload import DENSE_LAYERS, RESNET18_CONV, Workload

__all__ = [
    "DENSE_LAYERS",
    "RESNET18_CONV",
    "CompileError",
    "CompiledOp",
    "CostEstimate",
    "Epilogue",
    "Primitive",
    "ProgramBuilder",
    "Schedule",
    "ScheduleError",
    "Step",
    "TilePlan",
    "Workload",
    "accumulator_bound",
    "batch_matmul",
    "check_program_order",
    "compile_workload",
    "conv2d",
    "default_schedule",
    "dense",
    "estimate_cost",
    "fold_input_zero_point",
    "insert_tokens",
    "lower",
    "pack_activation",
    "pack_bias",
    "pack_nchw",
    "pack_oihw",
    "pack_weight",
    "program_traffic",
    "quantize_multiplier",
    "quantize_multiplier_q31",
    "quantize_multipliers",
    "roofline_cycles",
    "search_plan",
    "unpack_nchw",
    "unpack_output",
]
