"""``tensorfab compile``, ``run`` and ``inspect``: ONNX models to ``.tfm`` files and back.

* ``compile MODEL.onnx -o OUT.tfm [--int8 CALIB.npy] [--accel CONFIG] [--shape NAME=D,D]``:
  import, optionally quantize to int8 (onnxruntime's QDQ quantizer, per-tensor, on the
  calibration inputs in ``CALIB.npy``), lower to integer operators with the accelerator's
  fixed-point requantization, put the convolution chains on the accelerator, and save
  the runtime's ``.tfm`` file;
* ``run MODEL.tfm --input NAME=FILE.npy ... [-o OUT.npy]``: run it (the runtime only);
  the last line printed is a JSON summary;
* ``inspect FILE``: the IR text form of an ONNX model, or the contents of a ``.tfm``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np

from tensorfab.isa import TensorfabError


class ModelCliError(TensorfabError):
    """A usage error of the model commands."""


def _shapes(items: list[str] | None) -> dict[str, tuple[int | str, ...]]:
    out = {}
    for item in items or []:
        name, _, dims = item.partition("=")
        if not name or not dims:
            raise ModelCliError(f"--shape {item!r}: expected NAME=D,D,... (e.g. x=1,3,224,224)")
        out[name] = tuple(int(d) if d.lstrip("-").isdigit() else d for d in dims.split(","))
    return out


def _is_model_file(path: Path) -> bool:
    """Whether ``path`` is a ``.tfm`` file (what ``compile`` writes)."""
    import zipfile

    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return sorted(z.namelist()) == ["constants.npz", "graph.json"]


def _is_npy(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(6) == b"\x93NUMPY"


def cmd_compile(args: argparse.Namespace) -> int:
    from tensorfab.cli_output import check_writable
    from tensorfab.compiler.frontend import from_onnx, quantize_onnx
    from tensorfab.compiler.frontend.onnx_import import prepare_model
    from tensorfab.compiler.graph import accel
    from tensorfab.compiler.graph.accel_lowering import lower_accelerator_chains
    from tensorfab.compiler.graph.batch_norm_folding import fold_batch_norm
    from tensorfab.compiler.graph.constant_folding import fold_constants
    from tensorfab.compiler.graph.fixed_point import fixed_point_requantize
    from tensorfab.compiler.graph.layout_planning import pack_accel_layouts
    from tensorfab.compiler.graph.lower_runtime import lower_to_runtime
    from tensorfab.compiler.graph.partitioning import annotate_accelerator
    from tensorfab.compiler.graph.planning import plan_devices
    from tensorfab.compiler.graph.qdq_lowering import lower_qdq
    from tensorfab.compiler.graph.stem_im2col import im2col_small_channel_convs
    from tensorfab.runtime.artifact import save_model

    # before the import and compilation (the command line's one output policy)
    check_writable(Path(args.output), args.force, _is_model_file, suffixes=(".tfm",))
    model, _ = prepare_model(args.model)
    if args.int8:
        calib = np.load(args.int8)
        name = model.graph.input[0].name
        batches = [{name: calib[i:i + 32]} for i in range(0, len(calib), 32)]
        model = quantize_onnx(model, batches, per_channel=False)
    fn = fold_constants(fold_batch_norm(from_onnx(model, _shapes(args.shape))))
    if args.int8:
        fn = fixed_point_requantize(lower_qdq(fn))
    if args.accel:
        if not args.int8:
            raise ModelCliError("--accel needs --int8: the accelerator runs int8 layers")
        fn = lower_accelerator_chains(pack_accel_layouts(im2col_small_channel_convs(
            plan_devices(annotate_accelerator(fn, accel(args.accel))))))
    else:
        fn = plan_devices(fn)
    program = lower_to_runtime(fn)
    save_model(program, args.output)
    ops = Counter(n.op for n in program.nodes)
    print(json.dumps({"output": str(args.output), "nodes": len(program.nodes),
                      "accel_programs": ops.get("accel.program", 0),
                      "ops": dict(sorted(ops.items()))}))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tensorfab.runtime.artifact import load_model
    from tensorfab.runtime.interpreter import run_program

    if args.output:  # a NumPy array file may be replaced by another
        from tensorfab.cli_output import check_writable

        check_writable(Path(args.output), args.force, _is_npy, suffixes=(".npy",))
    program = load_model(args.model)
    feeds = {}
    for item in args.input or []:
        name, _, path = item.partition("=")
        if not name or not path:
            raise ModelCliError(f"--input {item!r}: expected NAME=FILE.npy")
        feeds[name] = np.load(path)
    out = run_program(program, feeds)
    outs = list(out) if isinstance(out, tuple) else [out]
    if args.output:
        np.save(args.output, outs[0])
    summary = [{"shape": list(o.shape), "dtype": str(o.dtype),
                "argmax": o.reshape(o.shape[0], -1).argmax(axis=1).tolist()[:16]
                if o.ndim >= 1 and o.size else None} for o in outs]
    print(json.dumps({"outputs": summary}))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if path.suffix == ".onnx":
        from tensorfab.compiler.frontend import from_onnx
        from tensorfab.compiler.graph import astext

        print(astext(from_onnx(path)), end="")
        return 0
    from tensorfab.runtime.artifact import load_model

    program = load_model(path)
    info = {"inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype}
                       for i in program.inputs],
            "nodes": len(program.nodes),
            "ops": dict(sorted(Counter(n.op for n in program.nodes).items())),
            "constant_bytes": int(sum(np.asarray(c).nbytes
                                      for c in program.constants.values()))}
    print(json.dumps(info))
    return 0


def add_model_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``compile``, ``run`` and ``inspect`` on the ``tensorfab`` parser."""
    c = sub.add_parser("compile", help="compile an ONNX model into a .tfm file")
    c.add_argument("model", help="MODEL.onnx")
    c.add_argument("-o", "--output", required=True, help="OUT.tfm")
    c.add_argument("--int8", metavar="CALIB.npy", help="quantize to int8, calibrating on "
                   "these inputs")
    c.add_argument("--accel", metavar="CONFIG", help="run int8 convolutions on the "
                   "accelerator of this HwConfig preset")
    c.add_argument("--shape", action="append", metavar="NAME=D,D,...",
                   help="fix an input's shape")
    c.add_argument("--force", action="store_true",
                   help="overwrite an existing output that is not a .tfm file")
    c.set_defaults(func=cmd_compile)
    r = sub.add_parser("run", help="run a .tfm model on inputs from .npy files")
    r.add_argument("model", help="MODEL.tfm")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy")
    r.add_argument("-o", "--output", help="save the (first) output as .npy")
    r.add_argument("--force", action="store_true",
                   help="overwrite an existing output that is not a .npy file")
    r.set_defaults(func=cmd_run)
    i = sub.add_parser("inspect", help="show an ONNX model's IR or a .tfm file's contents")
    i.add_argument("file", help="MODEL.onnx or MODEL.tfm")
    i.set_defaults(func=cmd_inspect)
