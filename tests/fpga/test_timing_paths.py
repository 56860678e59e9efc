"""`tensorfab fpga paths`: failing paths from nextpnr's detailed timing report.

A hand-made report whose paths are worked out below; the real report of a build is
checked against nextpnr's own critical path in test_fpga_flow.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorfab.cli import main
from tensorfab.fpga_builds.errors import FpgaBuildError
from tensorfab.fpga_builds.timing_paths import (
    Netlist,
    load_netlist,
    load_timing_report,
    setup_ns,
    signal_of,
    timing_paths,
)


def _net(name: str, driver: str, port: str, *endpoints: tuple[str, str, float],
         event: str = "posedge clk") -> dict:
    return {"net": name, "sources": [], "driver": driver, "port": port, "event": event,
            "endpoints": [{"cell": c, "port": p, "event": "posedge clk", "delay": [0.1, t]}
                          for c, p, t in endpoints]}


# Registers a, c, b (two bits) and d; LUTs l1, x, y. In the netlist (delay model:
# flip-flop 0.52, LUT 0.26, net 0.8):
#   a ──────────→ l1.A ─┐
#   c ──→ x ──→ l1.B ─┼─ l1 ─→ b[0].DI     latest modelled path c → x → l1 (2.64)
#   b[0] ─────────→ l1.C ─┘
#   a ──→ y ─→ b[1].DI, d.CE
# nextpnr's report has only the endpoints with their arrival (ns).
FF_B, FF_B1, FF_D = "top.u.b_TRELLIS_FF_Q", "top.u.b_TRELLIS_FF_Q_1", "top.u.d_TRELLIS_FF_Q"
REPORT = {"fmax": {}, "critical_paths": [], "detailed_net_timings": [
    _net("clk", "pll", "CLKOP", (FF_B, "CLK", 0.0), event="<async>"),
    _net("top.u.b_TRELLIS_FF_Q_DI", "l1", "F", (FF_B, "M", 11.0)),
    _net("top.u.y_LUT4_Z", "y", "F", (FF_B1, "M", 10.5), (FF_D, "CE", 4.0)),
]}


def _cell(ctype: str, **ports: list[int | str]) -> dict:
    outputs = {"Q", "Z"}
    return {"type": ctype, "connections": ports,
            "port_directions": {p: "output" if p in outputs else "input" for p in ports}}


def _yosys(cells: dict, nets: dict[str, list[int]]) -> dict:
    return {"modules": {"top": {"cells": cells, "netnames": {
        n: {"hide_name": 0, "bits": b} for n, b in nets.items()}}}}


NETLIST_JSON = _yosys(
    {"top.a_TRELLIS_FF_Q": _cell("TRELLIS_FF", DI=[1], Q=[2]),
     "top.c_TRELLIS_FF_Q": _cell("TRELLIS_FF", Q=[3]),
     FF_B: _cell("TRELLIS_FF", DI=[10], Q=[4]),
     FF_B1: _cell("TRELLIS_FF", DI=[11], Q=[5]),
     FF_D: _cell("TRELLIS_FF", CE=[11], Q=[6]),
     "top.u.b_TRELLIS_FF_Q_DI_LUT4_Z": _cell("LUT4", A=[2], B=[7], C=[4], D=["0"], Z=[10]),
     "top.u.x_LUT4_Z": _cell("LUT4", A=[3], Z=[7]),
     "top.u.y_LUT4_Z": _cell("LUT4", A=[2], Z=[11])},
    {"top.a": [2], "top.c": [3], "top.u.b": [4, 5], "top.u.d": [6], "top.u.x": [7],
     "top.u.b_TRELLIS_FF_Q_DI": [10], "top.u.y_LUT4_Z": [11]})
NETLIST = Netlist(NETLIST_JSON)


def test_signal_of_strips_what_synthesis_added() -> None:
    assert signal_of("soc.core.compute.cur2_TRELLIS_FF_Q_28") == "soc.core.compute.cur2"
    assert signal_of("soc.core.compute.s2_alu_LUT4_D_Z[3]") == "soc.core.compute.s2_alu"
    assert signal_of("soc.core.compute.uop_raw[19]") == "soc.core.compute.uop_raw"
    assert signal_of("$nextpnr_CCU2C_219$CIN") == ""
    assert signal_of("soc.core.uop_buf.0.0_DOA17_TRELLIS_FF_Q") == "soc.core.uop_buf.0.0"
    assert signal_of("soc.core.acc_buf.0.0_ADB7") == "soc.core.acc_buf.0.0"
    assert signal_of("soc.core.arbiter.q.storage.0.6_DO_2") == "soc.core.arbiter.q.storage.0.6"
    assert signal_of("soc.core.fetch.do_next") == "soc.core.fetch.do_next"


def test_paths_grouped_by_start_and_end_register() -> None:
    result = timing_paths(REPORT, 100.0, NETLIST)
    assert (result["endpoints"], result["failing"], result["worst_arrival_ns"]) == (3, 2, 11.0)
    first, second = result["groups"]
    assert (first["from"], first["to"], first["endpoints"]) == ("top.c", "top.u.b", 1)
    assert (first["slack_ns"], first["to_pin"]) == (-1.0, f"{FF_B}.M")
    assert first["through"] == [{"signal": "top.c", "model_ns": 0.52},
                                {"signal": "top.u.x", "model_ns": 1.58},
                                {"signal": "top.u.b", "model_ns": 2.64}]
    assert first["model_ns"] == 3.44
    assert (second["from"], second["to"], second["slack_ns"]) == ("top.a", "top.u.b", -0.5)
    assert [s["signal"] for s in second["through"]] == ["top.a", "top.u.y"]
    assert result["modules"] == [{"module": "top.u", "failing": 2, "slack_ns": -1.0}]


def test_paths_without_netlist_group_by_end() -> None:
    (group,) = timing_paths(REPORT, 100.0)["groups"]
    assert (group["from"], group["to"], group["endpoints"]) == (None, "top.u.b", 2)
    assert group["through"] == [] and group["model_ns"] is None


def test_paths_against_another_clock() -> None:
    result = timing_paths(REPORT, 1000 / 10.75, NETLIST)
    assert result["failing"] == 1 and [g["from"] for g in result["groups"]] == ["top.c"]
    assert timing_paths(REPORT, 50.0, NETLIST)["groups"] == []
    with pytest.raises(FpgaBuildError, match="positive"):
        timing_paths(REPORT, 0)


def test_netlist_bits_and_loops() -> None:
    assert (NETLIST.bit_of("top.u.b[1]"), NETLIST.bit_of("top.u.b"), NETLIST.bit_of("top.a[0]"),
            NETLIST.bit_of("top.u.b[2]"), NETLIST.bit_of("nope")) == (5, 4, 2, None, None)
    assert NETLIST.latest_path("nope") is None
    loop = Netlist(_yosys({"p": _cell("LUT4", A=[2], B=[9], Z=[1]),
                           "q": _cell("LUT4", A=[1], Z=[2]),
                           "r_TRELLIS_FF_Q": _cell("TRELLIS_FF", Q=[9])},
                          {"p": [1], "q": [2]}))
    path = loop.latest_path("q")  # a combinational loop ends the walk, not the program
    assert path is not None and path["from"] == "r"
    with pytest.raises(FpgaBuildError, match="no module 'top'"):
        Netlist({"modules": {}})


def test_launchers_and_register_names() -> None:
    """Every register with a path into a net; a register is named by its cell, as
    nextpnr names it, even where its output net has a shorter name (an LED's)."""
    assert NETLIST.launchers("top.u.b_TRELLIS_FF_Q_DI") == {"top.a", "top.c", "top.u.b"}
    assert NETLIST.launchers("top.u.y_LUT4_Z") == {"top.a"}
    assert NETLIST.launchers("nope") == set()
    led = Netlist(_yosys({"top.core.error_TRELLIS_FF_Q": _cell("TRELLIS_FF", Q=[2]),
                          "top.led_LUT4_Z": _cell("LUT4", A=[2], Z=[3])},
                         {"top.leds": [2], "top.led_LUT4_Z": [3]}))
    path = led.latest_path("top.led_LUT4_Z")
    assert path is not None and path["from"] == "top.core.error"
    assert led.launchers("top.led_LUT4_Z") == {"top.core.error"}


def test_report_errors(tmp_path: Path) -> None:
    with pytest.raises(FpgaBuildError, match="no nextpnr report"):
        load_timing_report(tmp_path)
    (tmp_path / "nextpnr-report.json").write_text(json.dumps({"fmax": {}}))
    with pytest.raises(FpgaBuildError, match="without --detailed-timing-report"):
        load_timing_report(tmp_path)
    (tmp_path / "nextpnr-report.json").write_text("{")
    with pytest.raises(FpgaBuildError, match=r"nextpnr-report\.json: not a JSON nextpnr report"):
        load_timing_report(tmp_path)
    # a report whose nets are not nextpnr's form was a KeyError or TypeError traceback
    # from timing_paths ('delay'); now the report's file, net and endpoint are named
    report = tmp_path / "nextpnr-report.json"
    no_delay = _net("n1", "l1", "F", (FF_B, "M", 1.0))
    del no_delay["endpoints"][0]["delay"]
    for nets, problem in [
            ({}, "detailed_net_timings is not a list of nets"),
            ([{"net": "n0", "event": "posedge clk"}], "detailed_net_timings[0] has no "
                                                      "'endpoints'"),
            ([REPORT["detailed_net_timings"][1], no_delay],
             "detailed_net_timings[1] (net 'n1') endpoint 0 has no 'delay'"),
            ([_net("n2", "l1", "F", (FF_B, "M", "late"))],
             "detailed_net_timings[0] (net 'n2') endpoint 0: delay [0.1, 'late'] is not a "
             "list of numbers (min, max)")]:
        report.write_text(json.dumps({"detailed_net_timings": nets}))
        with pytest.raises(FpgaBuildError) as info:
            load_timing_report(tmp_path)
        assert str(info.value) == (f"{report}: {problem}; not what nextpnr writes (a "
                                   "damaged or edited report?): rebuild it with `tensorfab "
                                   "fpga build`")
    report.write_text(json.dumps(REPORT))
    assert load_timing_report(tmp_path) == REPORT
    with pytest.raises(FpgaBuildError, match=r"top\.json: no Yosys netlist"):
        load_netlist(tmp_path)
    (tmp_path / "top.json").write_text("[")
    with pytest.raises(FpgaBuildError, match=r"top\.json: not a JSON Yosys netlist"):
        load_netlist(tmp_path)
    (tmp_path / "top.json").write_text(json.dumps({"modules": {"cpu": {}}}))
    with pytest.raises(FpgaBuildError, match=r"top\.json: the netlist has no module 'top'"):
        load_netlist(tmp_path)
    (tmp_path / "top.json").write_text(json.dumps(NETLIST_JSON))
    assert load_netlist(tmp_path).bit_of("top.u.b[1]") == 5


def test_top_below_one_is_refused() -> None:
    assert len(timing_paths(REPORT, 100.0, NETLIST, top=1)["groups"]) == 1
    for top in (0, -1):  # -1 kept all groups but the last
        with pytest.raises(FpgaBuildError, match=f"^top must be 1 or more, not {top}$"):
            timing_paths(REPORT, 100.0, NETLIST, top=top)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nextpnr-report.json").write_text(json.dumps(REPORT))
    assert main(["fpga", "paths", str(tmp_path)]) == 2  # no report.json: needs a target
    assert "report.json not found; give --target-mhz" in capsys.readouterr().err
    (tmp_path / "report.json").write_text(json.dumps({"board": "ulx3s-25f"}))
    assert main(["fpga", "paths", str(tmp_path)]) == 2
    assert "report.json: no target_mhz in it; give --target-mhz" in capsys.readouterr().err
    (tmp_path / "report.json").write_text(json.dumps({"target_mhz": 100.0}))
    (tmp_path / "top.json").write_text(json.dumps(NETLIST_JSON))
    assert main(["fpga", "paths", str(tmp_path), "--json", "--top", "1"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out.splitlines()[-1])
    assert (result["failing"], result["group_count"], len(result["groups"])) == (2, 2, 1)
    assert "2 of 3 register inputs" in err and "top.c" in err and "top.u.b" in err
    assert main(["fpga", "paths", str(tmp_path), "--target-mhz", "50", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["failing"] == 0


def test_lut_ram_write_pins_count_their_setup() -> None:
    """A LUT RAM's write enable that arrives 0.2 ns before the clock still misses it
    (nextpnr adds its 0.392 ns setup), a flip-flop's input at that time does not."""
    ram, ff = "top.flags.0.4$DPRAM_COMB3", "top.u.e_TRELLIS_FF_Q"
    assert setup_ns(ram, "WRE") == pytest.approx(0.392) and setup_ns(ff, "M") == 0.0
    assert setup_ns("top.acc_buf.0.0", "DIA17") == pytest.approx(0.218)
    report = {"fmax": {}, "critical_paths": [], "detailed_net_timings": [
        _net("top.flags_wre", "l1", "F", (ram, "WRE", 9.8), (ff, "M", 9.8))]}
    result = timing_paths(report, 100.0)
    assert result["failing"] == 1 and result["worst_arrival_ns"] == 9.8
    (group,) = result["groups"]
    assert group["to_pin"] == f"{ram}.WRE"
    assert group["slack_ns"] == pytest.approx(10.0 - 9.8 - 0.392, abs=1e-3)


def test_registered_dsp_operands_count_the_multiplication_as_setup() -> None:
    """A RegisteredMultiplier's operand that arrives 7 ns after the clock misses a
    100 MHz clock (nextpnr adds the multiplication, 3.486 ns, as setup); the same pin of
    a combinational (Yosys-mapped) DSP is not a register input and has none."""
    dsp = "top.gemm.p0_0_0_0.dsp"
    assert setup_ns(dsp, "B7") == pytest.approx(3.486)
    assert setup_ns(dsp, "CLK0") == 0.0
    assert setup_ns("top.gemm.p0_TRELLIS_FF_Q_DI_MULT18X18D_P0", "A3") == 0.0
    report = {"fmax": {}, "critical_paths": [], "detailed_net_timings": [
        _net("top.gemm.a0", "l1", "F", (dsp, "A3", 7.0))]}
    result = timing_paths(report, 100.0)
    assert result["failing"] == 1
    assert result["groups"][0]["slack_ns"] == pytest.approx(10.0 - 7.0 - 3.486, abs=1e-3)


def test_flip_flop_lsr_counts_its_setup() -> None:
    """A flip-flop's synchronous reset ``LSR`` has nextpnr's 0.424 ns setup (its data and
    clock enable none): the figures of a CI build whose critical path ended at an LSR
    arriving at 9.672 ns while a data pin arrived at 10.082 ns. At 101.03 MHz the LSR,
    not the later data pin, is the worst slack, with nextpnr's 9.672 + 0.424 ns."""
    lsr, ff = "top.store.fifo.w_port__addr_TRELLIS_FF_Q_2", "top.compute.a3_b_TRELLIS_FF_Q_32"
    assert setup_ns(lsr, "LSR") == pytest.approx(0.424)
    assert setup_ns(ff, "M") == setup_ns(ff, "DI") == setup_ns(ff, "CE") == 0.0
    report = {"fmax": {}, "critical_paths": [], "detailed_net_timings": [
        _net("top.store.beat_TRELLIS_FF_Q_LSR", "l1", "F", (lsr, "LSR", 9.672)),
        _net("top.compute.a3_b_TRELLIS_FF_Q_32_DI", "l2", "F", (ff, "M", 10.082))]}
    period = 1000 / 101.03
    result = timing_paths(report, 101.03)
    assert result["failing"] == 2 and result["worst_arrival_ns"] == 10.082
    first, second = result["groups"]
    assert first["to_pin"] == f"{lsr}.LSR" and second["to_pin"] == f"{ff}.M"
    assert first["slack_ns"] == pytest.approx(period - 9.672 - 0.424, abs=1e-3)
    assert second["slack_ns"] == pytest.approx(period - 10.082, abs=1e-3)
    # 0.2 ns before the clock an LSR still misses it, a data pin does not
    report["detailed_net_timings"] = [
        _net("top.store.beat_TRELLIS_FF_Q_LSR", "l1", "F", (lsr, "LSR", 9.8), (ff, "M", 9.8))]
    assert timing_paths(report, 100.0)["failing"] == 1
