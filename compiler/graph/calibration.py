"""Calibration for post-training quantization: range observers and the run that feeds
them.

An observer sees every calibration batch of one float tensor and gives the tensor's
symmetric range ``amax`` (its int8 scale is ``amax / 127``):

* :class:`MinMaxObserver`: the largest magnitude seen, ``max(|min|, |max|)``;
* :class:`PercentileObserver`: the ``percentile``-th percentile of the magnitudes
  ``|x|`` of all values seen (numpy's default linear interpolation), which ignores a
  few outliers (e.g. 99.99 drops the largest 0.01 %).

:func:`observe` runs a float function on the CPU interpreter over the calibration
batches and feeds one observer per requested sub-expression.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tensorfab.runtime.interpreter import RuntimeInputError, run_program

from .ir import Expr, Function, Tuple
from .lower_runtime import lower_to_runtime
from .types import GraphError

__all__ = ["CALIBRATION_METHODS", "ChannelMinMaxObserver", "MinMaxObserver", "Observer",
           "PercentileObserver",
           "make_observer", "observe", "symmetric_scale"]

#: Names of the observers ``--calib-method`` accepts.
CALIBRATION_METHODS = ("minmax", "percentile")


class CalibrationError(GraphError):
    """Calibration data or options that cannot calibrate the model (says which)."""


class Observer:
    """Base of the range observers: :meth:`update` with each batch, then :meth:`amax`."""

    def update(self, values: np.ndarray) -> None:
        """See one more batch of the tensor's values."""
        raise NotImplementedError

    def amax(self) -> float:
        """The symmetric range of the values seen (``>= 0``)."""
        raise NotImplementedError


class MinMaxObserver(Observer):
    """``max(|min|, |max|)`` of all values seen."""

    def __init__(self) -> None:
        self.lo, self.hi = np.inf, -np.inf

    def update(self, values: np.ndarray) -> None:
        v = np.asarray(values, np.float64)
        if v.size:
            self.lo, self.hi = min(self.lo, float(v.min())), max(self.hi, float(v.max()))

    def amax(self) -> float:
        if self.lo > self.hi:
            raise CalibrationError("the observer saw no values")
        return max(abs(self.lo), abs(self.hi))


class PercentileObserver(Observer):
    """The ``percentile``-th percentile of ``|x|`` over all values seen.

    Parameters
    ----------
    percentile : float
        In ``(0, 100]``; 100 is the min/max range.
    """

    def __init__(self, percentile: float = 99.99) -> None:
        if not 0 < percentile <= 100:
            raise CalibrationError(f"percentile {percentile} is not in (0, 100]")
        self.percentile = float(percentile)
        self.magnitudes: list[np.ndarray] = []

    def update(self, values: np.ndarray) -> None:
        self.magnitudes.append(np.abs(np.asarray(values, np.float32)).ravel())

    def amax(self) -> float:
        if not self.magnitudes:
            raise CalibrationError("the observer saw no values")
        return float(np.percentile(np.concatenate(self.magnitudes), self.percentile))


class ChannelMinMaxObserver(Observer):
    """The largest magnitude seen in each channel along the last axis
    (:meth:`channel_amax`), for per-channel activation scales."""

    def __init__(self) -> None:
        self.seen: np.ndarray | None = None

    def update(self, values: np.ndarray) -> None:
        v = np.abs(np.asarray(values, np.float64))
        if v.size:
            m = v.reshape(-1, v.shape[-1]).max(axis=0)
            self.seen = m if self.seen is None else np.maximum(self.seen, m)

    def channel_amax(self) -> np.ndarray:
        """The symmetric range of each channel (``>= 0``)."""
        if self.seen is None:
            raise CalibrationError("the observer saw no values")
        return self.seen

    def amax(self) -> float:
        return float(self.channel_amax().max())


def make_observer(method: str, percentile: float = 99.99) -> Observer:
    """A new observer by name (:data:`CALIBRATION_METHODS`)."""
    if method == "minmax":
        return MinMaxObserver()
    if method == "percentile":
        return PercentileObserver(percentile)
    raise CalibrationError(f"unknown calibration method {method!r}; known: "
                           f"{', '.join(CALIBRATION_METHODS)}")


def symmetric_scale(amax: float) -> np.float32:
    """The int8 scale of a symmetric range: ``amax / 127`` (1 for an all-zero tensor)."""
    return np.float32(amax / 127.0) if amax > 0 else np.float32(1.0)


def observe(fn: Function, exprs: Sequence[Expr],
            batches: Iterable[Mapping[str, np.ndarray]], method: str = "minmax",
            percentile: float = 99.99, observers: Sequence[Observer] | None = None
            ) -> list[Observer]:
    """Run ``fn`` on every batch (input name to array) and feed one observer per
    sub-expression of ``exprs`` with its values (new ones of ``method``, or the given
    ``observers``); the observers, in order.

    Raises
    ------
    CalibrationError
        No batches, or a batch that does not fit the function's inputs.
    """
    observers = (list(observers) if observers is not None else
                 [make_observer(method, percentile) for _ in exprs])
    program = lower_to_runtime(Function(fn.params, Tuple(list(exprs))))
    seen = 0
    for feeds in batches:
        try:
            values = run_program(program, feeds)
        except RuntimeInputError as e:  # names the input, its shape and the expected one
            raise CalibrationError(f"calibration batch {seen}: {e}") from None
        for obs, v in zip(observers, values, strict=True):
            obs.update(v)
        seen += 1
    if not seen:
        raise CalibrationError("the calibration data is empty")
    return observers
