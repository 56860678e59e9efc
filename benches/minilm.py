"""MiniLM-L6 sentence embeddings in int8 on the accelerator, per bucket length.

For each sequence length (16, 64, 128 tokens) one generated sentence that fills the
bucket is embedded on ``--target`` with the bucket compiled (or loaded from the disk
cache, :func:`~tensorfab.models.minilm_embed.compile_bucket`), and compared with the
float model on onnxruntime. The bucket's stored VM executable (``vm.json``, in the
overlap order) runs it, accelerator programs as futures. One profiled run
(:meth:`~tensorfab.models.minilm_embed.MiniLmEmbedder.embed_one`, an instrument on
every kernel call) gives the embedding, the accelerator cycles (as the executor counts
them: the RTL's cycle counter, fsim's model) and the fraction of the encoder's MACs on
the accelerator; it is also the warm-up (first touches of the arenas; the VM's choice
of the programs to run inline). Then :data:`RUNS` runs as a user runs the model
(:meth:`~tensorfab.models.minilm_embed.MiniLmEmbedder.time_runs`, no instrument), of
which the median by wall time gives the time figures: ``wall_seconds``,
``vm_dispatch_fraction`` (time outside every kernel over the run: the VM's own work,
handoffs between the threads, and the host thread waiting for a core),
``futures_overlap`` (the fraction of the CPU kernels' time spent while an accelerator
program was in flight), ``futures_overlap_seconds`` and ``host_runqueue_fraction``
(the time the host thread was runnable but waited for a core, over the run: how much
the machine's other work took from it; None off Linux). Per length also the cosine vs
float and whether the bucket was compiled now and how long that took. The median run's
Perfetto trace (CPU, accelerator and wait tracks) is written to
``build/bench/minilm-vm-SEQ.json``. The top level ``futures_overlap`` and
``vm_dispatch_fraction`` are those of the longest bucket, ``max_vm_dispatch_fraction``
the largest over the lengths, ``load_average`` the machine's one-minute load when the
bench ended. The last line of ``tensorfab bench minilm --json`` is the JSON object.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.models.minilm import tokenize
from tensorfab.models.minilm_embed import MiniLmEmbedder, float_embeddings
from tensorfab.models.minilm_sentences import generated_sentence

LENGTHS = (16, 64, 128)
#: Measured runs per length, after one warm-up run; the median (by wall time) is reported.
RUNS = 3
#: Where the VM runs' Perfetto traces go.
TRACE_DIR = Path("build/bench")


def bench_sentence(seq: int, seed: int = 1000) -> str:
    """A generated sentence of ``seq - 15 .. seq`` tokens (it fills bucket ``seq``)."""
    rng = np.random.default_rng(seed + seq)
    words = max(2, int(seq * 0.8))
    for _ in range(200):
        text = generated_sentence(rng, words)
        n = len(tokenize(text, max_tokens=10**6))
        if seq - 15 <= n <= seq:
            return text
        words += -1 if n > seq else 1
    raise RuntimeError(f"no generated sentence fills {seq} tokens")


def run_minilm_bench(target: str = "fsim", config: str = "default",
                     lengths: tuple[int, ...] = LENGTHS) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); a JSON-ready dict."""
    embedder = MiniLmEmbedder(target, config)
    rows = []
    try:
        for seq in lengths:
            text = bench_sentence(seq)
            t0 = time.perf_counter()
            bucket = embedder.bucket(seq)
            compile_seconds = time.perf_counter() - t0
            # profiled, and the warm-up: first touches, the VM's inline sites
            emb, profiled = embedder.embed_one(text)
            timed = sorted(embedder.time_runs(text, RUNS), key=lambda r: r.seconds)
            run = timed[len(timed) // 2]  # the median run
            TRACE_DIR.mkdir(parents=True, exist_ok=True)
            trace = TRACE_DIR / f"minilm-vm-{seq}.json"
            trace.write_text(json.dumps(run.trace))
            ref = float_embeddings([text])[0]
            cosine = float(emb @ ref / (np.linalg.norm(emb) * np.linalg.norm(ref)))
            rows.append({
                "seq": seq, "tokens": run.tokens, "wall_seconds": round(run.seconds, 3),
                "accelerator_cycles": profiled.cycles,
                "accel_mac_fraction": (None if profiled.accel_fraction is None
                                       else round(profiled.accel_fraction, 4)),
                "accel_macs": profiled.accel_macs, "cpu_macs": profiled.cpu_macs,
                "cosine_vs_float": round(cosine, 5),
                "bucket_compiled": not bucket.cached,
                "bucket_seconds": round(compile_seconds, 2),
                "vm_dispatch_fraction": round(run.dispatch_fraction, 4),
                "futures_overlap": round(run.futures_overlap, 4),
                "futures_overlap_seconds": round(run.overlap_seconds, 4),
                "host_runqueue_fraction": (None if run.host_runqueue_seconds is None else
                                           round(run.host_runqueue_seconds / run.seconds, 4)),
                "vm_trace": str(trace),
            })
    finally:
        embedder.close()
    return {
        "bench": "minilm", "target": target, "config": config,
        "lengths": rows,
        "buckets_compiled": sum(r["bucket_compiled"] for r in rows),
        "buckets_loaded_from_cache": sum(not r["bucket_compiled"] for r in rows),
        "min_cosine_vs_float": min(r["cosine_vs_float"] for r in rows),
        "min_accel_mac_fraction": min(r["accel_mac_fraction"] for r in rows),
        "runs_per_length": RUNS,
        "futures_overlap": rows[-1]["futures_overlap"],
        "vm_dispatch_fraction": rows[-1]["vm_dispatch_fraction"],
        "max_vm_dispatch_fraction": max(r["vm_dispatch_fraction"] for r in rows),
        "load_average": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    print(json.dumps(run_minilm_bench()))
