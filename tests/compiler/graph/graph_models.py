"""Hand-written graph-IR programs shared by the graph tests (builder API)."""

from __future__ import annotations

import numpy as np

from tensorfab.compiler.graph import CPU, Function, accel
from tensorfab.compiler.graph import builder as gb


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def small_cnn(batch: int | str = 1, channels: int = 3) -> Function:
    """conv-bn-relu, pool, conv, residual add, global pool, dense."""
    r = rng(1)
    x = gb.var("x", (batch, channels, 8, 8))
    w1 = r.standard_normal((6, channels, 3, 3)).astype(np.float32)
    bn = [r.uniform(0.5, 1.5, 6).astype(np.float32) for _ in range(4)]
    y = gb.conv2d(x, w1, padding=(1, 1, 1, 1))
    y = gb.relu(gb.batch_norm(y, *bn, epsilon=1e-3))
    y = gb.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    w2 = r.standard_normal((6, 6, 3, 3)).astype(np.float32)
    z = gb.add(gb.conv2d(y, w2, padding=(1, 1, 1, 1)), y)
    g = gb.flatten(gb.global_avg_pool2d(gb.relu(z)))
    fc = r.standard_normal((6, 4)).astype(np.float32)
    out = gb.softmax(gb.add(gb.matmul(g, fc), np.ones(4, np.float32)))
    return gb.function([x], out)


def lets_and_tuples() -> Function:
    """Lets (one with a device), a split into a tuple, tuple items, a tuple result."""
    x = gb.var("x", (2, 6))
    v = gb.var("v", (2, 6), device=CPU)
    parts = gb.split(x, axis=1, sections=(2, 4))
    body = gb.let(v, gb.tanh(x), lambda v: gb.tuple_(
        gb.concatenate(gb.tuple_item(parts, 1), gb.tuple_item(parts, 0), v, axis=1),
        gb.multiply(v, 2.0)))
    return gb.function([x], body)


def encoder_block(seq: str = "seq") -> Function:
    """A BERT-style attention + MLP block with symbolic batch and sequence dims."""
    r = rng(2)
    d, heads = 8, 2
    x = gb.var("x", ("batch", seq, d))
    w = {k: r.standard_normal((d, d)).astype(np.float32) * 0.3 for k in "qkvo"}

    def heads_of(t):
        return gb.transpose(gb.reshape(t, newshape=(0, 0, heads, d // heads)),
                            axes=(0, 2, 1, 3))
    q, k, v = (heads_of(gb.matmul(x, w[n])) for n in "qkv")
    att = gb.softmax(gb.divide(gb.matmul(q, gb.transpose(k, axes=(0, 1, 3, 2))),
                               np.float32(np.sqrt(d // heads))), axis=-1)
    ctx = gb.reshape(gb.transpose(gb.matmul(att, v), axes=(0, 2, 1, 3)),
                     newshape=(0, 0, d))
    h = gb.layer_norm(gb.add(x, gb.matmul(ctx, w["o"])), np.ones(d, np.float32),
                      np.zeros(d, np.float32), epsilon=1e-5)
    w1 = r.standard_normal((d, 16)).astype(np.float32) * 0.3
    w2 = r.standard_normal((16, d)).astype(np.float32) * 0.3
    u = gb.matmul(h, w1)
    gelu = gb.multiply(gb.multiply(u, 0.5), gb.add(gb.erf(gb.divide(u, 1.4142135)), 1.0))
    return gb.function([x], gb.add(h, gb.matmul(gelu, w2)))


def quantized_conv() -> Function:
    """quantize -> integer conv -> requantize -> dequantize, with odd constants."""
    r = rng(3)
    x = gb.var("x", (1, 4, 6, 6))
    q = gb.quantize(x, np.float32(0.05), np.int8(0), out_dtype="int8")
    w = r.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    acc = gb.conv2d_integer(q, w, np.int8(0), np.int8(0), padding=(1, 1, 1, 1))
    acc = gb.add(acc, r.integers(-500, 500, (8, 1, 1)).astype(np.int32))
    y = gb.requantize(acc, np.float32(0.01), np.int8(0), out_dtype="int8")
    return gb.function([x], gb.dequantize(y, np.float32(0.1), np.int8(0)))


def oddities() -> Function:
    """Special floats, bool and int constants, strings, None attrs, a scoped device."""
    x = gb.var("x", (3,), "float32", device=accel("small", "global"))
    c = gb.clip(x, a_min=float("-inf"), a_max=None)
    m = gb.where(np.array([True, False, True]), c, np.array([np.nan, np.inf, -0.0],
                                                             np.float32))
    s = gb.cast(gb.take(m, np.array([2, 0], np.int64)), dtype="int32")
    p = gb.pad(gb.cast(s, dtype="float32"), pads=(1, 2), mode="reflect", value=0.0)
    return gb.function([x], gb.tuple_(p, gb.shape_of(x)))


ALL_MODELS = {
    "small_cnn": small_cnn,
    "small_cnn_symbolic_batch": lambda: small_cnn(batch="n"),
    "lets_and_tuples": lets_and_tuples,
    "encoder_block": encoder_block,
    "quantized_conv": quantized_conv,
    "oddities": oddities,
}
