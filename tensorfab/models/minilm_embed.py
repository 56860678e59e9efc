"""MiniLM sentence embeddings in int8 on the accelerator, one compiled model per bucket.

:func:`compile_bucket` compiles :func:`~.minilm.minilm_onnx` for one bucket length with
:func:`~tensorfab.compiler.model_compile.compile_onnx`: tensorfab's post-training
quantization with its transformer options (int8 attention matmuls, float residual
adds, per-channel output scales), calibrated on :func:`~.minilm_sentences.generated_sentences`
that fit the bucket, every linear and attention matmul an ``accel.program``. The result
is cached on disk as a ``.tfm`` (``$TENSORFAB_MODEL_CACHE`` or
``~/.cache/tensorfab/models``), keyed by the bucket, the config, the calibration and the
compiler's source (and the runtime's executable builder), so a new sentence length
compiles at most one new bucket.

:class:`MiniLmEmbedder` tokenizes sentences, pads each to its bucket, runs the bucket's
stored VM executable on a device (each bucket's programs and weights loaded once,
:class:`~tensorfab.runtime.resident.ResidentModel`; accelerator programs as futures)
and keeps per-sentence figures: wall time, accelerator cycles, the MACs on the
accelerator, the VM's timeline (time in kernels, overlap).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.isa import HwConfig, get_config
from tensorfab.runtime.artifact import load_executable, load_model, save_model
from tensorfab.runtime.interpreter import GraphProgram

from .minilm import (
    BUCKET_BLOCK,
    FFN,
    HIDDEN,
    LAYERS,
    MAX_TOKENS,
    MiniLmError,
    Tokens,
    bucket_length,
    minilm_onnx,
    tokenize,
)
from .minilm_sentences import generated_sentences

#: The quantizer's options for MiniLM (see :func:`~tensorfab.compiler.graph.ptq.quantize_graph`).
QUANTIZE_OPTIONS = {"activation_matmuls": True, "residual_adds": False,
                    "per_channel_outputs": True, "outlier_channels": 4,
                    "two_part_probabilities": True}
#: Calibration sentences per bucket (on the similarity set's short sentences, bucket 16:
#: 16 gave cosines down to 0.9885, 32 down to 0.9898, 64 down to 0.9931).
CALIBRATION_SENTENCES = 64


def cache_dir() -> Path:
    """Where compiled buckets live: ``$TENSORFAB_MODEL_CACHE`` or
    ``~/.cache/tensorfab/models``."""
    env = os.environ.get("TENSORFAB_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tensorfab" / "models"


def _source_digest() -> str:
    """A digest of the sources a compiled bucket depends on (the compiler, the encoder's
    graph, the calibration sentences, and what builds the stored VM executable: its
    order and memory plan): a changed compiler misses the cache instead of loading a
    stale program, while a change to how buckets are run does not."""
    import tensorfab.compiler
    from tensorfab.runtime import artifact, overlap_order, static_plan, vm_build

    from . import minilm, minilm_sentences

    h = hashlib.sha256()
    paths = sorted(Path(tensorfab.compiler.__file__).parent.rglob("*.py"))
    builder = [Path(m.__file__) for m in (artifact, overlap_order, static_plan, vm_build)]
    for path in [*paths, *builder, Path(minilm.__file__), Path(minilm_sentences.__file__)]:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def calibration_tokens(seq: int, count: int = CALIBRATION_SENTENCES) -> list[Tokens]:
    """``count`` generated sentences that fit ``seq`` tokens, of lengths spread up to it."""
    words = max(2, int(seq * 0.8))
    out = [t for t in (tokenize(s, max_tokens=10**6) for s in
                       generated_sentences(count, 2, words, seed=seq)) if len(t) <= seq]
    if not out:
        raise MiniLmError(f"no calibration sentence fits {seq} tokens")
    return out


def bucket_macs(seq: int, layers: int = LAYERS) -> int:
    """Multiply-accumulates of every matmul of the encoder at ``seq`` tokens: per layer
    the four ``hidden²`` projections, the two feed-forward layers and attention's two
    batched matmuls."""
    per_layer = 4 * seq * HIDDEN * HIDDEN + 2 * seq * HIDDEN * FFN + 2 * seq * seq * HIDDEN
    return layers * per_layer


@dataclass
class Bucket:
    """One compiled bucket.

    Attributes
    ----------
    seq : int
        Its length (tokens).
    program : GraphProgram
        The runtime program (inputs ``input_ids``, ``attention_mask``).
    cpu_operators : list of str
        Every operator kind left on the CPU, with its count and reason.
    cached : bool
        Loaded from the disk cache (not compiled now).
    seconds : float
        Time to compile or load it.
    path : Path
        Its ``.tfm`` file.
    """

    seq: int
    program: GraphProgram
    cpu_operators: list[str]
    cached: bool
    seconds: float
    path: Path


def compile_bucket(seq: int, config: str | HwConfig = "default",
                   calibration: int = CALIBRATION_SENTENCES,
                   directory: Path | None = None, layers: int = LAYERS) -> Bucket:
    """The int8 MiniLM of ``seq`` tokens for ``config``, from the disk cache or compiled
    now (and cached); ``layers`` < 6 keeps the first layers (for tests)."""
    from tensorfab.compiler.model_compile import compile_onnx

    cfg = get_config(config) if isinstance(config, str) else config
    t0 = time.perf_counter()
    key = hashlib.sha256(json.dumps(
        {"seq": seq, "layers": layers, "config": cfg.to_json(),
         "calibration": calibration, "options": QUANTIZE_OPTIONS,
         "source": _source_digest()}, sort_keys=True).encode()).hexdigest()[:20]
    folder = directory or cache_dir()
    path = folder / f"minilm-seq{seq}-l{layers}-{key}.tfm"
    sidecar = path.with_suffix(".json")
    if path.is_file() and sidecar.is_file():
        return Bucket(seq, load_model(path), json.loads(sidecar.read_text())["cpu_operators"],
                      True, time.perf_counter() - t0, path)
    tokens = calibration_tokens(seq, calibration)
    padded = [t.padded(seq) for t in tokens]
    calib = {"input_ids": np.concatenate([ids for ids, _ in padded]),
             "attention_mask": np.concatenate([m for _, m in padded])}
    compiled = compile_onnx(minilm_onnx(seq, layers), config=cfg, calibration=calib,
                            quantize_options=QUANTIZE_OPTIONS)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    save_model(compiled.program, tmp, compiled.graph_text)
    os.replace(tmp, path)
    compiled.program.executable = load_executable(path)  # what a cached bucket runs
    sidecar.write_text(json.dumps({"seq": seq, "cpu_operators": list(compiled.cpu_operators)}))
    return Bucket(seq, compiled.program, list(compiled.cpu_operators), False,
                  time.perf_counter() - t0, path)


def _matmul_macs(shapes: list[tuple[int, ...]]) -> int:
    """MACs of a matmul of operands of ``shapes`` (``(..., M, K)`` by ``(K, N)``)."""
    a, b = shapes[0], shapes[1]
    return int(np.prod(a)) * int(b[-1])


@dataclass
class SentenceRun:
    """One sentence's run on the VM (the bucket's stored executable, accelerator
    programs as futures): its tokens, bucket, wall time, accelerator cycles (None when
    the executor counts none), the MACs of the accelerator's programs, of the float
    matmuls on the CPU (the outlier channels, which the programs see as zeros) and of
    the whole encoder (:func:`bucket_macs`), and the VM's timeline figures. A run
    timed without instruments (:meth:`MiniLmEmbedder.time_runs`) counts no MACs:
    ``accel_macs`` and ``cpu_macs`` are None there.

    Attributes
    ----------
    cpu_seconds, accelerator_seconds : float
        Time inside CPU kernels, and inside accelerator programs (the accelerator thread).
    overlap_seconds : float
        Time a CPU kernel ran while an accelerator program was in flight
        (:func:`~tensorfab.runtime.vm.overlap_seconds`).
    kernel_seconds : float
        Time inside any kernel (the union of both tracks); the rest of ``seconds`` is
        dispatch and waiting.
    trace : dict
        The run's Perfetto trace (:func:`~tensorfab.runtime.vm.vm_trace`): ``cpu``,
        ``accelerator`` and ``wait`` tracks.
    host_runqueue_seconds : float or None
        Time the host thread spent runnable but waiting for a core during the run (the
        machine's other work; :meth:`MiniLmEmbedder.time_runs` measures it).
    cycles_estimated : bool
        ``cycles`` are the compiler's estimates (an untimed executor such as ``fsim``),
        not a count the device measured.
    """

    text: str
    tokens: int
    bucket: int
    seconds: float
    cycles: int | None
    accel_macs: int | None
    cpu_macs: int | None
    total_macs: int
    kernel_seconds: float = 0.0
    cpu_seconds: float = 0.0
    accelerator_seconds: float = 0.0
    overlap_seconds: float = 0.0
    trace: dict[str, Any] = field(default_factory=dict, repr=False)
    host_runqueue_seconds: float | None = None
    cycles_estimated: bool = False

    def with_timeline(self, timeline: list[Any], title: str) -> SentenceRun:
        """This run with the figures of its VM ``timeline`` (its
        :class:`~tensorfab.runtime.vm.Slice` list) filled in."""
        from tensorfab.runtime.vm import overlap_seconds, vm_trace

        track = {k: [(s.start, s.end) for s in timeline if s.track == k]
                 for k in ("cpu", "accelerator")}
        self.kernel_seconds = _busy_seconds(track["cpu"] + track["accelerator"])
        self.cpu_seconds = sum(b - a for a, b in track["cpu"])
        self.accelerator_seconds = sum(b - a for a, b in track["accelerator"])
        self.overlap_seconds = overlap_seconds(timeline)
        self.trace = vm_trace(timeline, title)
        return self

    @property
    def accel_fraction(self) -> float | None:
        """The fraction of the encoder's MACs done on the accelerator: all but the CPU's
        float matmuls (None for a run that counted no MACs)."""
        if self.cpu_macs is None:
            return None
        return 1.0 - self.cpu_macs / self.total_macs

    @property
    def futures_overlap(self) -> float:
        """The fraction of the CPU kernels' time spent while an accelerator program was
        in flight."""
        return self.overlap_seconds / self.cpu_seconds if self.cpu_seconds else 0.0

    @property
    def dispatch_fraction(self) -> float:
        """The fraction of the run outside every kernel (dispatch and waits)."""
        return 1.0 - self.kernel_seconds / self.seconds


def _runqueue_seconds() -> float | None:
    """This thread's time runnable but not running so far (``/proc/thread-self/
    schedstat``'s second field), or None where the kernel keeps none."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return None


def _busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


@dataclass
class MiniLmEmbedder:
    """Sentence embeddings on a device (see the module docstring).

    Parameters
    ----------
    target : str
        The executor (``fsim``, ``rtl``... as ``--target``).
    config : str or HwConfig
        The accelerator.
    calibration : int
        Calibration sentences per bucket.
    directory : Path, optional
        The bucket cache (default :func:`cache_dir`).
    layers : int
        Encoder layers (6; fewer for tests).
    device : Device, optional
        The device, already open (the command line's
        :func:`~tensorfab.model_cli.open_target`, with its token); None: ``target``
        opened (:func:`~tensorfab.sim.get_device`) when the first sentence runs.
    """

    target: str = "fsim"
    config: str | HwConfig = "default"
    calibration: int = CALIBRATION_SENTENCES
    directory: Path | None = None
    layers: int = LAYERS
    buckets: dict[int, Bucket] = field(default_factory=dict)
    _loaded: dict[int, Any] = field(default_factory=dict)
    device: Any = None

    def bucket(self, seq: int) -> Bucket:
        """The compiled bucket of ``seq`` tokens (compiled or loaded once)."""
        if seq not in self.buckets:
            self.buckets[seq] = compile_bucket(seq, self.config, self.calibration,
                                               self.directory, self.layers)
        return self.buckets[seq]

    def _model(self, seq: int) -> Any:
        from tensorfab.runtime.resident import ResidentModel
        from tensorfab.sim import get_device

        if self.device is None:
            self.device = get_device(self.target)
        if seq not in self._loaded:  # the stored executable, futures on
            self._loaded[seq] = ResidentModel(self.bucket(seq).program, self.device,
                                              futures=True)
        return self._loaded[seq]

    def _sentence(self, text: str, bucket: int | None) -> tuple[Tokens, int, Any,
                                                                 dict[str, np.ndarray]]:
        """``text``'s tokens, its bucket length (``bucket`` or its token count rounded
        up), the bucket's loaded model and the padded feeds."""
        tokens = tokenize(text, MAX_TOKENS)
        seq = bucket if bucket is not None else bucket_length(len(tokens))
        if seq < len(tokens):
            raise MiniLmError(f"bucket {seq} is shorter than the sentence's {len(tokens)} "
                              "tokens")
        ids, mask = tokens.padded(seq)
        return tokens, seq, self._model(seq), {"input_ids": ids, "attention_mask": mask}

    def embed_one(self, text: str, bucket: int | None = None) -> tuple[np.ndarray, SentenceRun]:
        """The embedding of ``text`` (384 floats) and its :class:`SentenceRun`;
        ``bucket`` overrides the bucket length (at least the token count). The bucket's
        VM runs it (futures on), with a :class:`~tensorfab.runtime.profiling.LayerProfiler`
        on its kernel calls for the cycles and MACs."""
        from tensorfab.runtime.profiling import profile_program

        tokens, seq, model, feeds = self._sentence(text, bucket)
        profile = profile_program(model.program, feeds, self.device, resident=model)
        accel = [r for r in profile.layers if r.device == "accel"]
        cpu_macs = sum(_matmul_macs(r.in_shapes) for r in profile.layers
                       if r.device == "cpu" and r.op == "matmul")
        out = np.asarray(profile.output, np.float32).reshape(-1)
        run = SentenceRun(text, len(tokens), seq, profile.seconds, profile.total_cycles,
                          sum(int(r.macs or 0) for r in accel), cpu_macs,
                          bucket_macs(seq, self.layers))
        run.cycles_estimated = profile.estimated
        return out, run.with_timeline(model.vm.timeline, f"MiniLM bucket {seq} on "
                                                         f"{self.target}")

    def time_runs(self, text: str, runs: int, bucket: int | None = None) -> list[SentenceRun]:
        """``runs`` runs of ``text`` on the bucket's VM as a user runs it (no instrument
        on the kernel calls, so no per-layer cycles or MACs): their wall times and
        timeline figures (:meth:`SentenceRun.with_timeline`), in run order. Each run's
        ``host_runqueue_seconds`` is the time the host thread waited for a core
        (Linux's per-thread scheduler statistics; None where there are none)."""
        tokens, seq, model, feeds = self._sentence(text, bucket)
        timed = []
        for _ in range(runs):
            delay = _runqueue_seconds()
            t0 = time.perf_counter()
            model.run(feeds)
            seconds = time.perf_counter() - t0
            after = _runqueue_seconds()
            run = SentenceRun(text, len(tokens), seq, seconds, None, None, None,
                              bucket_macs(seq, self.layers))
            run.host_runqueue_seconds = (None if delay is None or after is None
                                         else after - delay)
            timed.append(run.with_timeline(model.vm.timeline,
                                           f"MiniLM bucket {seq} on {self.target}"))
        return timed

    def symbolic_vm(self) -> Any:
        """MiniLM as one VM executable over a symbolic ``seq``
        (:func:`~tensorfab.runtime.bucketed.bucketed_vm`): inputs ``input_ids`` (int64)
        and ``attention_mask`` (float32) of shape ``(1, seq)``, padded to their bucket by
        the executable (a multiple of :data:`~.minilm.BUCKET_BLOCK`; past
        :data:`~.minilm.MAX_TOKENS`, a
        :class:`~tensorfab.runtime.bucketed.BucketLimitError` naming the limit), each
        bucket compiled or loaded (:meth:`bucket`) the first time a length needs it. Its
        ``run`` gives the embedding ``(1, 384)``."""
        from tensorfab.runtime.bucketed import Buckets, bucketed_vm
        from tensorfab.runtime.graph_program import InputSpec

        inputs = [InputSpec("input_ids", 0, (1, "seq"), "int64"),
                  InputSpec("attention_mask", 1, (1, "seq"), "float32")]
        return bucketed_vm(inputs, [0, 0.0], Buckets(self._model, BUCKET_BLOCK, MAX_TOKENS))

    def embed(self, texts: list[str]) -> tuple[np.ndarray, list[SentenceRun]]:
        """Embeddings ``(len(texts), 384)`` and one :class:`SentenceRun` per sentence."""
        rows, runs = [], []
        for t in texts:
            e, r = self.embed_one(t)
            rows.append(e)
            runs.append(r)
        return np.stack(rows) if rows else np.zeros((0, HIDDEN), np.float32), runs

    def close(self) -> None:
        """Release the device memories of the loaded buckets."""
        for m in self._loaded.values():
            m.close()
        self._loaded.clear()


def float_embeddings(texts: list[str], layers: int = LAYERS) -> np.ndarray:
    """The float reference: onnxruntime on :func:`~.minilm.minilm_onnx` of each sentence's
    bucket, ``(len(texts), 384)``."""
    import onnxruntime as ort

    sessions: dict[int, Any] = {}
    rows = []
    for text in texts:
        tokens = tokenize(text, MAX_TOKENS)
        seq = bucket_length(len(tokens))
        if seq not in sessions:
            sessions[seq] = ort.InferenceSession(minilm_onnx(seq, layers).SerializeToString(),
                                                 providers=["CPUExecutionProvider"])
        ids, mask = tokens.padded(seq)
        rows.append(sessions[seq].run(None, {"input_ids": ids, "attention_mask": mask})[0][0])
    return np.stack(rows) if rows else np.zeros((0, HIDDEN), np.float32)


def cosine_matrix(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """Pairwise cosine similarities of the rows of ``a`` (and ``b``)."""
    b = a if b is None else b
    an = a / np.linalg.norm(a, axis=1, keepdims=True)
    bn = b / np.linalg.norm(b, axis=1, keepdims=True)
    return an @ bn.T


__all__ = ["Bucket", "MiniLmEmbedder", "SentenceRun", "bucket_macs", "cache_dir",
           "calibration_tokens", "compile_bucket", "cosine_matrix", "float_embeddings"]
