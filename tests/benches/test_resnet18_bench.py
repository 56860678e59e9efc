"""``tensorfab bench resnet18`` at 32×32: its keys, MACs counted here from the
topology, and the RTL run bit-exact to the interpreter with cycles and a chart."""

from __future__ import annotations

import pytest

from tensorfab.benches.resnet18 import run_resnet18_bench


def resnet18_macs(size: int) -> tuple[int, int]:
    """(convolution MACs, dense MACs) of torchvision's ResNet-18 at ``size`` px."""
    s = size // 2  # conv1 7x7 stride 2
    conv = s * s * 64 * 3 * 49
    s //= 2  # max pool
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        so = s // stride
        conv += so * so * cout * cin * 9 + so * so * cout * cout * 9  # block 1
        if stride != 1 or cin != cout:
            conv += so * so * cout * cin  # 1x1 downsample
        conv += 2 * so * so * cout * cout * 9  # block 2
        s, cin = so, cout
    return conv, 512 * 1000


def _common(r: dict, tmp_path) -> None:
    for key in ("total_cycles", "macs", "accel_mac_fraction", "conv_utilization",
                "run_seconds", "compile_seconds", "matches_reference"):
        assert key in r
    conv, dense = resnet18_macs(32)
    assert r["macs"] == conv + dense
    assert r["accel_mac_fraction"] == 1.0  # the classifier too (dense_as_conv)
    assert r["matches_reference"] is True
    assert r["total_cycles"] == sum(v["cycles"] for v in r["layers"].values())
    assert r["requant_rounding"] == "single"
    # the per-program MACs are the model's own, counted here from the topology
    assert sum(v["macs"] for k, v in r["layers"].items() if k.startswith("conv")) == conv
    assert r["layers"]["dense21"]["macs"] == dense
    conv_cycles = sum(v["cycles"] for k, v in r["layers"].items() if k.startswith("conv"))
    assert 0 < r["conv_utilization"] <= 1
    assert r["conv_utilization"] == round(conv / (conv_cycles * 256), 4)
    assert r["accel_utilization"] == round((conv + dense) / (r["total_cycles"] * 256), 4)
    assert (tmp_path / "r.png").stat().st_size > 1000
    # the stem runs as a 1x1 convolution over im2col patches: fewer cycles than the
    # 16x16 pixels x 4 output blocks x 49 taps GEMM micro-ops of the 7x7 form
    assert r["layers"]["conv1"]["cycles"] < 16 * 16 * 4 * 49


def test_resnet18_bench_on_rtl_at_32px_fused(tmp_path) -> None:
    r = run_resnet18_bench("rtl", image_size=32, plot=str(tmp_path / "r.png"))
    _common(r, tmp_path)
    # the eight residual adds fused into the convolutions before them: 20 convolutions,
    # the global average pooling and the classifier, no add program
    assert r["fused_residual_adds"] == 8 and r["accel_programs"] == 22
    assert r["layers"]["global_avg_pool1"]["macs"] == 0
    assert sum(v["fused_residual"] for v in r["layers"].values()) == 8
    assert r["residual_adds_cpu"]["matches_reference"]
    assert r["residual_adds_accel"]["total_cycles"] == r["total_cycles"]


@pytest.mark.slow
def test_resnet18_bench_on_rtl_at_32px_separate_adds(tmp_path) -> None:
    r = run_resnet18_bench("rtl", image_size=32, plot=str(tmp_path / "r.png"), fuse=False,
                           requant_stage="alu")  # the other stage: the ALU's REQUANT pass
    _common(r, tmp_path)
    # 20 convolutions and the classifier, plus the residual adds where the partitioner
    # put them on the accelerator (its cost model at 100 MHz: all eight)
    assert r["residual_adds"] == "accel" and r["residual_add_count"] == 8
    assert r["accel_programs"] == 22 + 8 and r["fused_residual_adds"] == 0
    # the other placement ran in the same session, bit-exact too
    on_cpu, on_accel = r["residual_adds_cpu"], r["residual_adds_accel"]
    assert on_cpu["matches_reference"] and on_accel["matches_reference"]
    assert on_accel["total_cycles"] == r["total_cycles"]
    # the global pooling is a program only where the last add's output is on the device
    pool = r["layers"]["global_avg_pool1"]["cycles"]
    assert on_accel["total_cycles"] == on_cpu["total_cycles"] + on_accel["add_cycles"] + pool
    assert on_cpu["add_cycles"] == 0 and on_accel["add_cycles"] > 0
    assert on_accel["host_bytes"] < on_cpu["host_bytes"]
    assert r["residual_adds_accel_exact"] is True
    assert all(r["layers"][f"add{i}"]["macs"] == 0 for i in range(1, 9))


def test_resnet18_requantizing_stores_on_the_timing_model_at_32px(tmp_path) -> None:
    """The convolutions' REQUANT in their STOREs (the default) and in an ALU pass: both
    bit-exact to the interpreter on the timing device (fsim's values), the STOREs' fewer
    cycles (the timing model prices a requantizing STORE as a plain one)."""
    r = {stage: run_resnet18_bench("timing", image_size=32, plot=None, requant_stage=stage)
         for stage in ("store", "alu")}
    for stage, result in r.items():
        assert result["requant_stage"] == stage and result["matches_reference"] is True
    assert r["store"]["total_cycles"] < r["alu"]["total_cycles"]


def test_resnet18_bench_names_bad_arguments(capsys) -> None:
    """A non-positive image size or image count, or a config no name resolves, is
    refused by name before any work (they ended in an onnxruntime error, a numpy
    ``ValueError`` and a ``KeyError``)."""
    from tensorfab.cli import main

    for options, message in (
            (["--image-size", "0"], "image_size = 0: the side of the input images is a "
                                    "positive number of pixels"),
            (["--agreement", "-1"], "images = -1: the agreement needs a positive number "
                                    "of images"),
            (["--config", "nope"], "HwConfig.name = 'nope': not a preset")):
        assert main(["bench", "resnet18", "--target", "fsim", *options, "--json"]) == 2
        assert message in capsys.readouterr().err


def test_resnet18_bench_takes_a_board_config() -> None:
    """``--config ecp5-25f`` (a board configuration) resolves as on every command (it
    was a ``KeyError``), and a config that runs no residual add on the accelerator
    (block_in 4, block_out 2) says so instead of failing in the add's compilation."""
    from tensorfab.benches.resnet18 import integer_graph, residual_add_keys
    from tensorfab.fpga_builds.board_configs import board_config

    cfg = board_config("ecp5-25f")
    assert board_config(cfg) is cfg  # a config given itself (as the bench may be)
    _, g, _, rounding = integer_graph("ecp5-25f", 16, fuse=False)
    assert rounding == "double"  # no REQUANT: a weight row of 4 bytes holds no record
    keys = residual_add_keys(g, cfg, device=None, seed=0)  # (no device is reached)
    assert keys == {"residual_adds_accel_refusal": (
        "config 'ecp5-25f' runs no residual add on the accelerator: it needs "
        "block_in == block_out (got 4, 2), 8-bit inputs and 32-bit accumulators")}
