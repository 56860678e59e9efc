"""tensorfab.sim: executors of tensorfab programs.

:class:`FunctionalSimulator` is the bit-exact reference executor; every executor
implements :class:`Device` and returns a :class:`RunResult`.
"""

from .device import DEVICES, Counters, Device, RunResult, get_device
from .errors import DeadlockError, RaceError, TokenError, Wait
from .fsim import FunctionalSimulator

__all__ = ["DEVICES", "Counters", "DeadlockError", "Device", "FunctionalSimulator",
           "RaceError", "RunResult", "TokenError", "Wait", "get_device"]
