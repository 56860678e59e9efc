"""Which accelerator program sites the VM runs inline on the host thread: those whose
independent host work is shorter than the two handoffs between the threads (there and
back) that running them on the accelerator thread costs.

A handoff is measured each time the host waits on an issued program past its end: the
time from the program's end to the host going on. On a shared machine most handoffs
take tens of microseconds and some, when another process holds the core, milliseconds;
a preemption delays the host thread as much when it runs the program inline, so it is
not the handoff's own cost. The estimate is therefore a low quantile
(:data:`HANDOFF_QUANTILE`) of the last :data:`HANDOFF_WINDOW` handoffs over all runs,
not the last run's median: a run, or several, at a heavy load cannot move it unless
they make most of the window, and cannot put every site with real work inline.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

__all__ = ["HANDOFF_QUANTILE", "HANDOFF_WINDOW", "InlineRule", "Site"]

#: A program site: (function index, pc of its ``INVOKE_ACCEL``).
Site = tuple[int, int]

#: Handoffs kept for the estimate (the most recent, over runs).
HANDOFF_WINDOW = 256
#: The quantile of the kept handoffs taken as a handoff's cost.
HANDOFF_QUANTILE = 0.25


class InlineRule:
    """The handoff estimate and the inline sites, updated after each run.

    Parameters
    ----------
    window : int
        Handoffs kept (:data:`HANDOFF_WINDOW`).
    quantile : float
        The quantile of them taken as the cost of a handoff (:data:`HANDOFF_QUANTILE`).

    Attributes
    ----------
    handoff_seconds : float or None
        The estimate (None before any handoff was measured).
    site_work : dict
        By site, the host's work before it read the program's result, as last measured
        with the program issued to the accelerator thread (seconds).
    inline_sites : set of Site
        The sites whose work is shorter than two handoffs.
    """

    def __init__(self, window: int = HANDOFF_WINDOW,
                 quantile: float = HANDOFF_QUANTILE) -> None:
        if window < 1 or not 0.0 <= quantile <= 1.0:
            raise ValueError(f"InlineRule: window {window} (≥ 1), quantile {quantile} "
                             "(0 to 1)")
        self.quantile = quantile
        self._handoffs: deque[float] = deque(maxlen=window)
        self.handoff_seconds: float | None = None
        self.site_work: dict[Site, float] = {}
        self.inline_sites: set[Site] = set()

    def update(self, handoffs: Iterable[float], site_work: Mapping[Site, float]) -> None:
        """Take a run's measured ``handoffs`` and host work by site; decide the sites
        the next run runs inline.

        A run that measured no handoff (every program inline, or none waited for past
        its end) halves the estimate and forgets the kept handoffs: the sites with the
        most work go back to the accelerator thread and measure the handoff as it is
        now (a load that passed)."""
        self.site_work.update(site_work)
        measured = list(handoffs)
        if measured:
            self._handoffs.extend(measured)
            kept = sorted(self._handoffs)
            self.handoff_seconds = kept[round(self.quantile * (len(kept) - 1))]
        elif self.handoff_seconds is not None:
            self.handoff_seconds /= 2
            self._handoffs.clear()
        if self.handoff_seconds is not None:
            limit = 2 * self.handoff_seconds
            self.inline_sites = {site for site, work in self.site_work.items()
                                 if work < limit}
