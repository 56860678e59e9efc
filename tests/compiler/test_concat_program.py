"""Channel concatenation (``qnn.concat_q31``) as an accelerator program: bit-exact
against an independent numpy reference (REQUANT's rounding written in the tests' support),
against the graph's CPU kernel, within half an output step of the float concatenation,
and on the RTL executor against the functional simulator."""

from __future__ import annotations

import numpy as np
import pytest
from support.gemmlowp_reference import requant_single

from tensorfab.compiler import check_program_order
from tensorfab.compiler.tensor.concat import concat_attrs, concat_program
from tensorfab.compiler.tensor.errors import CompileError
from tensorfab.isa import PRESETS, AluOp
from tensorfab.isa.insn import Alu, Store
from tensorfab.runtime.kernels import KERNELS
from tensorfab.sim import FunctionalSimulator

FSIM = FunctionalSimulator()
CFG = PRESETS["default"]


def _int8(r: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return r.integers(-128, 128, shape).astype(np.int8)


def reference(x: np.ndarray, attrs: dict, k: str) -> np.ndarray:
    """Input ``k`` at the output's scale: ``(x - z_x) · m`` rounded once by ``31 - e``
    bits, + the output's zero point, clamped."""
    v = x.astype(np.int64) - attrs[f"{k}_zero_point"]
    return requant_single(v, attrs[f"{k}_multiplier"], attrs[f"{k}_shift"],
                          attrs["zero_point"])


CASES = [  # seed, a blocks, b blocks, H, W, tile, scales equal, zero points
    (0, 2, 1, 5, 7, 256, False, (0, 0, 0)),
    (1, 1, 3, 9, 9, 32, False, (0, 0, 5)),     # ragged tiles, output zero point
    (2, 4, 2, 3, 3, 8, True, (0, 0, 0)),       # copies only: no ALU at all
    (3, 1, 1, 1, 1, 4, False, (-128, 17, -3)),  # an asymmetric model's zero points
    (4, 3, 2, 6, 10, 64, True, (-5, 2, -5)),   # a copied and a requantized input
]


@pytest.mark.parametrize("stage", ["store", "alu"])
@pytest.mark.parametrize(("seed", "na", "nb", "h", "w", "tile", "equal", "zps"), CASES)
def test_fsim_equals_reference_and_cpu_kernel(seed, na, nb, h, w, tile, equal, zps,
                                              stage) -> None:
    r = np.random.default_rng(seed)
    a, b = _int8(r, (1, na, h, w, 1, 16)), _int8(r, (1, nb, h, w, 1, 16))
    s_y = float(np.float32(10 ** r.uniform(-2, 0)))
    s_a = s_y if equal else float(np.float32(s_y * r.uniform(0.3, 1.5)))
    s_b = float(np.float32(s_y * r.uniform(0.3, 1.5)))
    attrs = concat_attrs(s_a, zps[0], s_b, zps[1], s_y, zps[2])
    p = concat_program(CFG, a.shape, b.shape, attrs, a, b, tile=tile, requant_stage=stage)
    check_program_order(p.insns, p.config.dep_queue_depth)
    requants = sum(1 for i in p.insns if getattr(i, "op", None) == AluOp.REQUANT)
    requant_stores = sum(1 for i in p.insns if isinstance(i, Store) and i.requant)
    copies = equal and zps[0] == zps[2]  # input a at the output's scale: copied
    tiles = (na + nb) * -(-(h * w) // min(tile, h * w))  # b is scaled: every tile
    assert (requants, requant_stores) == ((0, tiles) if stage == "store" else (tiles, 0))
    got = FSIM.run(p).outputs["out"]
    want = np.concatenate([reference(a, attrs, "a"), reference(b, attrs, "b")], axis=1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, KERNELS["qnn.concat_q31"]([a, b], attrs))
    if copies:
        np.testing.assert_array_equal(got[:, :na], a)
    real = np.concatenate([(a.astype(np.float64) - zps[0]) * s_a,
                           (b.astype(np.float64) - zps[1]) * s_b], axis=1) / s_y + zps[2]
    inside = np.abs(real) < 127
    assert np.abs(got - real)[inside].max() <= 0.5 + 1e-6


@pytest.mark.parametrize("stage", ["store", "alu"])
@pytest.mark.parametrize(("seed", "ca", "cb", "equal"), [
    (0, 8, 8, True),      # DenseNet's growth of 8: both halves in one block
    (1, 24, 8, False),    # the next layer's 24 + 8
    (2, 20, 30, False),   # neither a whole block
    (3, 16, 5, True)])    # a whole block, then a part
def test_channels_that_are_no_whole_blocks_are_gathered(seed, ca, cb, equal, stage) -> None:
    """An input of ``C_a`` channels that is no whole number of blocks: output blocks
    take lanes of both inputs (the blocked layout's padding lanes of ``a`` are
    skipped), equal to numpy's concatenation of the plain tensors."""
    from tensorfab.runtime.layout_transform import layout_transform

    r = np.random.default_rng(seed)
    pa, pb = (_int8(r, (1, c, 3, 5)) for c in (ca, cb))
    a, b = (layout_transform(p, "NCHW", "NCHW1n16c") for p in (pa, pb))
    s_y = 0.05
    attrs = concat_attrs(s_y if equal else 0.03, 0, 0.07, -3, s_y, 2) | {
        "a_channels": ca, "b_channels": cb}
    p = concat_program(CFG, a.shape, b.shape, attrs, a, b, tile=8, requant_stage=stage)
    check_program_order(p.insns, p.config.dep_queue_depth)
    got = FSIM.run(p).outputs["out"]
    want_plain = np.concatenate([reference(pa, attrs, "a"), reference(pb, attrs, "b")], 1)
    np.testing.assert_array_equal(got, layout_transform(want_plain, "NCHW", "NCHW1n16c"))


def test_inputs_at_the_outputs_scale_are_copied_without_the_alu() -> None:
    r = np.random.default_rng(5)
    a, b = _int8(r, (1, 2, 4, 4, 1, 16)), _int8(r, (1, 1, 4, 4, 1, 16))
    attrs = concat_attrs(0.05, 3, 0.05, 3, 0.05, 3)
    p = concat_program(CFG, a.shape, b.shape, attrs, a, b, tile=16)
    assert not any(isinstance(i, Alu) for i in p.insns)
    np.testing.assert_array_equal(FSIM.run(p).outputs["out"], np.concatenate([a, b], 1))
    # no REQUANT needed: a config without it copies too
    tiny = PRESETS["tiny"]
    a4, b4 = _int8(r, (1, 1, 2, 3, 1, 4)), _int8(r, (1, 2, 2, 3, 1, 4))
    out = FSIM.run(concat_program(tiny, a4.shape, b4.shape, attrs, a4, b4)).outputs["out"]
    np.testing.assert_array_equal(out, np.concatenate([a4, b4], 1))


def test_shapes_and_configs_the_program_cannot_take_are_refused() -> None:
    attrs = concat_attrs(0.1, 0, 0.05, 0, 0.1, 0)
    with pytest.raises(CompileError, match="blocked NCHW"):
        concat_program(CFG, (1, 16, 4, 4), (1, 16, 4, 4), attrs)
    with pytest.raises(CompileError, match="the same height, width"):
        concat_program(CFG, (1, 1, 4, 4, 1, 16), (1, 1, 4, 5, 1, 16), attrs)
    with pytest.raises(CompileError, match="one batch block"):
        concat_program(CFG, (2, 1, 4, 4, 1, 16), (2, 1, 4, 4, 1, 16), attrs)
    with pytest.raises(CompileError, match="has no REQUANT"):
        concat_program(PRESETS["tiny"], (1, 1, 2, 2, 1, 4), (1, 1, 2, 2, 1, 4), attrs)
    with pytest.raises(CompileError, match="missing attributes"):
        concat_program(CFG, (1, 1, 2, 2, 1, 16), (1, 1, 2, 2, 1, 16), {})
    with pytest.raises(CompileError, match=r"^qnn\.concat_q31: requant_stage 'dma' is "
                                           r"neither 'store' nor 'alu'$"):
        concat_program(CFG, (1, 1, 2, 2, 1, 16), (1, 1, 2, 2, 1, 16), attrs,
                       requant_stage="dma")


@pytest.mark.slow
def test_rtl_equals_fsim() -> None:
    from tensorfab.sim.rtl import RtlSimulator

    r = np.random.default_rng(7)
    a, b = _int8(r, (1, 3, 6, 10, 1, 16)), _int8(r, (1, 2, 6, 10, 1, 16))
    rtl = RtlSimulator()
    for attrs in (concat_attrs(0.1, 0, 0.04, 0, 0.1, 0),
                  concat_attrs(0.03, -128, 0.05, 11, 0.07, -20)):
        for stage in ("store", "alu"):
            p = concat_program(CFG, a.shape, b.shape, attrs, a, b, tile=64,
                               requant_stage=stage)
            np.testing.assert_array_equal(rtl.run(p).outputs["out"],
                                          FSIM.run(p).outputs["out"])
