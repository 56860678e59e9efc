"""ONNX's own node conformance tests run through tensorfab.

The installed ``onnx`` package carries the generator of its backend node tests
(``onnx.backend.test.case.node.collect_testcases``: one model per test with its inputs
and expected outputs; the wheel ships no pre-built data). :func:`node_tests` generates
them once with a fixed numpy seed and caches the models and data under
``build/onnx_node_tests/onnx-<version>/``. :func:`run_node_test` compiles one model with
:func:`~tensorfab.compiler.model_compile.compile_onnx` (no calibration: the float path,
all on the CPU) and runs it with the runtime on the ``fsim`` device; the outcome is one
of :data:`OUTCOMES`. :func:`conformance_table` renders the per-op table of
docs/graph.md; ``python -m support.onnx_node_suite --write-docs`` (``make
onnx-conformance-table``) rewrites it there.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import sys
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from tensorfab.isa import TensorfabError

ROOT = Path(__file__).resolve().parents[2]
#: Where the generated tests are cached (one folder per onnx version).
CACHE = ROOT / "build" / "onnx_node_tests"
#: The numpy seed the generator runs with (its test data is drawn from np.random).
SEED = 0
#: Outcomes of one test.
OUTCOMES = ("pass", "wrong", "refused", "failed", "crashed")
#: Element types the project does not implement, refused by name and not counted.
EXOTIC_TYPES = re.compile(r"float8|e4m3|e5m2|float4|(?<![a-z])u?int4|(?<![a-z])u?int2"
                          r"|_int4|_uint4|_int2|_uint2", re.IGNORECASE)
#: Ops whose tests also run the int8 path (compared exactly).
INTEGER_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv",
                         "QLinearMatMul", "ConvInteger", "MatMulInteger"})
DOCS_BEGIN = "<!-- onnx-node-conformance: begin (written by make onnx-conformance-table) -->"
DOCS_END = "<!-- onnx-node-conformance: end -->"


@dataclass
class NodeTest:
    """One generated node test: its model file and its inputs and expected outputs."""

    name: str
    op_type: str
    folder: Path
    expanded: bool
    rtol: float
    atol: float
    ops: tuple[str, ...] = ()

    @property
    def model_path(self) -> Path:
        """The test's ``model.onnx``."""
        return self.folder / "model.onnx"

    def data(self) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """(input feeds by name, expected outputs in order)."""
        with np.load(self.folder / "data.npz", allow_pickle=False) as z:
            n_in = int(z["n_inputs"])
            n_out = int(z["n_outputs"])
            names = [str(s) for s in z["input_names"]] if n_in else []
            feeds = {names[i]: z[f"in{i}"] for i in range(n_in)}
            outs = [z[f"out{i}"] for i in range(n_out)]
        return feeds, outs

    @property
    def exotic(self) -> bool:
        """Whether the test is about an element type refused by name (float8, float4,
        int4, int2 variants)."""
        return bool(EXOTIC_TYPES.search(self.name))


@dataclass
class Outcome:
    """What happened to one test."""

    test: NodeTest
    kind: str
    message: str = ""
    extra: dict = field(default_factory=dict)


def _generate(folder: Path) -> None:
    from onnx.backend.test.case.node import collect_testcases

    state = np.random.get_state()
    np.random.seed(SEED)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            cases = collect_testcases(None)
    finally:
        np.random.set_state(state)
    index = []
    for case in cases:
        if case.kind != "node" or case.model is None or len(case.data_sets) != 1:
            continue
        inputs, outputs = case.data_sets[0]
        inputs, outputs = [_plain(a) for a in inputs], [_plain(a) for a in outputs]
        arrays = inputs + outputs
        sub = folder / case.name
        sub.mkdir(parents=True, exist_ok=True)
        onnx.save(case.model, sub / "model.onnx")
        plain = all(isinstance(a, np.ndarray) for a in arrays)
        names = [v.name for v in case.model.graph.input
                 if v.name not in {i.name for i in case.model.graph.initializer}]
        payload: dict[str, np.ndarray] = {"n_inputs": np.asarray(len(inputs) if plain else 0),
                                          "n_outputs": np.asarray(len(outputs) if plain else 0),
                                          "input_names": np.asarray(names[:len(inputs)])}
        if plain:
            payload.update({f"in{i}": a for i, a in enumerate(inputs)})
            payload.update({f"out{i}": a for i, a in enumerate(outputs)})
        np.savez(sub / "data.npz", **payload)
        ops = [n.op_type for n in case.model.graph.node]
        index.append({"name": case.name, "ops": ops, "plain": plain,
                      "rtol": case.rtol, "atol": case.atol})
    (folder / "index.json").write_text(json.dumps(index, indent=0))


def _plain(value: object) -> object:
    """A test value as a numpy array when it is a tensor of a numpy dtype (TensorProto
    and numpy scalars included); anything else (sequences, optionals, float8...) as is."""
    if isinstance(value, onnx.TensorProto):
        value = onnx.numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray) and value.dtype.kind not in "fiub":
        return None
    return value


