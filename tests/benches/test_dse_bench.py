"""bench dse: the Pareto front against a hand-checked set, the whole bench (slow)."""

from __future__ import annotations

import pytest

from tensorfab.benches.dse import run_dse_bench
from tensorfab.dse.results import pareto_front


def test_pareto_front_keeps_only_undominated_points() -> None:
    # (cost, gain): 1 dominates 0 (same cost, more gain); 3 equals 2's cost with less gain
    items = [(64, 1.0), (64, 2.0), (128, 3.0), (128, 2.5), (256, 3.0), (32, 0.5)]
    assert pareto_front(items) == [1, 2, 5]


@pytest.mark.slow
def test_dse_bench_sweeps_24_points_and_reruns_from_the_cache() -> None:
    out = run_dse_bench(workers=2)
    assert out["points"] == 24 and out["valid_points"] == 24 and out["rows"] == 48
    assert out["cache_hit_ratio"] == 1.0
    assert out["points_per_second"] > 0 and out["rerun_seconds"] < out["seconds"]
    assert 1 <= out["pareto_front_size"] == len(out["pareto_front"]) <= 24
    # only the 1x8x8 points fit the 85F: 100 DSPs; 8x16 and 16x8 need 196 each of 156
    # (16x8: 164 and its store's requantization, four per lane, 32)
    assert out["fitting_points"] == 6
    err = out["resource_model_error"]
    assert set(err) == {"LUT", "FF", "DSP", "BRAM"}
    assert all(0 <= e["mean"] <= e["max"] <= 0.15 for e in err.values())
    assert err["DSP"] == {"mean": 0.0, "max": 0.0}
