"""The target registry of isa/device.py: schemes, URL targets, registration hook."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensorfab.isa import PRESETS, TensorfabError
from tensorfab.isa.asm import assemble
from tensorfab.isa.device import (
    Device,
    RunResult,
    device_schemes,
    open_device,
    register_device,
    target_scheme,
)
from tensorfab.isa.errors import UsageError


class _Echo(Device):
    name = "echo"

    def __init__(self, target: str = "", **options: object) -> None:
        self.target, self.options = target, options

    def run(self, program, dram=None) -> RunResult:
        return RunResult(np.zeros(0, np.uint8), {})


def test_installed_schemes_come_from_entry_points() -> None:
    assert {"fsim", "rtl"} <= set(device_schemes())
    assert open_device("fsim").name == "fsim"


def test_target_scheme() -> None:
    assert target_scheme("tcp://127.0.0.1:9000") == "tcp"
    assert target_scheme("serial:///dev/ttyUSB0") == "serial"
    assert target_scheme("fsim") == "fsim"


def test_registered_factory_gets_the_whole_target_and_options() -> None:
    register_device("echo-test", lambda target, **kw: _Echo(target, **kw), replace=True)
    dev = open_device("echo-test://host:1/x", token="t")
    assert isinstance(dev, _Echo)
    assert dev.target == "echo-test://host:1/x" and dev.options == {"token": "t"}
    assert "echo-test" in device_schemes()


def test_registration_conflicts_and_bad_names() -> None:
    register_device("echo-dup", _Echo, replace=True)
    with pytest.raises(UsageError, match="'echo-dup' is registered already"):
        register_device("echo-dup", lambda t: _Echo(t))
    with pytest.raises(UsageError, match="device scheme 'Bad Name'"):
        register_device("Bad Name", _Echo)


def test_unknown_target_names_the_known_ones() -> None:
    with pytest.raises(TensorfabError, match=r"unknown executor 'nope://x' \(known: .*fsim"):
        open_device("nope://x")


def test_factory_must_make_a_device() -> None:
    register_device("not-a-device", lambda target: object(), replace=True)
    with pytest.raises(TensorfabError, match="made a object, not a Device"):
        open_device("not-a-device")


@pytest.mark.parametrize(("target", "options", "message"), [
    ("rtl", {"config": "tiny"}, "open_device('rtl'): no option 'config' (its options: "
                                "memory, max_cycles, hang_cycles, trace, threads, "
                                "verilator_args, cxxflags, pgo)"),
    ("fsim", {"bogus": 1}, "open_device('fsim'): no option 'bogus' (its options: fast)"),
    (None, {}, "open_device: the target is a name or URL such as 'fsim' or "
               "'tcp://127.0.0.1:9000', not None"),
])
def test_a_wrong_option_or_target_names_what_is_taken(target, options, message) -> None:
    """open_device('rtl', config='tiny') and open_device('fsim', bogus=1) gave
    Python's TypeError from the factory, open_device(None) an AttributeError."""
    with pytest.raises(UsageError) as info:
        open_device(target, **options)
    assert str(info.value) == message


@pytest.mark.parametrize("target", ["fsim", "timing"])
@pytest.mark.parametrize("given,how", [
    ("prog.s", r"not a str \('prog\.s'\): get one with tensorfab\.isa\.asm\.assemble_file\("),
    (Path("prog.bin"), r"not a PosixPath \('prog\.bin'\): get one with Program\.from_bytes\("
                       r"Path\(path\)\.read_bytes\(\)\) for a \.bin file"),
    (b"TFABPROG", r"not a bytes \(b'TFABPROG'\): get one with Program\.from_bytes\(blob\)"),
    (None, r"not None: get one with .*assemble_file.*Program\.from_bytes"),
])
def test_run_of_something_not_a_program_says_how_to_get_one(target, given, how) -> None:
    """dev.run('prog.s') (a path, not a Program) raised AttributeError: 'str' object has
    no attribute 'insns'; now a UsageError naming the device, and how to read a .s or
    .bin file into a Program."""
    if isinstance(given, Path) and type(Path()).__name__ != "PosixPath":
        pytest.skip("the message names the Path class")
    dev = open_device(target)
    with pytest.raises(UsageError, match=rf"^{target}: run takes a Program, {how}"):
        dev.run(given)
    with pytest.raises(UsageError, match=rf"^{target}: run takes a Program, {how}"):
        dev.run(program=given)
    with pytest.raises(UsageError, match=rf"^DeviceMemory\.run takes a Program, {how}"):
        dev.open_memory(PRESETS["tiny"], 4096).run(given)


def test_run_of_a_subclass_still_takes_a_program() -> None:
    prog = assemble(".config tiny\nfinish\n")
    assert _Echo().run(prog).dram.size == 0
    with pytest.raises(UsageError, match=r"^echo: run takes a Program, not a str"):
        _Echo().run("p.s")
