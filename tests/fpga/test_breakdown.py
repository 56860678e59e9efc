"""The per-module resource breakdown (fpga_builds/breakdown.py): Yosys' real
statistics of a small Amaranth design with two instances of one submodule, checked
against Yosys' own hierarchy totals and a flattened synthesis; (slow) the SoC."""


import json
import os
import subprocess
from pathlib import Path

import pytest
from amaranth.back import rtlil
from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from rich.console import Console

from tensorfab.cli import main
from tensorfab.fpga_builds.breakdown import (
    breakdown_rows,
    breakdown_script,
    breakdown_table,
    cell_category,
    ice40_lc_estimate,
    module_totals,
    parse_stat_json,
    run_yosys,
)
from tensorfab.fpga_builds.errors import FpgaBuildError
from tensorfab.fpga_builds.flow import yowasp_env
from tensorfab.fpga_builds.report import utilization_from_log

os.environ.setdefault("AMARANTH_USE_YOSYS", "builtin")


class MulReg(wiring.Component):
    """Registered 8×8 → 16-bit product and a 4-bit counter of odd ``a``: one DSP
    multiplier.

    (No `from __future__ import annotations` in this file: wiring reads the
    annotations.)
    """

    a: In(8)
    b: In(8)
    y: Out(16)
    n: Out(4)

    def elaborate(self, platform) -> Module:
        m = Module()
        a, b = Signal(8), Signal(8)
        m.d.sync += [a.eq(self.a), b.eq(self.b), self.y.eq(a * b)]
        with m.If(a[0]):  # counts odd inputs (so the two instances' counters differ)
            m.d.sync += self.n.eq(self.n + 1)
        return m


class TwoMuls(wiring.Component):
    """Two instances of the module ``mul`` (``MulReg``) and a registered 16-bit sum.

    The instances share no input, so a flattened synthesis can merge nothing across
    the module boundary and must count the same cells.
    """

    a: In(8)
    b: In(8)
    c: In(8)
    d: In(8)
    y: Out(16)
    n: Out(4)

    def elaborate(self, platform) -> Module:
        m = Module()
        y0, y1, n0, n1 = Signal(16), Signal(16), Signal(4), Signal(4)
        for name, (a, b, y, n) in (("m0", (self.a, self.b, y0, n0)),
                                   ("m1", (self.c, self.d, y1, n1))):
            m.submodules[name] = Instance("mul", i_clk=ClockSignal("sync"),
                                          i_rst=ResetSignal("sync"), i_a=a, i_b=b,
                                          o_y=y, o_n=n)
        m.d.sync += [self.y.eq(y0 + y1), self.n.eq(n0 ^ n1)]
        return m


def _yosys(cwd: Path, commands: list[str]) -> None:
    env = yowasp_env()
    (cwd / "script.ys").write_text("\n".join(commands) + "\n")
    subprocess.run([env["YOSYS"], "-q", "-l", "yosys.log", "-s", "script.ys"], cwd=cwd,
                   env=env, check=True, capture_output=True)


def _synth_two_muls(d: Path, synth: str) -> dict[str, Path]:
    """``TwoMuls`` synthesized as the breakdown does it, and flattened."""
    (d / "mul.il").write_text(rtlil.convert(MulReg(), name="mul"))
    (d / "top.il").write_text(rtlil.convert(TwoMuls(), name="top"))
    read = ["read_rtlil mul.il", "read_rtlil top.il"]
    _yosys(d, [*read, *breakdown_script(synth)])
    _yosys(d, [*read, synth, "tee -q -o flat.json stat -json",
               "write_json flat_netlist.json"])
    return {"stat": d / "stat.json", "netlist": d / "netlist.json", "flat": d / "flat.json",
            "flat_netlist": d / "flat_netlist.json"}


