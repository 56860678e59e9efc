"""The resource model: block RAM shapes by hand, the least-squares fit and its
leave-one-out check on a known linear law, the packaged model against its own
training builds and against real builds on other boards (docs/fpga.md), and the
errors."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorfab.dse.resource_builds import TRAINING_CONFIGS, synthesize_configs
from tensorfab.dse.resource_model import (
    FEATURES,
    MODEL_PATH,
    RESOURCES,
    SDRAM_CONTROLLER,
    ResourceModel,
    buffer_blocks,
    buffer_brams,
    config_features,
    dp16kd_blocks,
    fit_resource_model,
    memory_brams,
)
from tensorfab.dse.results import add_resources, pareto_fronts, write_best_config
from tensorfab.fpga_builds.board_configs import board_config
from tensorfab.fpga_builds.boards import BOARDS
from tensorfab.fpga_builds.errors import FpgaBuildError
from tensorfab.isa import PRESETS, HwConfig, UsageError


@pytest.fixture(scope="module")
def model() -> ResourceModel:
    return ResourceModel.load()


def test_dp16kd_blocks_take_the_best_shape() -> None:
    assert dp16kd_blocks(512, 36) == 1
    assert dp16kd_blocks(512, 37) == 2        # one bit more: a second block
    assert dp16kd_blocks(16384, 1) == 1
    assert dp16kd_blocks(256, 128) == 4       # 512x36 shape, 4 wide
    assert dp16kd_blocks(4096, 64) == 16      # 256 Kbit: 16 blocks of 16 Kbit
    # the 85F's 64 KiB memory is 512 Kbit: 32 blocks at any bus width that divides it
    assert memory_brams(64 * 1024, PRESETS["tiny"]) == 32
    assert memory_brams(16 * 1024, board_config("ecp5-25f")) == 8


def test_buffer_brams_of_tiny_by_hand() -> None:
    # tiny: input 256 x 32 bits (1), micro-ops 512 x 23 (1), accumulators 256 x 128 (4),
    # weights two 64-bit banks of 128 entries (2 each)
    assert buffer_blocks(PRESETS["tiny"]) == {"inp": 1, "uop": 1, "acc": 4, "wgt": 2 * 2}
    assert buffer_brams(PRESETS["tiny"]) == 10
    f = config_features(HwConfig(batch=2, block_in=8, block_out=4, mem_bus_width=32))
    assert (f["macs"], f["lanes"], f["mem_bus_width"]) == (64, 8, 32)


def _records(law: dict[str, dict[str, float]], noise: float = 0.0) -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for cfg in TRAINING_CONFIGS:
        f = config_features(cfg)
        rec = {"name": cfg.name, "config": cfg.to_dict(), "board": "ulx3s-85f",
               "source_hash": "test", "yosys": "Yosys test"}
        for res in RESOURCES:
            value = sum(law[res].get(k, 0.0) * f[k] for k in FEATURES[res])
            if res == "BRAM":
                value += memory_brams(BOARDS["ulx3s-85f"].mem_bytes, cfg)
            rec[res] = value * (1 + noise * rng.standard_normal())
        out.append(rec)
    return out


LAW = {"LUT": {"one": 9000, "macs": 40, "lanes": 1100, "mem_bus_width": 12,
               "dram_addr_width": 90, "perf_counters": 700},
       "FF": {"one": 3000, "macs": 20, "lanes": 200, "mem_bus_width": 30,
              "dram_addr_width": 50, "perf_counters": 360},
       "DSP": {"one": 4, "macs": 1, "lanes": 4},
       "BRAM": {"one": 2, "acc_brams": 2.5, "other_brams": 1.0}}


def test_fit_recovers_a_linear_law_and_leave_one_out_is_exact_on_it() -> None:
    fitted = fit_resource_model(_records(LAW))
    for res in RESOURCES:
        entry = fitted["resources"][res]
        want = [LAW[res].get(k, 0.0) for k in entry["features"]]
        assert entry["coefficients"] == pytest.approx(want, rel=1e-6, abs=1e-6)
        assert entry["loo"]["max_relative_error"] < 1e-6
    m = ResourceModel(fitted)
    cfg = PRESETS["small"]
    est = m.estimate(cfg, "ulx3s-85f", sdram=False)
    assert est["DSP"] == 4 + 64 + 4 * 8
    blocks = buffer_blocks(cfg)
    assert est["BRAM"] == round(2 + 2.5 * blocks["acc"] + blocks["inp"] + blocks["uop"]
                                + blocks["wgt"]) + 32


def test_leave_one_out_sees_noise_the_training_fit_hides() -> None:
    fitted = fit_resource_model(_records(LAW, noise=0.05))
    lut = fitted["resources"]["LUT"]
    loo = lut["loo"]
    assert loo["max_relative_error"] > lut["training_error_max"]
    # the held-out figure of each build is the fit of the others, recomputed here
    recs = _records(LAW, noise=0.05)
    x = np.array([[config_features(TRAINING_CONFIGS[i])[k]
                   for k in FEATURES["LUT"]] for i in range(len(recs))])
    y = np.array([r["LUT"] for r in recs])
    coef, *_ = np.linalg.lstsq(x[1:], y[1:], rcond=None)
    assert loo["builds"][0]["estimate"] == pytest.approx(float(x[0] @ coef), abs=0.1)


def test_too_few_builds_is_one_clear_error() -> None:
    with pytest.raises(UsageError, match="needs at least 7 builds"):
        fit_resource_model(_records(LAW)[:4])


def test_packaged_model_is_its_training_data_refitted(model: ResourceModel) -> None:
    data = model.data
    assert data["yosys"].startswith("Yosys 0.") and len(data["source_hash"]) == 16
    assert {b["name"] for b in data["builds"]} == {c.name for c in TRAINING_CONFIGS}
    assert all(b["source_hash"] == data["source_hash"] for b in data["builds"])
    again = fit_resource_model(data["builds"])
    for res in RESOURCES:
        assert again["resources"][res] == data["resources"][res]
    # DSPs follow the design exactly: one per MAC, four per ALU lane, four in load/store
    assert data["resources"]["DSP"]["loo"]["max_relative_error"] == 0
    # the performance counters (eleven 32-bit counters) cost registers: the two builds
    # without them (ecp5-85f, ecp5-25f) say how many
    entry = data["resources"]["FF"]
    coef = dict(zip(entry["features"], entry["coefficients"], strict=True))
    assert 100 < coef["perf_counters"] < 2000, coef["perf_counters"]
    for res in RESOURCES:
        assert data["resources"][res]["loo"]["max_relative_error"] <= 0.15, res


@pytest.mark.parametrize(("board", "config", "dsp", "bram"), [
    ("ulx3s-25f", "ecp5-25f", 20, 19),       # docs/fpga.md: nextpnr 20/28 DSP, 19/56 BRAM
    ("orangecrab-85f", "tiny", 36, 50),
])
def test_estimates_match_real_builds_on_other_boards(model: ResourceModel, board: str,
                                                      config: str, dsp: int,
                                                      bram: int) -> None:
    # ecp5-25f (1x4x2, 16-bit bus) is a training build on the 85F's top: on a 16 KiB
    # board the memory (8 blocks instead of 32) comes from its shape; the OrangeCrab
    # 85F is another board with the 85F's memory
    est = model.estimate(board_config(config), board, sdram=False)
    assert est["DSP"] == dsp
    assert abs(est["BRAM"] - bram) <= 3
    fits, over = model.fits(est, board)
    assert fits and over == []


def test_reported_builds_match_by_values_not_names(model: ResourceModel) -> None:
    renamed = dataclasses.replace(PRESETS["small"], name="mine", clock_mhz=42.0)
    known = model.reported_build("ulx3s-85f", renamed)
    assert known is not None and known["config"] == "small" and not known["routed"]
    assert model.reported_build("ulx3s-85f", PRESETS["default"]) is None
    assert model.reported_build("ulx3s-25f", PRESETS["small"]) is None
    best = model.reported_fmax("ulx3s-85f")
    assert best is not None and (best["config"], best["fmax_mhz"]) == ("ecp5-85f", 99.9)


def test_reported_build_is_the_one_with_the_memory_asked_about(model: ResourceModel) -> None:
    """ecp5-85f and tiny on the 85F each have a build with SDRAM and one with on-chip
    memory: each memory gets its own; small has only an on-chip build, which stands for
    the SDRAM too; no memory named: the first recorded."""
    for config, sdram, on_chip in (("ecp5-85f", 99.9, 73.08), ("tiny", 76.1, 63.6),
                                   ("small", None, None)):
        cfg = board_config(config)
        got = {m: model.reported_build("ulx3s-85f", cfg, m) for m in ("sdram", "on-chip",
                                                                       None)}
        expected = ({"sdram": ("sdram", sdram), "on-chip": ("on-chip", on_chip),
                     None: ("sdram", sdram)} if sdram else
                    dict.fromkeys(("sdram", "on-chip", None), ("on-chip", None)))
        assert {m: (b["memory"], b["fmax_mhz"]) for m, b in got.items()} == expected, config


@pytest.mark.parametrize(("board", "config", "measured"), [
    # flat Yosys syntheses of the SDRAM SoC (``fpga_builds.breakdown.flat_synthesis``:
    # its ``logic`` and totals)
    ("ulx3s-85f", "tiny", {"LUT": 15203, "FF": 7975, "DSP": 36, "BRAM": 18}),
    ("ulx3s-25f", "ecp5-25f", {"LUT": 11390, "FF": 6115, "DSP": 20, "BRAM": 11}),
])
def test_an_sdram_soc_has_no_memory_brams_and_the_controllers_logic(
        model: ResourceModel, board: str, config: str, measured: dict[str, int]) -> None:
    """The board's default memory (SDRAM on a ULX3S): the on-chip estimate without the
    memory's block RAMs, with the controller's LUTs and FFs, within the model's
    held-out error of a real synthesis."""
    cfg = board_config(config)
    sdram = model.estimate(cfg, board)
    assert sdram == model.estimate(cfg, board, sdram=True)
    on_chip = model.estimate(cfg, board, sdram=False)
    assert on_chip["BRAM"] - sdram["BRAM"] == memory_brams(BOARDS[board].mem_bytes, cfg)
    assert sdram["DSP"] == on_chip["DSP"] == measured["DSP"]
    assert sdram["LUT"] - on_chip["LUT"] == SDRAM_CONTROLLER["LUT"]
    for res in RESOURCES:
        assert abs(sdram[res] - measured[res]) <= max(0.15 * measured[res], 3), res
    with pytest.raises(FpgaBuildError, match="orangecrab-25f: no SDRAM"):
        model.estimate(cfg, "orangecrab-25f", sdram=True)


def test_default_does_not_fit_the_85f_and_says_why(model: ResourceModel) -> None:
    est = model.estimate(PRESETS["default"], "ulx3s-85f")
    fits, over = model.fits(est, "ulx3s-85f")
    assert not fits and any(o.startswith("DSP ") and o.endswith("> 156") for o in over)


def test_model_errors_name_the_board_and_the_file(tmp_path: Path,
                                                  model: ResourceModel) -> None:
    with pytest.raises(UsageError, match="icebreaker is ice40"):
        model.estimate(PRESETS["tiny"], "icebreaker")
    with pytest.raises(UsageError, match="unknown board 'nope'"):
        model.estimate(PRESETS["tiny"], "nope")
    with pytest.raises(UsageError, match="cannot read the resource model"):
        ResourceModel.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(UsageError, match=r"bad.json: not JSON \(line 1\)"):
        ResourceModel.load(bad)
    data = json.loads(MODEL_PATH.read_text())
    data["resources"]["DSP"]["features"].append("nope")
    bad.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="resource 'DSP' is missing or malformed"):
        ResourceModel.load(bad)


def test_best_config_is_the_fastest_that_fits(tmp_path: Path, model: ResourceModel) -> None:
    small, big = PRESETS["small"], PRESETS["default"]
    summary = [{"name": c.name, "config": c.to_json(), "gops": g}
               for c, g in ((small, 1.0), (big, 4.0), (PRESETS["tiny"], 0.5))]
    add_resources(summary, model, "ulx3s-85f")
    by = {s["name"]: s for s in summary}
    assert by["default"]["fits"] is False and by["small"]["fits"] is True
    assert by["small"]["gops_per_dsp"] == pytest.approx(1.0 / by["small"]["dsp_est"])
    assert by["small"]["gops_per_klut"] == pytest.approx(1e3 / by["small"]["lut_est"])
    path = tmp_path / "best.json"
    assert write_best_config(summary, path) == "small"
    assert board_config(path) == dataclasses.replace(small, name="small")
    # nothing fits: no file, and an old one is removed
    assert write_best_config([s for s in summary if s["name"] == "default"], path) is None
    assert not path.exists()
    fronts = pareto_fronts(summary)
    assert set(fronts["LUT"]) == {"tiny", "small", "default"}  # more LUT, more GOPS


def test_fit_resources_command_refuses_an_unknown_config(tmp_path: Path) -> None:
    run = subprocess.run([str(Path(sys.executable).parent / "tensorfab"), "dse",
                          "fit-resources", "--configs", "tiny,huge", "--work",
                          str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "--configs: unknown training config 'huge'" in run.stderr
    assert "Traceback" not in run.stderr


def test_fit_resources_refuses_a_board_that_is_not_ecp5(tmp_path: Path) -> None:
    # --board icebreaker ran minutes of iCE40 syntheses and fitted their logic cells and
    # SB_MAC16s into the ECP5 model (LUT4 slots, MULT18X18D, DP16KD) as if they were those
    with pytest.raises(UsageError) as info:
        synthesize_configs(TRAINING_CONFIGS[:1], "icebreaker", tmp_path)
    assert str(info.value) == ("--board icebreaker: the resource model is fitted to ECP5 "
                               "builds; icebreaker is ice40")
    assert not any(tmp_path.iterdir())  # nothing synthesized


def test_fit_resources_checks_its_output_and_config_count_before_synthesizing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import tensorfab.dse.resource_builds as builds
    from tensorfab.cli import main

    def synthesize(*args, **kwargs):
        raise AssertionError("synthesized")

    monkeypatch.setattr(builds, "synthesize_configs", synthesize)
    # -o of a user's file was replaced by the model after the syntheses (25 to 80
    # minutes); a folder that did not exist failed only then, with a traceback
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}\n')
    for output, message in [
            (notes, f"{notes} exists and is not a file this command writes; pass --force to "
                    "overwrite it"),
            (tmp_path / "no" / "m.json", f"cannot write {tmp_path / 'no' / 'm.json'}: "
                                         f"folder {tmp_path / 'no'} does not exist")]:
        assert main(["dse", "fit-resources", "--work", str(tmp_path / "w"),
                     "-o", str(output)]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"
    assert notes.read_text() == '{"mine": 1}\n'
    # two configs were synthesized (minutes each) before the fit said it needs seven
    assert main(["dse", "fit-resources", "--configs", "tiny,small", "--work",
                 str(tmp_path / "w"), "-o", str(tmp_path / "m.json")]) == 2
    assert capsys.readouterr().err == (
        "error: --configs tiny,small: 2 training config(s), but the fit needs at least 7 "
        f"builds (leave --configs out for all {len(TRAINING_CONFIGS)})\n")


@pytest.mark.slow
def test_a_fresh_synthesis_of_tiny_agrees_with_the_model(tmp_path: Path,
                                                         model: ResourceModel) -> None:
    """Yosys on tiny now: the packaged build's figures when the design is the one the
    model was fitted to, else within the model's held-out error (a larger gap says the
    design changed enough to run `tensorfab dse fit-resources` again)."""
    from tensorfab.dse.resource_builds import synthesize_configs

    (fresh,) = synthesize_configs([PRESETS["tiny"]], "ulx3s-85f", tmp_path)
    packaged = next(b for b in model.data["builds"] if b["name"] == "tiny")
    if fresh["source_hash"] == model.data["source_hash"]:
        assert {r: fresh[r] for r in RESOURCES} == {r: packaged[r] for r in RESOURCES}
    est = model.estimate(PRESETS["tiny"], "ulx3s-85f", sdram=False)
    for res in RESOURCES:
        assert abs(est[res] - fresh[res]) <= 0.15 * fresh[res], res


def test_reported_builds_are_docs_fpga_md_results_table() -> None:
    """Each recorded build's counts and fmax are its row in docs/fpga.md's results
    table (one row per board, config and fmax)."""
    import re
    from pathlib import Path

    from tensorfab.dse.resource_model import REPORTED_BUILDS

    text = (Path(__file__).resolve().parents[2] / "docs" / "fpga.md").read_text()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ulx3s") or line.startswith("| orangecrab")]

    def first(cell: str) -> int:
        return int(re.match(r"[*\s]*([\d ]+?)\s*(/|$|\*)", cell).group(1).replace(" ", ""))

    for build in REPORTED_BUILDS:
        fmax = "—" if build["fmax_mhz"] is None else f"{build['fmax_mhz']:g}"
        (row,) = [r for r in rows if r[0] == build["board"]
                  and r[1].split()[0].strip(",") == build["config"]
                  and r[7].strip("*").startswith(fmax) and r[3]]
        assert [first(row[k]) for k in (3, 4, 5, 6)] == [
            build["used"][k] for k in ("LUT", "FF", "DSP", "BRAM")], row


def test_requant_configs_count_the_store_requantization_dsps(monkeypatch) -> None:
    """A config with REQUANT gets its store's four multipliers per lane on top of the
    fitted estimate."""
    from tensorfab.dse import resource_model
    from tensorfab.isa import PRESETS

    model = ResourceModel.load()
    cfg = PRESETS["default"]
    with_store = model.estimate(cfg, "ulx3s-85f")["DSP"]
    monkeypatch.setattr(resource_model, "requant_supported", lambda _cfg: False)
    fitted = model.estimate(cfg, "ulx3s-85f")["DSP"]
    lanes = cfg.batch * cfg.block_out
    assert with_store - fitted == resource_model.STORE_REQUANT_DSP_PER_LANE * lanes == 64


def test_a_sequential_multiplier_saves_three_dsps_per_lane() -> None:
    """ulx3s-25f ``ecp5-25f`` measured 20 DSP, 14 with ``sequential_multiplier``
    (``fpga breakdown``): the estimate drops by three per ALU lane."""
    from tensorfab.dse import resource_model
    from tensorfab.fpga_builds.board_configs import board_config

    model = ResourceModel.load()
    cfg = board_config("ecp5-25f")
    plain = model.estimate(cfg, "ulx3s-25f")["DSP"]
    seq = model.estimate(cfg.replace(sequential_multiplier=True), "ulx3s-25f")["DSP"]
    lanes = cfg.batch * cfg.block_out
    assert plain - seq == resource_model.SEQUENTIAL_ALU_DSP_SAVED_PER_LANE * lanes == 6


def test_a_config_without_the_vector_alu_has_its_dsps_fewer() -> None:
    """``ecp5-25f`` without the vector ALU measured 20 DSP (``fpga breakdown``,
    flattened), as with it: the ALU's four per lane out, the STOREs' REQUANT's four per
    lane in (block_in 4 has it only without the ALU). Where the STOREs requantize
    either way (``default``), the estimate drops by the ALU's four per lane."""
    from tensorfab.dse import resource_model
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.isa import PRESETS

    model = ResourceModel.load()
    cfg = board_config("ecp5-25f")
    assert model.estimate(cfg.replace(vector_alu=False), "ulx3s-25f")["DSP"] == \
        model.estimate(cfg, "ulx3s-25f")["DSP"]
    default = PRESETS["default"]
    lanes = default.batch * default.block_out
    assert model.estimate(default, "ulx3s-85f")["DSP"] - model.estimate(
        default.replace(vector_alu=False), "ulx3s-85f")["DSP"] == \
        resource_model.ALU_DSP_PER_LANE * lanes == 64
