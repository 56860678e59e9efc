"""Options of the whole test tree: the device that ``tests/hil/test_device_suite.py``
runs its suite on (see docs/hil.md, "Running the suite on a device")."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("device", "the device suite (tests/hil/test_device_suite.py)")
    group.addoption("--device", default="virtual", metavar="TARGET",
                    help="target of open_device the suite runs on: fsim, rtl, virtual "
                         "(default: a virtual board in this process), serial:///dev/ttyUSB0, "
                         "socket://HOST:PORT, tcp://HOST:PORT (token from TENSORFAB_TOKEN)")
    group.addoption("--device-config", default=None, metavar="NAME",
                    help="config of the programs (default: the board's own for serial:// "
                         "and socket://, else tiny)")
    group.addoption("--device-programs", type=int, default=20, metavar="N",
                    help="random programs to run (default 20)")
    group.addoption("--device-faults", action="store_true",
                    help="inject link faults (bit flips, dropped bytes) into the virtual "
                         "board's link; the retries must recover every one")