def cache_folder() -> Path:
    """The cache folder of the installed onnx version (generated on first use)."""
    folder = CACHE / f"onnx-{onnx.__version__}-seed{SEED}"
    if not (folder / "index.json").is_file():
        # generated aside and renamed: parallel test workers never see half a cache
        partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        _generate(partial)
        try:
            partial.rename(folder)
        except OSError:  # another worker was first
            shutil.rmtree(partial, ignore_errors=True)
    return folder


def base_name(name: str) -> str:
    """The single-node test an ``_expanded`` variant expands."""
    return _base_name(name)


def _base_name(name: str) -> str:
    return re.sub(r"_expanded(_ver\d+)?$", "", name)


def node_tests(claimed: Iterable[str]) -> list[NodeTest]:
    """The single-node tests of the ``claimed`` op types and their ``_expanded``
    variants (attributed to the op they expand), in the generator's order."""
    claimed = set(claimed)
    folder = cache_folder()
    index = json.loads((folder / "index.json").read_text())
    op_of = {e["name"]: e["ops"][0] for e in index if len(e["ops"]) == 1}
    out = []
    for e in index:
        expanded = "_expanded" in e["name"]
        op = op_of.get(_base_name(e["name"])) if expanded else (
            e["ops"][0] if len(e["ops"]) == 1 else None)
        if op in claimed:
            out.append(NodeTest(e["name"], op, folder / e["name"], expanded,
                                e["rtol"], e["atol"], tuple(e["ops"])))
    return out


def _is_project_error(e: BaseException) -> bool:
    return isinstance(e, TensorfabError)


def run_node_test(test: NodeTest) -> Outcome:
    """Compile ``test``'s model on the float path and run it on fsim; compare with the
    expected outputs (onnx's per-test rtol/atol, dtypes equal)."""
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.isa.device import open_device
    from tensorfab.runtime.profiling import profile_program

    try:
        compiled = compile_onnx(str(test.model_path))
    except Exception as e:
        kind = "refused" if _is_project_error(e) else "crashed"
        return Outcome(test, kind, f"{type(e).__name__}: {e}")
    feeds, expected = test.data()
    if not expected:
        return Outcome(test, "crashed", "compiled a model whose data are not plain tensors")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = profile_program(compiled.program, feeds, open_device("fsim")).output
    except Exception as e:
        kind = "failed" if _is_project_error(e) else "crashed"
        return Outcome(test, kind, f"{type(e).__name__}: {e}")
    got = list(got) if isinstance(got, tuple) else [got]
    problem = compare_outputs(got, expected, test.rtol, test.atol)
    return Outcome(test, "wrong", problem) if problem else Outcome(test, "pass")


