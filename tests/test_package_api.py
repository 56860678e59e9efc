"""The top-level API of ``import tensorfab``: what it offers and that it stays light."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tensorfab
from tensorfab.isa.device import Device
from tensorfab.isa.device import open_device as device_open_device


def test_open_device_is_top_level_api() -> None:
    """``from tensorfab import open_device`` was an ImportError (users had to know
    tensorfab.isa.device); it is now the registry's own function."""
    from tensorfab import open_device

    assert open_device is device_open_device
    assert "open_device" in tensorfab.__all__ and "open_device" in dir(tensorfab)
    device = open_device("fsim")
    assert isinstance(device, Device) and device.name == "fsim"
    with pytest.raises(AttributeError, match="module 'tensorfab' has no attribute 'nope'"):
        tensorfab.nope  # noqa: B018


def test_import_tensorfab_stays_light() -> None:
    """``import tensorfab`` imports neither numpy nor any layer until ``open_device`` is
    used (checked in a fresh interpreter, against its ``sys.modules``)."""
    code = ("import sys, json, tensorfab\n"
            "before = sorted(m for m in sys.modules if m == 'numpy' or m.startswith("
            "'tensorfab.'))\n"
            "tensorfab.open_device\n"
            "print(json.dumps([before, 'tensorfab.isa.device' in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    before, loaded = json.loads(out.splitlines()[-1])
    assert before == [] and loaded
