"""The digits part of ``tensorfab demo``: the shipped digits CNN in float and in int8
with its layers on the functional simulator, accuracies and a per-layer table."""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

__all__ = ["run_digits_demo"]


def run_digits_demo(console: Console, batch: int = 40) -> int:
    """Compile and run the digits CNN; 0 if the accelerator's int8 result equals the
    CPU interpreter's integer graph bit for bit."""
    import onnxruntime as ort

    from tensorfab.models import load_digits_split
    from tensorfab.models.digits_cnn import model_path
    from tensorfab.models.digits_int8 import compile_digits_int8, on_executor, predict_in_batches

    _, _, x, y = load_digits_split(0)
    t0 = time.perf_counter()
    model = compile_digits_int8(batch=batch)
    console.print(f"[bold]compiled[/] digits CNN ({model_path().name}) to int8 for "
                  f"accelerator config {model.config}, batch {batch}, in "
                  f"{time.perf_counter() - t0:.1f} s", soft_wrap=True)
    sess = ort.InferenceSession(str(model_path()), providers=["CPUExecutionProvider"])
    float_acc = float((sess.run(None, {"image": x})[0].argmax(axis=1) == y).mean())
    t0 = time.perf_counter()
    int8 = predict_in_batches(on_executor(model.program, "fsim"), x, batch)
    dt = time.perf_counter() - t0
    int8_acc = float((int8.argmax(axis=1) == y).mean())
    exact = np.array_equal(int8, predict_in_batches(model.reference, x, batch))
    table = Table(title="digits CNN layers (per batch)")
    for col in ("layer", "operator", "device", "output", "MACs"):
        table.add_column(col, justify="right" if col == "MACs" else "left")
    for layer in model.layers:
        table.add_row(layer.name, layer.op, layer.device, str(layer.out_shape),
                      f"{layer.macs:,}")
    console.print(table)
    console.print(f"{len(x)} test images: float accuracy {float_acc:.4f} (onnxruntime), "
                  f"int8 accuracy {int8_acc:.4f} (accelerator layers on the functional simulator, "
                  f"{dt:.2f} s), {model.accel_mac_fraction:.1%} of MACs on the accelerator",
                  soft_wrap=True)
    verdict = "[bold green]PASS[/]" if exact else "[bold red]FAIL[/]"
    console.print(f"int8 result check against the CPU integer graph: {verdict}",
                  soft_wrap=True)
    return 0 if exact else 1