@pytest.fixture(scope="module")
def ice40_stats(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _synth_two_muls(tmp_path_factory.mktemp("two_muls"), "synth_ice40 -dsp -top top")


def test_instances_count_and_totals_sum(ice40_stats: dict[str, Path]) -> None:
    text = ice40_stats["stat"].read_text()
    modules = parse_stat_json(text)
    assert set(modules) == {"top", "mul"}
    assert modules["top"].submodules == {"mul": 2}
    assert modules["mul"].submodules == {}
    # the multiplier is one SB_MAC16 in `mul`, none in `top` itself
    assert modules["mul"].cells["SB_MAC16"] == 1 and modules["top"].cells["SB_MAC16"] == 0
    totals = module_totals(modules)
    for cell_type in set(totals["top"]) | set(modules["mul"].cells):
        assert totals["top"][cell_type] == (modules["top"].cells[cell_type]
                                            + 2 * modules["mul"].cells[cell_type])
    # Yosys' own count including submodules agrees
    design = json.loads(text)["design"]["num_cells_by_type"]
    assert {k: v for k, v in design.items() if k != "mul"} == dict(totals["top"])

    rows = breakdown_rows("ice40", modules)
    assert [(r["path"], r["instances"]) for r in rows] == [("top", 1), ("top/mul", 2)]
    top, mul = rows
    assert top["total"]["DSP"] == 2 and mul["total"]["DSP"] == 2
    # the rows' own cells sum to the top's total, category by category
    for category, count in top["total"].items():
        assert sum(r["own"][category] for r in rows) == count
    assert top["share"] == 1.0 and 0 < mul["share"] < 1
    # registers: 8+8 inputs, 4 counter bits per instance at least (16 product bits
    # may go into the MAC16's output register); 16 sum + 4 bits in top
    assert mul["own"]["FF"] >= 2 * 20 and top["own"]["FF"] >= 20


def test_hierarchical_totals_equal_flattened_synthesis(ice40_stats: dict[str, Path]) -> None:
    rows = breakdown_rows("ice40", parse_stat_json(ice40_stats["stat"].read_text()))
    flat = parse_stat_json(ice40_stats["flat"].read_text())
    assert list(flat) == ["top"]
    flat_counts = breakdown_rows("ice40", flat)[0]["total"]
    assert flat_counts == rows[0]["total"]


def test_ecp5_breakdown(tmp_path: Path) -> None:
    """The same design for ECP5: one MULT18X18D per instance, the hierarchical totals
    equal to the flattened synthesis's, the rows' own cells summing to them."""
    paths = _synth_two_muls(tmp_path, "synth_ecp5 -top top")
    modules = parse_stat_json(paths["stat"].read_text())
    assert modules["top"].submodules == {"mul": 2}
    rows = breakdown_rows("ecp5", modules)
    assert rows[0]["total"]["DSP"] == 2 and rows[1]["own"]["DSP"] == 2
    for category, count in rows[0]["total"].items():
        assert rows[0]["own"][category] + rows[1]["own"][category] == count
    flat = breakdown_rows("ecp5", parse_stat_json(paths["flat"].read_text()))[0]
    assert flat["total"] == rows[0]["total"] and flat["logic"] == rows[0]["logic"]
    t = rows[0]["total"]
    assert rows[0]["logic"] == t["LUT"] + 2 * t["CARRY"] + 6 * t["LUTRAM"] > 0


def test_lc_estimate_counts_unpacked_flip_flops(ice40_stats: dict[str, Path]) -> None:
    netlist = json.loads(ice40_stats["netlist"].read_text())
    modules = parse_stat_json(ice40_stats["stat"].read_text())
    lc = ice40_lc_estimate(netlist)
    for name, mod in modules.items():
        cells = mod.cells
        luts = cells["SB_LUT4"]
        ffs = sum(n for t, n in cells.items() if t.startswith("SB_DFF"))
        # at least one cell per LUT, at most one per LUT, FF and carry
        assert luts <= lc[name] <= luts + ffs + cells["SB_CARRY"]
    # mul's input registers are fed by ports, not LUTs: each takes a cell of its own
    assert lc["mul"] >= modules["mul"].cells["SB_LUT4"] + 16
    rows = breakdown_rows("ice40", modules, lc_own=lc)
    assert rows[0]["logic"] == lc["top"] + 2 * lc["mul"]


def test_lc_estimate_against_nextpnr_packer(ice40_stats: dict[str, Path]) -> None:
    """nextpnr-ice40 packs the flattened netlist (no placement): the estimate of the
    same netlist is within 5 % of its logic cells (it leaves out the few cells
    nextpnr adds to start carry chains; on the iCEBreaker SoC: 16 685 estimated,
    16 645 packed)."""
    d = ice40_stats["flat_netlist"].parent
    env = yowasp_env()
    subprocess.run([env["NEXTPNR_ICE40"], "--up5k", "--package", "sg48", "--json",
                    "flat_netlist.json", "--pack-only", "--pcf-allow-unconstrained", "-q",
                    "-l", "pack.log"], cwd=d, env=env, check=True, capture_output=True)
    packed = utilization_from_log((d / "pack.log").read_text())["ICESTORM_LC"][0]
    estimate = ice40_lc_estimate(json.loads(ice40_stats["flat_netlist"].read_text()))["top"]
    assert 0.95 * packed <= estimate <= 1.05 * packed
    # the LUTs alone fall short: the input registers each need a cell of their own
    luts = parse_stat_json(ice40_stats["flat"].read_text())["top"].cells["SB_LUT4"]
    assert packed - luts > 0.8 * (estimate - luts) > 0


def test_table_shows_instances_and_flat_totals(ice40_stats: dict[str, Path]) -> None:
    modules = parse_stat_json(ice40_stats["stat"].read_text())
    lc = ice40_lc_estimate(json.loads(ice40_stats["netlist"].read_text()))
    rows = breakdown_rows("ice40", modules, lc_own=lc)
    result = {"board": "icebreaker", "config": "two-muls", "family": "ice40",
              "logic_unit": "estimated logic cells", "rows": rows,
              "flat": {"logic": 1, "totals": {"LUT": 2, "FF": 3, "DSP": 4}}}
    console = Console(record=True, width=150)
    console.print(breakdown_table(result, top=1))
    text = console.export_text()
    table_rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in text.splitlines()
                  if ln.startswith("│")]
    assert [r[0] for r in table_rows] == ["top", "mul ×2", "icebreaker has (iCE40UP5K)"]
    # beside the totals, what the device has
    assert table_rows[2][1:] == ["5280", "", "5280", "5280", "", "8", "30",
                                 f"{100 * rows[0]['logic'] / 5280:.0f} % used"]
    assert table_rows[1][1:4] == [str(rows[1]["logic"]), str(rows[1]["logic_own"]),
                                  str(rows[1]["total"]["LUT"])]
    assert "flattened synthesis: 1 LC, 2 LUT4, 3 FF, 4 DSP" in " ".join(text.split())
    with pytest.raises(FpgaBuildError, match=r"^top must be 1 or more, not -1$"):
        breakdown_table(result, top=-1)  # was every module but the smallest


