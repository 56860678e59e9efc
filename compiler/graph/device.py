"""Virtual devices: where a value lives (device kind, accelerator config, memory scope)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorfab.isa import PRESETS, HwConfig

from .types import GraphError

#: Device kinds the planner knows.
DEVICE_KINDS = ("cpu", "accel")


@dataclass(frozen=True)
class VirtualDevice:
    """A place for a value: a device kind, the accelerator's HwConfig, a memory scope.

    Parameters
    ----------
    kind : str
        ``"cpu"`` or ``"accel"``.
    hw_config : str or None
        Name of the accelerator's :class:`~tensorfab.isa.HwConfig` (``"default"``);
        required for ``accel``, absent for ``cpu``.
    memory_scope : str or None
        Memory scope on the device (``None``: the device's main memory).
    config : HwConfig or None
        The accelerator's config itself: an accel device carries it, so that a pass (or
        a worker process) needs no registry to find it. Left out, a preset's is taken
        by name (the text form names only presets); a config read from JSON is given.

    The text form is ``cpu``, ``accel(default)`` or ``accel(default, scope=global)``.
    """

    kind: str
    hw_config: str | None = None
    memory_scope: str | None = None
    config: HwConfig | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise GraphError(f"unknown device kind {self.kind!r}; known: "
                             f"{', '.join(DEVICE_KINDS)}")
        if self.kind == "accel" and not self.hw_config:
            raise GraphError("an accel device needs its HwConfig name, e.g. accel(default)")
        if self.kind == "cpu" and (self.hw_config is not None or self.config is not None):
            raise GraphError(f"a cpu device has no HwConfig, got {self.hw_config!r}")
        if self.config is None and self.hw_config in PRESETS:
            object.__setattr__(self, "config", PRESETS[self.hw_config])
        if self.config is not None and self.config.name != self.hw_config:
            raise GraphError(f"accel({self.hw_config}) given the config named "
                             f"{self.config.name!r}")

    def __str__(self) -> str:
        inner = [self.hw_config] if self.hw_config else []
        if self.memory_scope is not None:
            inner.append(f"scope={self.memory_scope}")
        return f"{self.kind}({', '.join(inner)})" if inner else self.kind


CPU = VirtualDevice("cpu")


def accel(hw_config: str | HwConfig = "default",
          memory_scope: str | None = None) -> VirtualDevice:
    """The accelerator of config ``hw_config`` (a preset's name or the config itself; a
    :class:`VirtualDevice` of kind accel carrying the config)."""
    if isinstance(hw_config, HwConfig):
        return VirtualDevice("accel", hw_config.name, memory_scope, hw_config)
    return VirtualDevice("accel", hw_config, memory_scope)
