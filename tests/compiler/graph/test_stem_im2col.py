"""Small-channel convolutions as host im2col + 1×1 accelerator convolutions: the
``nn.im2col`` kernel against a numpy loop, and the rewritten chain on the functional
simulator bit-exact to the plain integer graph."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.compiler.graph import CPU, Call, Function, accel, post_order
from tensorfab.compiler.graph import builder as gb
from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
from tensorfab.compiler.graph.lower_runtime import evaluate
from tensorfab.compiler.graph.partitioning import annotate_accelerator
from tensorfab.compiler.graph.planning import plan_devices
from tensorfab.compiler.graph.stem_im2col import im2col_gain, im2col_small_channel_convs
from tensorfab.runtime.kernels import KERNELS


def im2col_loops(x: np.ndarray, k: tuple[int, int], s: tuple[int, int],
                 p: tuple[int, int, int, int]) -> np.ndarray:
    n, c, h, w = x.shape
    xp = np.zeros((n, c, h + p[0] + p[2], w + p[1] + p[3]), x.dtype)
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    out = np.zeros((n, c * k[0] * k[1], oh, ow), x.dtype)
    for ci in range(c):
        for i in range(k[0]):
            for j in range(k[1]):
                for y in range(oh):
                    for z in range(ow):
                        out[:, ci * k[0] * k[1] + i * k[1] + j, y, z] = \
                            xp[:, ci, y * s[0] + i, z * s[1] + j]
    return out


@pytest.mark.parametrize(("k", "s", "p"), [((7, 7), (2, 2), (3, 3, 3, 3)),
                                           ((3, 2), (1, 2), (1, 0, 2, 1))])
def test_im2col_kernel_matches_loops(k, s, p) -> None:
    x = np.random.default_rng(1).integers(-128, 128, (2, 3, 9, 8)).astype(np.int8)
    got = KERNELS["nn.im2col"]([x], {"kernel_size": k, "strides": s, "padding": p})
    np.testing.assert_array_equal(got, im2col_loops(x, k, s, p))


def test_gain() -> None:
    assert im2col_gain(3, (7, 7), 16) == (49, 10)
    assert im2col_gain(64, (3, 3), 16) == (36, 36)


def compile_chain(f: Function, cfg: str, im2col: bool) -> Function:
    planned = plan_devices(annotate_accelerator(fixed_point_requantize(f), accel(cfg)))
    if im2col:
        planned = im2col_small_channel_convs(planned)
    return lower_accelerator_chains(pack_accel_layouts(planned))


@pytest.mark.parametrize(("c", "k", "stride", "pad", "size"),
                         [(3, 7, 2, 3, 20), (1, 3, 1, 1, 8), (5, 5, 2, 2, 11)])
def test_stem_chain_bit_exact_on_fsim(c, k, stride, pad, size) -> None:
    r = np.random.default_rng(c * 100 + k)
    o = 20
    x = gb.var("x", (1, c, size, size), "int8", device=CPU)
    w = r.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    y = gb.conv2d_integer(x, w, np.int8(0), np.int8(0), strides=(stride, stride),
                          padding=(pad,) * 4)
    y = gb.add(y, r.integers(-5000, 5000, (o, 1, 1)).astype(np.int32))
    y = gb.relu(gb.requantize(y, np.float32(3e-3), np.int8(0), out_dtype="int8"))
    f = gb.function([x], gb.negative(y), result_device=CPU)
    compiled = compile_chain(f, "default", im2col=True)
    ops = [e.op for e in post_order(compiled) if isinstance(e, Call)]
    assert ops.count("nn.im2col") == 1 and ops.count("accel.program") == 1
    xv = r.integers(-128, 128, (1, c, size, size)).astype(np.int8)
    want = evaluate(fixed_point_requantize(f), [xv])
    np.testing.assert_array_equal(evaluate(compiled, [xv]), want)


def test_wide_convolution_is_left_alone() -> None:
    x = gb.var("x", (1, 32, 6, 6), "int8", device=CPU)
    w = np.ones((16, 32, 3, 3), np.int8)
    y = gb.requantize(gb.conv2d_integer(x, w, np.int8(0), np.int8(0), padding=(1,) * 4),
                      np.float32(1e-2), np.int8(0), out_dtype="int8")
    f = gb.function([x], gb.negative(y), result_device=CPU)
    compiled = compile_chain(f, "default", im2col=True)
    assert "nn.im2col" not in [e.op for e in post_order(compiled) if isinstance(e, Call)]


def test_im2col_type_errors_name_the_problem() -> None:
    from tensorfab.compiler.graph.infer import infer_types
    from tensorfab.compiler.graph.types import GraphError

    x = gb.var("x", (1, 3, 8, 8), "int8")
    y = Call("nn.im2col", [x], {"kernel_size": (3, 3), "strides": (0, 1)})
    with pytest.raises(GraphError, match="strides"):
        infer_types(y)
    z = Call("nn.im2col", [x], {"kernel_size": (9, 3)})
    with pytest.raises(GraphError, match="height"):
        infer_types(z)
    assert infer_types(Call("nn.im2col", [x], {"kernel_size": (3, 2), "strides": (2, 1),
                                               "padding": (1, 0, 1, 0)})).shape == (1, 18, 4, 7)
