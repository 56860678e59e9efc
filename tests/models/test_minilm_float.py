"""MiniLM-L6 with its real weights: the ONNX encoder of tensorfab.models.minilm on
onnxruntime against a numpy BERT written here from the checkpoint, the tokenizer against
the vocabulary, the buckets' padding, and the known behaviour of the original (similar
sentences score high)."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest

from tensorfab.models.minilm import (
    MiniLmError,
    bucket_length,
    load_weights,
    minilm_onnx,
    tokenize,
    weights_dir,
)

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A monkey is playing drums.",
             "Someone in a gorilla costume is playing a set of drums."]


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * g + b


def numpy_minilm(ids: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """sentence-transformers' all-MiniLM-L6-v2 on one sentence, in float64: BertModel
    (post-norm, exact GELU; -10000 added to the scores of tokens the attention ``mask``
    zeroes, default all ones), Pooling's masked mean (the mask's sum clamped at 1e-9),
    Normalize (F.normalize: the norm clamped at 1e-12)."""
    p = {k: v.astype(np.float64) for k, v in load_weights().items() if v.dtype != np.int64}
    n = ids.size
    m = np.ones(n) if mask is None else mask.astype(np.float64).reshape(n)
    x = (p["embeddings.word_embeddings.weight"][ids]
         + p["embeddings.position_embeddings.weight"][:n]
         + p["embeddings.token_type_embeddings.weight"][0])
    x = _layer_norm(x, p["embeddings.LayerNorm.weight"], p["embeddings.LayerNorm.bias"])
    erf = np.vectorize(math.erf)
    for i in range(6):
        a = f"encoder.layer.{i}.attention."

        def lin(v: np.ndarray, name: str) -> np.ndarray:
            return v @ p[name + ".weight"].T + p[name + ".bias"]

        q, k, v = (lin(x, a + "self." + t).reshape(n, 12, 32).transpose(1, 0, 2)
                   for t in ("query", "key", "value"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(32) + (m - 1) * 10000
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = (s / s.sum(-1, keepdims=True)) @ v
        h = lin(ctx.transpose(1, 0, 2).reshape(n, 384), a + "output.dense") + x
        x = _layer_norm(h, p[a + "output.LayerNorm.weight"], p[a + "output.LayerNorm.bias"])
        f = lin(x, f"encoder.layer.{i}.intermediate.dense")
        f = lin(0.5 * f * (1 + erf(f / math.sqrt(2))), f"encoder.layer.{i}.output.dense")
        o = f"encoder.layer.{i}.output.LayerNorm"
        x = _layer_norm(f + x, p[o + ".weight"], p[o + ".bias"])
    e = (x * m[:, None]).sum(0) / max(m.sum(), 1e-9)
    return e / max(np.linalg.norm(e), 1e-12)


@pytest.fixture(scope="module")
def session32() -> ort.InferenceSession:
    return ort.InferenceSession(minilm_onnx(32).SerializeToString(),
                                providers=["CPUExecutionProvider"])


def _embed(session: ort.InferenceSession, text: str, length: int) -> np.ndarray:
    ids, mask = tokenize(text).padded(length)
    return session.run(None, {"input_ids": ids, "attention_mask": mask})[0][0]


def test_weights_come_from_the_package() -> None:
    d = weights_dir()
    assert (d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file()
    w = load_weights()
    assert w["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert w["encoder.layer.5.intermediate.dense.weight"].shape == (1536, 384)


def test_tokens_match_the_vocabulary() -> None:
    vocab = {w: i for i, w in enumerate((weights_dir() / "vocab.txt").read_text(
        encoding="utf-8").splitlines())}
    text = "The Girl is carrying a baby"
    want = [vocab["[CLS]"], *(vocab[w] for w in text.lower().split()), vocab["[SEP]"]]
    assert tokenize(text).ids.tolist() == want
    # a rare word splits into WordPiece pieces, continuation pieces marked ##
    pieces = tokenize("tensorfab").ids.tolist()[1:-1]
    inverse = {i: w for w, i in vocab.items()}
    assert len(pieces) > 1 and all(inverse[t].startswith("##") for t in pieces[1:])
    assert "".join(inverse[t].lstrip("#") for t in pieces) == "tensorfab"


def test_a_too_long_sentence_names_the_limit() -> None:
    with pytest.raises(MiniLmError, match=r"129 tokens.*takes 128"):
        tokenize(" ".join(["word"] * 127))


def test_bucket_lengths() -> None:
    assert [bucket_length(n) for n in (1, 16, 17, 64, 100, 128)] == [16, 16, 32, 64, 112, 128]


def test_onnx_encoder_equals_the_numpy_bert(session32: ort.InferenceSession) -> None:
    for text in SENTENCES[:3]:
        got = _embed(session32, text, 32)
        want = numpy_minilm(tokenize(text).ids)
        assert float(got @ want) >= 1 - 1e-4, text
        assert abs(np.linalg.norm(got) - 1) < 1e-5


def test_an_all_zero_attention_mask_gives_sentence_transformers_zero_embedding(
        session32: ort.InferenceSession) -> None:
    """An all-zero attention mask made the mean pooling 0/0: a NaN embedding. The
    pooling now floors the mask's sum as sentence-transformers does, so the embedding
    is the numpy reference's (the zero vector); a mask that drops real tokens still
    equals the reference's masked embedding."""
    ids, mask = tokenize(SENTENCES[1]).padded(32)
    n = len(tokenize(SENTENCES[1]))
    partial = mask.copy()
    partial[0, n // 2: n] = 0.0
    for m in (np.zeros_like(mask), partial):
        got = session32.run(None, {"input_ids": ids, "attention_mask": m})[0][0]
        want = numpy_minilm(ids[0], m[0])
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_padding_to_a_bucket_does_not_change_the_embedding(
        session32: ort.InferenceSession) -> None:
    tight = ort.InferenceSession(minilm_onnx(len(tokenize(SENTENCES[1]))).SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    a = _embed(tight, SENTENCES[1], len(tokenize(SENTENCES[1])))
    b = _embed(session32, SENTENCES[1], 32)
    assert float(a @ b) >= 1 - 1e-6


def test_similar_sentences_score_high(session32: ort.InferenceSession) -> None:
    e = np.stack([_embed(session32, t, 32) for t in SENTENCES])
    sim = e @ e.T
    assert sim[0, 1] > 0.6 and sim[3, 4] > 0.5           # same topic
    assert sim[0, 2] < 0.2 and sim[0, 3] < 0.2          # unrelated
    assert np.argmax(sim[0, 1:]) == 0 and np.argmax(sim[3, [0, 1, 2, 4]]) == 3