def compare_outputs(got: list, expected: list[np.ndarray], rtol: float,
                    atol: float) -> str:
    """What differs between ``got`` and ``expected`` ('' when they agree as onnx's
    backend test runner checks: same count, dtypes and shapes, values within
    rtol/atol, NaNs in the same places)."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for k, (g, want) in enumerate(zip(got, expected, strict=True)):
        g = np.asarray(g)
        if g.dtype != want.dtype:
            return f"output {k}: dtype {g.dtype}, expected {want.dtype}"
        if g.shape != want.shape:
            return f"output {k}: shape {g.shape}, expected {want.shape}"
        try:
            np.testing.assert_allclose(g, want, rtol=rtol, atol=atol)
        except AssertionError as e:
            return f"output {k}: {str(e).strip().splitlines()[-3:]}"
    return ""


def run_int8_node_test(test: NodeTest, config: str = "tiny") -> Outcome:
    """The int8 path of an integer op's test: compiled for the accelerator ``config``
    (partitioning, device planning; what the accelerator does not take stays on the
    CPU), run with the runtime on fsim, and the compiled integer graph
    (``CompiledModel.integer_function``, the program's bit-exact reference) on the CPU
    kernels: both must equal the expected outputs exactly. ``extra["accel"]`` counts
    the accelerator programs."""
    from tensorfab.compiler.graph.lower_runtime import evaluate
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.isa.device import open_device
    from tensorfab.runtime.profiling import profile_program

    try:
        compiled = compile_onnx(str(test.model_path), config=config)
    except Exception as e:
        return Outcome(test, "refused" if _is_project_error(e) else "crashed",
                       f"{type(e).__name__}: {e}")
    feeds, expected = test.data()
    accel = sum(n.op == "accel.program" for n in compiled.program.nodes)
    try:
        ran = profile_program(compiled.program, feeds, open_device("fsim")).output
        reference = evaluate(compiled.integer_function, feeds)
    except Exception as e:
        return Outcome(test, "failed" if _is_project_error(e) else "crashed",
                       f"{type(e).__name__}: {e}")
    for what, got in (("the program on fsim", ran), ("the integer graph", reference)):
        got = list(got) if isinstance(got, tuple) else [got]
        problem = compare_outputs(got, expected, 0.0, 0.0)
        if problem:
            return Outcome(test, "wrong", f"{what}: {problem}", {"accel": accel})
    return Outcome(test, "pass", extra={"accel": accel})


def missing_op(message: str) -> str | None:
    """The op_type an import error names as unsupported, if that is what it says."""
    m = re.search(r"\(op_type (\w+), opset \d+\)( in domain '[^']*')? is not supported",
                  message)
    return m.group(1) if m else None


def summary(outcomes: list[Outcome]) -> dict[str, int]:
    """Counts of the counted single-node tests (not expanded, not exotic) by outcome."""
    counted = [o for o in outcomes if not o.test.expanded and not o.test.exotic]
    c = Counter(o.kind for o in counted)
    return {"tests": len(counted), **{k: c.get(k, 0) for k in OUTCOMES}}


def conformance_table(outcomes: list[Outcome], claimed: Iterable[str]) -> str:
    """The per-op markdown table: counted tests, passes, refusals (with their reason),
    exotic-type tests refused by name, and the expanded variants (failures listed with
    the op they miss)."""
    by_op: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_op.setdefault(o.test.op_type, []).append(o)
    s = summary(outcomes)
    onnx_version = onnx.__version__
    lines = [DOCS_BEGIN, "",
             f"ONNX's node tests (onnx {onnx_version}, generated with numpy seed {SEED}), "
             f"float path (`compile_onnx` without calibration, run on `fsim`): "
             f"**{s['pass']} of {s['tests']}** single-node tests pass, {s['wrong']} give "
             f"wrong values, {s['refused']} are refused, {s['failed']} fail, "
             f"{s['crashed']} crash. Float8/float4/int4/int2 variants are refused by name "
             "and not counted.", "",
             "| ONNX op | tests | pass | refused (why) | type variants refused | expanded: "
             "pass / total (ops they use that are not claimed) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for op in sorted(by_op):
        items = by_op[op]
        single = [o for o in items if not o.test.expanded and not o.test.exotic]
        exotic = [o for o in items if not o.test.expanded and o.test.exotic]
        expanded = [o for o in items if o.test.expanded and not o.test.exotic]
        refusals = [o for o in single if o.kind != "pass"]
        why = "; ".join(sorted({f"`{o.test.name}`: {_reason(o)}" for o in refusals}))
        exp_pass = sum(o.kind == "pass" for o in expanded)
        claimed = set(claimed)
        missing = sorted({m for o in expanded if o.kind != "pass"
                          for m in (set(o.test.ops) - claimed or {_reason(o)})})
        exp_text = (f"{exp_pass} / {len(expanded)}" +
                    (f" ({', '.join(missing)})" if missing else "")) if expanded else ""
        lines.append(f"| {op} | {len(single)} | {sum(o.kind == 'pass' for o in single)} | "
                     f"{why} | {len(exotic) or ''} | {exp_text} |")
    lines += ["", DOCS_END]
    return "\n".join(lines)


def _reason(o: Outcome) -> str:
    """A short reason: the message after the node description."""
    text = o.message.split(": ", 1)[-1]
    text = text.split("model.onnx: ", 1)[-1]  # no machine-dependent path in the docs
    m = re.search(r"opset \d+\): (.*)", text)
    text = m.group(1) if m else text
    text = text.split("; supported op_types")[0]
    text = text.split("; supported:")[0]
    return text.replace("|", "/")[:120] if o.kind != "wrong" else "wrong values: " + text[:80]


def run_all(claimed: Iterable[str]) -> list[Outcome]:
    """Every test of the ``claimed`` ops."""
    return [run_node_test(t) for t in node_tests(claimed)]


def write_docs(path: Path, table: str) -> None:
    """Replace the table between the markers in ``path`` (appended when absent)."""
    text = path.read_text()
    if DOCS_BEGIN in text:
        head, rest = text.split(DOCS_BEGIN, 1)
        tail = rest.split(DOCS_END, 1)[1]
        text = head + table + tail
    else:
        text = text.rstrip("\n") + "\n\n" + table + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    """Run the suite; print the summary and, with ``--write-docs``, rewrite the table
    in docs/graph.md."""
    from tensorfab.compiler.frontend.onnx_ops import supported_op_types

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite the table in docs/graph.md")
    parser.add_argument("--show", default="", help="print the outcomes of these kinds "
                        "(comma-separated, e.g. wrong,refused)")
    args = parser.parse_args(argv)
    outcomes = run_all(supported_op_types())
    show = set(filter(None, args.show.split(",")))
    for o in outcomes:
        if o.kind in show:
            print(f"{o.kind:8} {o.test.name}: {o.message[:300]}")
    if args.write_docs:
        write_docs(ROOT / "docs" / "graph.md",
                   conformance_table(outcomes, supported_op_types()))
    print(json.dumps(summary(outcomes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
