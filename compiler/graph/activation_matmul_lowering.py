"""Batched matmuls of two int8 activations (attention's ``Q·Kᵀ`` and ``P·V``) as
accelerator programs.

``qnn.requantize_fixed(qnn.matmul_integer(a, b, 0, 0))`` with ``a`` ``(..., M, K)`` and
``b`` ``(..., K, N)`` int8 (the same leading dims, ``G`` matrices in all, e.g. one per
head) is :func:`tensorfab.compiler.batch_matmul`'s program: ``G`` GEMMs with their own
operands and the fused requantization. Neither operand is a constant, so the program's
``inp`` segment (``a``, blocked as activations) and its ``wgt`` segment (``b``
transposed, blocked as weights) are both written at run time: the CPU relayouts ``a``
and ``b`` with ``reshape``/``transpose``/``layout_transform`` (``layout_transform``
blocks every matrix's rows alone because ``M`` and ``N`` are multiples of the blocks),
and the ``accel.program`` call takes the blocked ``b`` as its second input
(``extra_input_segment="wgt"``). Its ``out`` segment goes back to ``(..., M, N)`` the
same way.

:func:`activation_matmul_refusal` says why one stays on the CPU.
"""

from __future__ import annotations

import numpy as np

from tensorfab.compiler.tensor.epilogue import Epilogue
from tensorfab.compiler.tensor.operators import batch_matmul
from tensorfab.compiler.tensor.timing import estimated_program_cycles
from tensorfab.isa import HwConfig
from tensorfab.runtime.accel_contract import ACCEL_PROGRAM

from .accel_lowering import naming_nodes
from .device import CPU, VirtualDevice
from .infer import infer_types
from .ir import Call, Constant, Expr, Function, post_order
from .layout_planning import hw_config_of
from .rewrite import rebuild
from .types import TensorType

__all__ = ["activation_matmul_refusal", "lower_activation_matmuls"]


def _int_shape(e: Expr) -> tuple[int, ...] | None:
    t = infer_types(e)
    if not isinstance(t, TensorType) or not all(isinstance(d, int) for d in t.shape):
        return None
    return tuple(int(d) for d in t.shape)  # type: ignore[arg-type]


def activation_matmul_refusal(mm: Call, cfg: HwConfig) -> str | None:
    """Why the accelerator of ``cfg`` does not take the ``qnn.matmul_integer`` ``mm`` of
    two activations (None: it takes it)."""
    a, b = mm.args[0], mm.args[1]
    if isinstance(b, Constant):
        return "a constant weight (a dense layer, not an activation matmul)"
    if not all(isinstance(z, Constant) and not np.any(z.data) for z in mm.args[2:]):
        return "a nonzero zero point: the accelerator takes symmetric int8"
    sa, sb = _int_shape(a), _int_shape(b)
    if sa is None or sb is None:
        return "symbolic dims"
    if infer_types(a).dtype != "int8" or infer_types(b).dtype != "int8":  # type: ignore[union-attr]
        return "its operands are not int8"
    if len(sa) < 3 or sa[:-2] != sb[:-2]:
        return f"operands {sa} and {sb} are not batches of matrices with equal batch dims"
    m, n = sa[-2], sb[-1]
    if m % cfg.batch or n % cfg.block_out:
        return (f"rows {m} and columns {n} are not multiples of the config's batch "
                f"{cfg.batch} and block_out {cfg.block_out}")
    return None


def _requantized_matmul(e: Expr) -> Call | None:
    """The ``qnn.matmul_integer`` under ``e`` if ``e`` is its per-tensor
    ``qnn.requantize_fixed`` (the only pattern lowered)."""
    if not (isinstance(e, Call) and e.op == "qnn.requantize_fixed"):
        return None
    mm = e.args[0]
    if isinstance(mm, Call) and mm.op == "qnn.matmul_integer" and \
            not isinstance(mm.args[1], Constant):
        return mm
    return None


def _lowered(requant: Call, a: Expr, b: Expr, mm: Call, device: VirtualDevice) -> Expr:
    cfg = hw_config_of(device)
    sa, sb = _int_shape(mm.args[0]), _int_shape(mm.args[1])
    assert sa is not None and sb is not None
    *lead, m, k = sa
    n = sb[-1]
    g = int(np.prod(lead))
    op = batch_matmul(cfg, np.zeros((g, m, k), np.int8), np.zeros((g, k, n), np.int8),
                      epilogue=Epilogue(requant=(requant.attrs["multiplier"],
                                                 requant.attrs["shift"])))
    blob = np.frombuffer(op.program.to_bytes(), np.uint8).copy()
    act = f"NCHW{cfg.batch}n{cfg.block_in}c"
    out = f"NCHW{cfg.batch}n{cfg.block_out}c"
    wgt = f"OIHW{cfg.block_out}o{cfg.block_in}i"
    x = Call("layout_transform", [Call("reshape", [a], {"newshape": (g * m, k, 1, 1)}, CPU)],
             {"src_layout": "NCHW", "dst_layout": act}, CPU)
    nd = len(sb)
    bt = Call("transpose", [b], {"axes": (*range(nd - 2), nd - 1, nd - 2)}, CPU)
    w = Call("layout_transform", [Call("reshape", [bt], {"newshape": (g * n, k, 1, 1)}, CPU)],
             {"src_layout": "OIHW", "dst_layout": wgt}, CPU)
    out_shape = op.program.segment("out").shape
    y = Call(ACCEL_PROGRAM, [x, Constant(blob, device), w],
             {"out_shape": out_shape, "layer": f"batch_matmul {g}x{m}x{k}x{n}",
              "extra_input_segment": "wgt", "macs": g * m * k * n,
              "estimated_cycles": estimated_program_cycles(op.program)}, device,
             mm.name)
    plain = Call("layout_transform", [y], {"src_layout": out, "dst_layout": "NCHW"}, CPU)
    return Call("reshape", [plain], {"newshape": (*lead, m, n)}, CPU)


def lower_activation_matmuls(fn: Function, device: VirtualDevice) -> Function:
    """``fn`` with every requantized int8 activation matmul the accelerator of ``device``
    takes as an ``accel.program`` (see the module docstring); the others unchanged."""
    cfg = hw_config_of(device)
    infer_types(fn)
    new: dict[int, Expr] = {}
    for node in post_order(fn):
        rebuilt = rebuild(node, new)
        mm = _requantized_matmul(node)
        if mm is not None and activation_matmul_refusal(mm, cfg) is None:
            with naming_nodes([mm, node]):
                rebuilt = _lowered(node, new[id(mm.args[0])],  # type: ignore[arg-type]
                                   new[id(mm.args[1])], mm, device)
        new[id(node)] = rebuilt
    out = new[id(fn)]
    assert isinstance(out, Function)
    infer_types(out)
    return out
