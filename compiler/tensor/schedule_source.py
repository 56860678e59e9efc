"""Where the compiler asks for a schedule before searching one: a
:class:`ScheduleSource` (e.g. a tuning log) handed down by the caller."""

from __future__ import annotations

from typing import Protocol

from tensorfab.isa import HwConfig

from .epilogue import Epilogue
from .schedule import Schedule
from .workload import Workload

__all__ = ["ScheduleSource"]


class ScheduleSource(Protocol):
    """Gives a schedule for an operator, or ``None`` to let the tile search pick."""

    def schedule(self, workload: Workload, cfg: HwConfig, epilogue: Epilogue
                 ) -> Schedule | None:
        """A schedule of ``workload`` on ``cfg`` with ``epilogue``, or ``None``."""
        ...
