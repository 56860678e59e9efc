"""The inline rule's handoff estimate (runtime/inline_rule.py) against numpy's quantile
of the kept handoffs, and its robustness: a loaded run's slow handoffs cannot put every
site with host work worth overlapping inline."""

from __future__ import annotations

import numpy as np
import pytest

from tensorfab.runtime.inline_rule import HANDOFF_QUANTILE, HANDOFF_WINDOW, InlineRule


def _noisy_run(rng: np.random.Generator, n: int = 50) -> list[float]:
    """A run's handoffs on a shared machine: about 50 µs, one in ten 1-5 ms (another
    process held the core)."""
    base = rng.lognormal(np.log(50e-6), 0.3, n)
    spikes = rng.random(n) < 0.1
    return list(np.where(spikes, rng.uniform(1e-3, 5e-3, n), base))


def test_the_estimate_is_the_quantile_of_the_last_window_of_handoffs() -> None:
    rng = np.random.default_rng(0)
    rule = InlineRule()
    seen: list[float] = []
    for _ in range(8):  # 400 handoffs: the window keeps the last 256
        run = _noisy_run(rng)
        seen += run
        rule.update(run, {})
    kept = np.array(seen[-HANDOFF_WINDOW:][1:])  # 255 values: the quantile is one of them
    rule2 = InlineRule()
    rule2.update(kept, {})
    assert rule2.handoff_seconds == np.quantile(kept, HANDOFF_QUANTILE, method="nearest")
    kept = np.array(seen[-HANDOFF_WINDOW:])
    assert np.quantile(kept, 0.2) <= rule.handoff_seconds <= np.quantile(kept, 0.3)


def test_a_loaded_run_does_not_put_every_site_inline() -> None:
    """Sites of 1 ms and 0.4 ms of independent host work stay on the accelerator thread
    through noisy runs and a run whose every handoff took 4 ms; a site of 20 µs (less
    than two handoffs of about 50 µs) goes inline."""
    rng = np.random.default_rng(1)
    work = {(0, 3): 1e-3, (0, 9): 4e-4, (0, 15): 20e-6}
    rule = InlineRule()
    for _ in range(4):
        rule.update(_noisy_run(rng), work)
        assert rule.inline_sites == {(0, 15)}
    rule.update([4e-3] * 54, work)  # every handoff slow: a load burst
    assert rule.inline_sites == {(0, 15)}
    assert rule.handoff_seconds < 1e-4
    # the last run's median, the rule before, would have put every site inline
    assert all(w < 2 * float(np.median([4e-3] * 54)) for w in work.values())


def test_a_run_without_handoffs_halves_the_estimate_and_starts_a_new_window() -> None:
    rule = InlineRule()
    rule.update([2e-3] * 300, {(0, 3): 3.5e-3, (0, 7): 3.9e-3})  # a long loaded spell
    assert rule.inline_sites == {(0, 3), (0, 7)} and rule.handoff_seconds == 2e-3
    rule.update([], {})  # every program inline: nothing measured
    assert rule.handoff_seconds == 1e-3 and rule.inline_sites == set()
    rule.update([60e-6, 40e-6, 50e-6, 70e-6, 45e-6], {(0, 3): 3.5e-3})  # the load passed
    assert rule.handoff_seconds == 45e-6 and rule.inline_sites == set()


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ValueError, match="window 0"):
        InlineRule(window=0)
    with pytest.raises(ValueError, match=r"quantile 1\.5"):
        InlineRule(quantile=1.5)
