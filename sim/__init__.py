"""tensorfab.sim: executors of tensorfab programs.

:class:`FunctionalSimulator` is the bit-exact reference executor; every executor
implements :class:`Device` and returns a :class:`RunResult`. ``rtl`` (in
:mod:`tensorfab.sim.rtl`, imported on demand) runs the RTL in Verilator.
"""

from .device import DEVICES, Counters, Device, DeviceMemory, RunResult, get_device
from .errors import DeadlockError, RaceError, TokenError, Wait
from .fsim import FunctionalSimulator

DEVICES["rtl"] = "tensorfab.sim.rtl:RtlSimulator"

__all__ = ["DEVICES", "Counters", "DeadlockError", "Device", "DeviceMemory", "FunctionalSimulator",
           "RaceError", "RunResult", "TokenError", "Wait", "get_device"]
