"""Errors of the FPGA build flow."""

from __future__ import annotations

from tensorfab.isa import TensorfabError

__all__ = ["DoesNotFit", "FpgaBuildError", "TimingFailure", "ToolMissing"]


class FpgaBuildError(TensorfabError):
    """A build that failed; the message says which step and where its log is."""


class ToolMissing(FpgaBuildError):
    """An external tool (openFPGALoader) is not installed."""


class DoesNotFit(FpgaBuildError):
    """The design needs more of a resource than the device has.

    Attributes
    ----------
    resource : str
    used, available : int
    """

    def __init__(self, message: str, resource: str, used: int, available: int) -> None:
        self.resource, self.used, self.available = resource, used, available
        super().__init__(message)


class TimingFailure(FpgaBuildError):
    """A clock domain misses its target frequency.

    Attributes
    ----------
    clock : str
    achieved_mhz, target_mhz, slack_ns : float
    """

    def __init__(self, message: str, clock: str, achieved_mhz: float, target_mhz: float,
                 slack_ns: float) -> None:
        self.clock, self.achieved_mhz, self.target_mhz = clock, achieved_mhz, target_mhz
        self.slack_ns = slack_ns
        super().__init__(message)
