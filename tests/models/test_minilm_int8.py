"""MiniLM-L6 in int8 on the accelerator (functional simulator) against the float model
on onnxruntime: cosine per sentence, the similarity ranking, MACs on the accelerator,
the disk cache of compiled buckets. CI runs a one-layer encoder on short sentences; the
whole model on 20+ sentences of 4 to 128 tokens is `slow`."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.models.minilm import HIDDEN, MiniLmError, tokenize
from tensorfab.models.minilm_embed import (
    MiniLmEmbedder,
    compile_bucket,
    cosine_matrix,
    float_embeddings,
)
from tensorfab.models.minilm_sentences import SIMILARITY_SET, generated_sentences


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.diag(cosine_matrix(a, b))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("minilm-cache")


def test_one_layer_int8_on_the_accelerator_match_float(cache) -> None:
    texts = list(SIMILARITY_SET[:3])
    embedder = MiniLmEmbedder("fsim", calibration=6, directory=cache, layers=1)
    try:
        got, runs = embedder.embed(texts)
        timed = embedder.time_runs(texts[0], 2)
    finally:
        embedder.close()
    # runs timed without instruments count no MACs, and say so
    assert [(t.accel_macs, t.cpu_macs, t.accel_fraction) for t in timed] == [(None,) * 3] * 2
    assert all(t.seconds > 0 and t.total_macs == runs[0].total_macs for t in timed)
    want = float_embeddings(texts, layers=1)
    assert _cosines(got, want).min() >= 0.99, _cosines(got, want)
    for r in runs:
        assert r.bucket == 16 and r.tokens == len(tokenize(r.text))
        assert r.cycles and r.cycles_estimated  # fsim is untimed: the compiler's estimate
        assert r.accel_fraction >= 0.95
        # every matmul is an accelerator program (outlier channels as zeros there), and
        # P·V twice (the probabilities' high and low int8 parts)
        pv_macs = r.bucket * r.bucket * HIDDEN
        assert r.accel_macs == r.total_macs + pv_macs
        assert 0 < r.cpu_macs < 0.05 * r.total_macs
    bucket = embedder.buckets[16]
    assert not bucket.cached and bucket.path.is_file()
    programs = [n for n in bucket.program.nodes if n.op == "accel.program"]
    # per layer: q, k, v, output, ffn in, ffn out, Q·Kᵀ, P·V (high and low parts)
    assert len(programs) == 9
    reasons = {line.split(" x")[0]: line for line in bucket.cpu_operators}
    for op in ("take", "nn.layer_norm", "nn.softmax", "erf", "mean", "sqrt"):
        assert op in reasons


def test_a_compiled_bucket_comes_back_from_the_cache(cache) -> None:
    first = compile_bucket(16, calibration=6, directory=cache, layers=1)
    again = compile_bucket(16, calibration=6, directory=cache, layers=1)
    assert again.cached and again.path == first.path
    assert again.cpu_operators == first.cpu_operators
    assert [n.op for n in again.program.nodes] == [n.op for n in first.program.nodes]


def test_a_sentence_past_the_largest_bucket_names_the_limit(cache) -> None:
    embedder = MiniLmEmbedder("fsim", calibration=6, directory=cache, layers=1)
    with pytest.raises(MiniLmError, match="largest bucket takes 128"):
        embedder.embed(["word " * 200])


#: The buckets the slow tests use (a sentence goes to the smallest that holds it; the
#: embedding does not depend on the bucket), from the disk cache `bench minilm` fills.
SLOW_BUCKETS = (16, 64, 128)


def _embed_in_buckets(texts: list[str]) -> tuple[np.ndarray, list]:
    embedder = MiniLmEmbedder("fsim")
    try:
        rows, runs = [], []
        for t in texts:
            n = len(tokenize(t))
            e, r = embedder.embed_one(t, bucket=min(b for b in SLOW_BUCKETS if b >= n))
            rows.append(e)
            runs.append(r)
    finally:
        embedder.close()
    return np.stack(rows), runs


@pytest.mark.slow
def test_int8_quality_on_sentences_of_4_to_128_tokens() -> None:
    """Every sentence of 4 to 128 tokens within 0.99 cosine of float (the softmax
    probabilities in two int8 parts keep the diffuse attention of long sentences)."""
    texts = (generated_sentences(16, 2, 100, seed=4242) + list(SIMILARITY_SET[:6])
             + generated_sentences(2, 118, 125, seed=128))
    lengths = np.array([len(tokenize(t)) for t in texts])
    assert len(texts) >= 20 and lengths.min() <= 8 and 120 < lengths.max() <= 128
    got, runs = _embed_in_buckets(texts)
    cos = _cosines(got, float_embeddings(texts))
    report = dict(zip(lengths.tolist(), cos.round(4).tolist(), strict=True))
    assert cos.min() >= 0.99, report
    assert min(r.accel_fraction for r in runs) >= 0.95


@pytest.mark.slow
def test_int8_similarity_ranking_equals_float() -> None:
    texts = list(SIMILARITY_SET)
    got, _ = _embed_in_buckets(texts)
    sim_q, sim_f = cosine_matrix(got), cosine_matrix(float_embeddings(texts))
    np.fill_diagonal(sim_q, -1)
    np.fill_diagonal(sim_f, -1)
    # each sentence's nearest neighbour, and it is the other sentence of its topic
    assert (sim_q.argmax(1) == sim_f.argmax(1)).all()
    assert (sim_f.argmax(1) == np.arange(len(texts)) ^ 1).all()
    # each sentence's ranking of the others: the order of two neighbours whose float
    # similarities differ by more than 0.03 is kept (unrelated sentences score within
    # 0.03 of each other around 0, and int8 moves a similarity by up to 0.027)
    for q, f in zip(sim_q, sim_f, strict=True):
        order = np.argsort(-f)[:-1]  # without itself
        for i, a in enumerate(order):
            for b in order[i + 1:]:
                if f[a] - f[b] > 0.03:
                    assert q[a] > q[b], (a, b, f[a], f[b], q[a], q[b])
    iu = np.triu_indices(len(texts), 1)
    ranks_q, ranks_f = (np.argsort(np.argsort(m[iu])) for m in (sim_q, sim_f))
    assert np.corrcoef(ranks_q, ranks_f)[0, 1] >= 0.98  # Spearman over the 45 pairs


def test_one_executable_over_a_symbolic_length_compiles_one_bucket_per_new_bucket(
        tmp_path, monkeypatch) -> None:
    """MiniLM as one VM executable with a symbolic ``seq``: a length in a bucket
    already loaded compiles nothing, a length in a new bucket compiles that one bucket,
    and a length past the largest, or of 0, names the limit (compiling nothing)."""
    import tensorfab.compiler.model_compile as model_compile
    from tensorfab.runtime.bucketed import BucketLimitError

    compiled: list[int] = []
    real = model_compile.compile_onnx

    def counting(model, **kwargs):
        compiled.append(model.graph.input[0].type.tensor_type.shape.dim[1].dim_value)
        return real(model, **kwargs)

    monkeypatch.setattr(model_compile, "compile_onnx", counting)
    embedder = MiniLmEmbedder("fsim", calibration=6, directory=tmp_path, layers=1)
    vm = embedder.symbolic_vm()
    texts = ["A cat.", "A man is eating a big plate of pasta.",
             "The quick brown fox jumps over the lazy dog while the children watch "
             "from the old wooden fence."]
    lengths = [len(tokenize(t)) for t in texts]
    assert lengths[0] < lengths[1] <= 16 < lengths[2] <= 32
    try:
        got = []
        for k, text in enumerate(texts):
            t = tokenize(text)
            ids, mask = t.padded(len(t))  # the sentence's own length: no padding
            got.append(vm.run({"input_ids": ids, "attention_mask": mask}).reshape(-1))
            assert compiled == [16, 32][:1 + (k == 2)]  # one bucket per new bucket
        with pytest.raises(BucketLimitError, match="length of 200 is past the largest "
                                                   "bucket, 128"):
            vm.run({"input_ids": np.zeros((1, 200), np.int64),
                    "attention_mask": np.ones((1, 200), np.float32)})
        # an empty sequence ran as a bucket of padding alone, its embedding all NaN
        with pytest.raises(BucketLimitError, match="a length of 0: the buckets take "
                                                   "lengths 1 to 128"):
            vm.run({"input_ids": np.zeros((1, 0), np.int64),
                    "attention_mask": np.zeros((1, 0), np.float32)})
        assert compiled == [16, 32] and sorted(embedder.buckets) == [16, 32]
        # the same buckets' models give the same embeddings as a sentence run alone
        for text, e in zip(texts, got, strict=True):
            np.testing.assert_array_equal(e, embedder.embed_one(text)[0])
    finally:
        embedder.close()
    want = float_embeddings(texts, layers=1)
    assert _cosines(np.stack(got), want).min() >= 0.99
