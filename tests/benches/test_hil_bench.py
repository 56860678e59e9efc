"""bench hil's measurement of the virtual board's speed (benches/hil.py), on a small
GEMM: the keys it reports, the result against fsim and the cycles against the RTL
executor and the plain build (the full run is ``tensorfab bench hil``)."""

from __future__ import annotations

from tensorfab.benches.hil import virtual_board_speed


def test_virtual_board_speed_reports_rates_and_equal_cycles() -> None:
    got = virtual_board_speed("tiny", (16, 16, 32), rounds=1, mem_bytes=1 << 16)
    assert got["virtual_board_gemm_matches_fsim"] is True
    assert got["virtual_board_gemm_cycles_equal_rtl"] is True
    assert got["virtual_board_plain_cycles_equal"] is True
    assert got["virtual_board_gemm_cycles"] > 0
    for key in ("virtual_board_cycles_per_second", "virtual_board_plain_cycles_per_second",
                "rtl_executor_cycles_per_second"):
        assert got[key] > 0, key
    ratio = got["virtual_board_cycles_per_second"] / got["virtual_board_plain_cycles_per_second"]
    assert abs(got["virtual_board_speedup"] - ratio) <= 0.01
    assert got["virtual_board_clocking"].startswith("one evaluation per cycle; gated clocks")
