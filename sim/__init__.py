"""tensorfab.sim: executors of tensorfab programs.

:class:`FunctionalSimulator` is the bit-exact reference executor; every executor
implements :class:`Device` (declared in :mod:`tensorfab.isa.device`, with the registry
of targets) and returns a :class:`RunResult`. ``rtl`` (in :mod:`tensorfab.sim.rtl`,
imported on demand) runs the RTL in Verilator.
"""

from tensorfab.isa.device import (
    Counters,
    Device,
    DeviceMemory,
    RunResult,
    device_schemes,
    get_device,
    open_device,
)

from .errors import DeadlockError, RaceError, TokenError, Wait
from .fsim import FunctionalSimulator

__all__ = ["Counters", "DeadlockError", "Device", "DeviceMemory", "FunctionalSimulator",
           "RaceError", "RunResult", "TokenError", "Wait", "device_schemes", "get_device",
           "open_device"]
