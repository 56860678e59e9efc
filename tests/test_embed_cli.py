"""``tensorfab embed``: a sentence past the largest bucket or not UTF-8 is one line naming
the limit or the byte; an empty sentence and mixed lengths tokenize into their buckets;
the embeddings' norms and cosine matrix (slow: compiles or loads the 16-token bucket)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorfab.cli import main
from tensorfab.models.minilm_embed import float_embeddings


def test_a_too_long_sentence_is_one_line(capsys) -> None:
    assert main(["embed", "word " * 300]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "302 tokens" in err and "largest bucket takes 128" in err


def test_embeddings_without_json_is_refused_before_any_work(capsys) -> None:
    # the vectors were silently left out of the printed summary
    assert main(["embed", "a sentence", "--embeddings"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--embeddings needs --json" in err


def test_text_that_is_not_utf8_is_one_line(capsys) -> None:
    # what Python makes of the argument bytes b"caf\xe9 au lait" (Latin-1, not UTF-8)
    arg = b"caf\xe9 au lait".decode("utf-8", "surrogateescape")
    assert main(["embed", arg]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "not valid UTF-8" in err and "byte 0xe9 at character 3" in err


def test_an_empty_sentence_is_cls_and_sep() -> None:
    from tensorfab.models.minilm import bucket_length, tokenize

    t = tokenize("")
    assert len(t) == 2 and bucket_length(len(t)) == 16  # [CLS] [SEP], the first bucket
    # a batch of mixed lengths: each sentence in its own bucket
    assert [bucket_length(len(tokenize(s))) for s in ("hi", "word " * 20, "word " * 100)] == [
        16, 32, 112]


@pytest.mark.slow
def test_embed_prints_norms_and_the_cosine_matrix(capsys) -> None:
    texts = ["A man is eating a bowl of pasta.", "Someone is having spaghetti for dinner.",
             "The forecast says a storm is coming."]
    assert main(["embed", *texts, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["text"] for s in out["sentences"]] == texts
    assert all(abs(s["norm"] - 1) < 1e-3 and s["bucket"] == 16 for s in out["sentences"])
    cos = np.array(out["cosine"])
    f = float_embeddings(texts)
    np.testing.assert_allclose(cos, f @ f.T, atol=0.03)
    assert cos[0, 1] > 0.5 > cos[0, 2]
    assert main(["embed", *texts]) == 0
    human = capsys.readouterr().out
    assert "norm 1.0000" in human and "cosine:" in human


def test_embed_takes_the_token_of_a_served_device(capsys, monkeypatch) -> None:
    """`embed --target tcp://... --token T` was an argparse error (embed had no --token)
    and a missing token named the Python API's `token=...`; embed now opens its target
    as run and sim do (model_cli.open_target), before any bucket compiles."""
    from tensorfab.hil.server import DeviceServer

    monkeypatch.delenv("TENSORFAB_TOKEN", raising=False)
    how = "pass --token or set TENSORFAB_TOKEN (the server prints its token when it starts)"
    with DeviceServer("fsim", token="right") as server:
        capsys.readouterr()
        assert main(["embed", "hi", "--target", server.address]) == 2
        assert capsys.readouterr().err == f"error: {server.address}: no token: {how}\n"
        assert main(["embed", "hi", "--target", server.address, "--token", "wrong"]) == 2
        assert capsys.readouterr().err == (f"error: {server.address}: the server refused "
                                           f"the connection: wrong token: {how}\n")
        # the right token connects; the sentence is then refused (no bucket compiles)
        assert main(["embed", "word " * 300, "--target", server.address, "--token",
                     "right"]) == 2
        assert "302 tokens" in capsys.readouterr().err
    assert main(["embed", "hi", "--token", "x"]) == 2
    assert "--token applies to tcp://, tracker://, socket:// targets, not 'fsim'" in (
        capsys.readouterr().err)


def test_embed_takes_a_board_config(capsys, monkeypatch) -> None:
    """`embed --config ecp5-25f` was refused as 'not a preset ... nor a JSON config file'
    (embed looked its --config up with get_config), though every other --config takes
    the board configs; it is now the board's HwConfig, and an unknown name lists the
    board configs too."""
    import tensorfab.models.minilm_embed as minilm_embed

    seen = []

    def no_compile(seq: int, config: object, *args: object) -> None:
        seen.append(config)
        raise minilm_embed.MiniLmError("not compiled in this test")

    monkeypatch.setattr(minilm_embed, "compile_bucket", no_compile)
    capsys.readouterr()
    assert main(["embed", "hi", "--config", "ecp5-25f"]) == 2
    assert "not compiled in this test" in capsys.readouterr().err
    assert [(c.name, c.block_in, c.block_out) for c in seen] == [("ecp5-25f", 4, 2)]
    assert main(["embed", "hi", "--config", "ecp5-52f"]) == 2
    err = capsys.readouterr().err
    assert "a board config (ecp5-25f, ecp5-25f-4x4, ecp5-85f, up5k)" in err
    assert len(err.splitlines()) == 1


def test_estimated_cycles_are_marked(capsys, monkeypatch) -> None:
    """On fsim `embed` printed '1569870 cycles' for every sentence of a bucket, the
    compiler's estimate shown as if counted (`run` marks it '~' and
    cycles_estimated); embed now says so too: '~1569870 cycles estimated' and
    "cycles_estimated": true, a measured count as before."""
    import tensorfab.models.minilm_embed as minilm_embed
    from tensorfab.models.minilm_embed import SentenceRun

    class Embedder:
        def __init__(self, target: str, config: object, device: object = None) -> None:
            self.estimated = target == "fsim"

        def embed(self, texts: list[str]) -> tuple[np.ndarray, list[SentenceRun]]:
            runs = [SentenceRun(t, 4, 16, 0.5, 1569870, None, None, 1,
                                cycles_estimated=self.estimated) for t in texts]
            return np.eye(len(texts), 384, dtype=np.float32), runs

        def close(self) -> None:
            pass

    monkeypatch.setattr(minilm_embed, "MiniLmEmbedder", Embedder)
    capsys.readouterr()
    assert main(["embed", "hi"]) == 0
    assert "(4 tokens, bucket 16, 0.50 s, ~1569870 cycles estimated) hi" in (
        capsys.readouterr().out)
    assert main(["embed", "hi", "--json"]) == 0
    sentence = json.loads(capsys.readouterr().out)["sentences"][0]
    assert sentence["accelerator_cycles"] == 1569870 and sentence["cycles_estimated"]
    monkeypatch.setattr("tensorfab.embed_cli.open_target", lambda *a, **k: None)
    assert main(["embed", "hi", "--target", "rtl"]) == 0
    assert "(4 tokens, bucket 16, 0.50 s, 1569870 cycles) hi" in capsys.readouterr().out
