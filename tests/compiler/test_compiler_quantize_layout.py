"""quantize_multiplier, the epilogue's ALU sequence, and the graph_pack layouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorfab.compiler import (
    Epilogue,
    accumulator_bound,
    pack_bias,
    pack_nchw,
    pack_oihw,
    quantize_multiplier,
    unpack_nchw,
)
from tensorfab.isa import AluOp
from tensorfab.sim.testing.numpy_reference import round_shift


@settings(max_examples=300, deadline=None)
@given(scale=st.floats(1e-6, 50.0), bound=st.integers(1, 1 << 24))
def test_quantize_multiplier_limits_and_precision(scale, bound):
    try:
        mult, shift = quantize_multiplier(scale, bound)
    except ValueError:
        assert round(scale) * bound > (1 << 31) - 1 or round(scale) > 32767
        return
    cap = min(32767, ((1 << 31) - 1) // bound)
    assert 0 <= mult <= cap and 0 <= shift <= 31
    assert mult * bound <= (1 << 31) - 1  # no int32 overflow for |acc| <= bound
    if mult:
        # largest multiplier: doubling it (one more bit of shift) would break a limit
        assert shift == 31 or round(scale * 2 ** (shift + 1)) > cap
        assert abs(mult / 2**shift - scale) <= 2 ** -(shift + 1) + 1e-12


def test_quantize_multiplier_examples():
    assert quantize_multiplier(0.5) == (16384, 15)
    assert quantize_multiplier(1.0) == (16384, 14)
    # a 3x3x64 convolution: 576 * 2^14 bound leaves 8 bits of multiplier
    mult, _ = quantize_multiplier(0.001, accumulator_bound(576))
    assert mult <= (2**31 - 1) // (576 * 16384) and mult.bit_length() == 8
    assert quantize_multiplier(1e-12) == (0, 0)
    with pytest.raises(ValueError):
        quantize_multiplier(-1.0)
    with pytest.raises(ValueError):
        quantize_multiplier(1000.0, 1 << 22)


@settings(max_examples=200, deadline=None)
@given(acc=st.lists(st.integers(-(1 << 20), 1 << 20), min_size=1, max_size=50),
       scale=st.floats(1e-5, 0.5))
def test_requant_within_one_of_real_scaling(acc, scale):
    a = np.array(acc, dtype=np.int64)
    mult, shift = quantize_multiplier(scale, max(1, int(np.abs(a).max())))
    got = np.clip(round_shift(a * mult, shift), -128, 127)
    exact = np.clip(np.round(a * scale), -128, 127)
    err = np.abs(a) * abs(mult / 2**shift - scale) + 1  # scale quantization + rounding
    assert (np.abs(got - exact) <= np.ceil(err)).all()


def test_epilogue_alu_sequences():
    assert Epilogue().alu_ops() == []
    assert Epilogue(requant=(100, 7), relu=True).alu_ops() == [
        (AluOp.MUL, 100), (AluOp.SHR_RND, 7), (AluOp.MAX, 0), (AluOp.CLIP, 127)]
    assert Epilogue(relu=True, clip=(0, 6)).alu_ops() == [(AluOp.MAX, 0), (AluOp.MIN, 6)]
    assert Epilogue(clip=(-3, 90)).alu_ops() == [(AluOp.MAX, -3), (AluOp.MIN, 90)]
    with pytest.raises(ValueError):
        Epilogue(requant=(40000, 3))
    with pytest.raises(ValueError):
        Epilogue(clip=(5, 4))


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 5), c=st.integers(1, 40), h=st.integers(1, 4), w=st.integers(1, 4),
       batch=st.sampled_from([1, 2, 4]), block=st.sampled_from([4, 8, 16]))
def test_pack_nchw_roundtrip_and_zero_padding(n, c, h, w, batch, block):
    x = np.random.default_rng(0).integers(-128, 128, (n, c, h, w)).astype(np.int8)
    p = pack_nchw(x, batch, block)
    assert p.shape == (-(-n // batch), -(-c // block), h, w, batch, block)
    np.testing.assert_array_equal(unpack_nchw(p, n, c), x)
    full = p.transpose(0, 4, 1, 5, 2, 3).reshape(p.shape[0] * batch, p.shape[1] * block, h, w)
    assert not full[n:].any() and not full[:, c:].any()
    # entry (nb, cb, y, x) holds x[nb*batch + i, cb*block + j, y, x] at [i, j]
    nb, cb = p.shape[0] - 1, p.shape[1] - 1
    for i in range(min(batch, n - nb * batch)):
        for j in range(min(block, c - cb * block)):
            assert p[nb, cb, h - 1, w - 1, i, j] == x[nb * batch + i, cb * block + j, h - 1, w - 1]


def test_pack_oihw_rows_are_output_channels():
    w = np.arange(6 * 5 * 2 * 3).reshape(6, 5, 2, 3) % 127
    p = pack_oihw(w, 4, 4)
    assert p.shape == (2, 2, 2, 3, 4, 4)
    assert p[1, 1, 1, 2, 1, 0] == w[5, 4, 1, 2]
    assert p[1, 1, 1, 2, 2, 0] == 0 and p[1, 1, 1, 2, 1, 1] == 0  # padded o and i


def test_packing_a_tensor_of_the_wrong_rank_names_the_shape():
    with pytest.raises(ValueError, match=r"expected an \(N, C, H, W\) tensor, got shape "
                                         r"\(2, 3, 4\)"):
        pack_nchw(np.zeros((2, 3, 4)), 1, 4)
    with pytest.raises(ValueError, match=r"expected \(O, I, KH, KW\) weights, got shape "
                                         r"\(6, 5\)"):
        pack_oihw(np.zeros((6, 5)), 4, 4)


def test_pack_bias_repeats_over_batch():
    b = np.array([1, -2, 3], dtype=np.int32)
    p = pack_bias(b, 2, 4)
    assert p.shape == (1, 2, 4)
    np.testing.assert_array_equal(p[0], [[1, -2, 3, 0], [1, -2, 3, 0]])