def test_categories_and_bad_input() -> None:
    assert cell_category("ice40", "SB_DFFESR") == "FF"
    assert cell_category("ice40", "SB_RAM40_4KNR") == "BRAM"
    assert cell_category("ecp5", "CCU2C") == "CARRY"
    assert cell_category("ecp5", "TRELLIS_IO") is None
    with pytest.raises(FpgaBuildError, match="family 'gowin'"):
        cell_category("gowin", "LUT4")
    with pytest.raises(FpgaBuildError, match="not Yosys `stat -json` output"):
        parse_stat_json("ERROR: no design")
    with pytest.raises(FpgaBuildError, match="not a Yosys synthesis command"):
        breakdown_script("read_rtlil top.il")
    loop = parse_stat_json(json.dumps({"modules": {
        "\\a": {"num_cells_by_type": {"b": 1}}, "\\b": {"num_cells_by_type": {"a": 1}}}}))
    with pytest.raises(FpgaBuildError, match="instantiates itself"):
        module_totals(loop)


def test_yosys_failure_names_the_step_the_error_and_the_log(tmp_path: Path) -> None:
    """A failing Yosys run (real: a script with a pass that does not exist) is an error
    naming the exit status, the last step, Yosys' ERROR line and the log; the log holds
    all of Yosys' output."""
    script = tmp_path / "bad.ys"
    script.write_text("opt_clean\nno_such_pass_here\n")
    log = tmp_path / "bad.log"
    with pytest.raises(FpgaBuildError) as info:
        run_yosys(script, tmp_path, log, label="bad", console=Console(quiet=True))
    msg = str(info.value)
    assert msg.startswith("bad: Yosys failed (exit 1) in OPT_CLEAN; ERROR: ")
    assert "no_such_pass_here" in msg and msg.endswith(f"; see {log}")
    assert "no_such_pass_here" in log.read_text()


@pytest.mark.slow
def test_icebreaker_soc_breakdown(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The whole iCEBreaker SoC (about a minute of Yosys): the command's JSON, the
    hierarchy of the core, every cell counted once."""
    assert main(["fpga", "breakdown", "--board", "icebreaker", "-o", str(tmp_path),
                 "--json", "--top", "5"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (result["board"], result["config"], result["family"]) == ("icebreaker", "up5k",
                                                                     "ice40")
    rows = {r["module"]: r for r in result["rows"]}
    assert {"top.soc.core.compute.gemm", "top.soc.core.compute.alu",
            "top.soc.core.fetch", "top.soc.bridge"} <= set(rows)
    total = result["rows"][0]["total"]
    assert total["SPRAM"] == 1 and total["DSP"] >= 4
    for category, count in total.items():
        assert sum(r["own"][category] for r in result["rows"]) == count
    assert (tmp_path / "breakdown.log").exists()
