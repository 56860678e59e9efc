"""One suite for any device: the directed ISA programs, random programs, a compiled
convolution and dense layer, and the digits CNN resident on the device, each equal to
the functional simulator bit for bit.

The device is ``--device TARGET`` (a target of :func:`~tensorfab.isa.device.open_device`;
default ``virtual``, a virtual board in this process, so that every run goes through
the host link, the bridge and the SoC). ``--device-faults`` injects link faults into
the virtual board; every fault must then be recovered by the link's retries, and some
must have happened. A target that cannot be opened fails every test with its name.
See docs/hil.md, "Running the suite on a device".
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from support.device_compare import assert_same_as_fsim, fsim_differences
from support.isa_programs import directed_programs

from tensorfab.compiler import Epilogue, conv2d, dense
from tensorfab.hil.board import BoardDevice, find_config
from tensorfab.hil.link import LinkStats
from tensorfab.hil.targets import VirtualBoardDevice
from tensorfab.hil.virtual import LinkFaults
from tensorfab.isa import HwConfig, get_config
from tensorfab.isa.device import Device, open_device, target_scheme
from tensorfab.sim import FunctionalSimulator
from tensorfab.sim.testing.random_program import random_program

#: Memory of the in-process virtual board (the suite's largest image is the digits CNN's
#: at batch 8, 14 KiB on tiny).
VIRTUAL_MEM = 1 << 16
#: Faults of ``--device-faults``: about one byte in a hundred lost, one in 10,000 hit.
FAULTS = LinkFaults(bit_flip=1e-4, drop=0.01, seed=11)
#: Targets whose config is the board's own (INFO's config CRC).
BOARD_SCHEMES = ("serial", "socket")
#: Seeds of the random programs (the first ``--device-programs`` of them).
FIRST_SEED = 40_000


@dataclass
class DeviceUnderTest:
    """The opened device, its target, the config its programs are for, and whether
    link faults are injected."""

    target: str
    device: Device
    config: HwConfig
    faults: bool

    def link_stats(self) -> LinkStats | None:
        """The host link's statistics (``None`` for a device without a host link)."""
        if isinstance(self.device, VirtualBoardDevice):
            return self.device.device(self.config).link.stats
        if isinstance(self.device, BoardDevice):
            return self.device.link.stats
        return None


def _open(target: str, config_name: str | None, faults: bool) -> DeviceUnderTest:
    scheme = target_scheme(target)
    if faults and scheme != "virtual":
        pytest.fail(f"--device-faults injects faults into the virtual board only, not "
                    f"into --device {target}", pytrace=False)
    options = {"mem_bytes": VIRTUAL_MEM, "faults": FAULTS if faults else None} \
        if scheme == "virtual" else {}
    try:
        device = open_device(target, **options)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    else:
        error = ""
    if error:
        pytest.fail(f"--device {target}: cannot open the device: {error}", pytrace=False)
    if isinstance(device, BoardDevice) and scheme in BOARD_SCHEMES:
        found = find_config(device.info.config_crc)
        if found is None:
            pytest.fail(f"--device {target}: the board runs a config this tensorfab does not "
                        f"know (CRC 0x{device.info.config_crc:08x})", pytrace=False)
        if config_name is not None and config_name != found[0]:
            pytest.fail(f"--device {target}: the board runs {found[0]}, not "
                        f"--device-config {config_name}", pytrace=False)
        config = found[1]
    else:
        config = get_config(config_name or "tiny")
    return DeviceUnderTest(target, device, config, faults)


@pytest.fixture(scope="session")
def dut(request: pytest.FixtureRequest) -> Iterator[DeviceUnderTest]:
    opt = request.config.getoption
    opened = _open(opt("--device"), opt("--device-config"), opt("--device-faults"))
    if isinstance(opened.device, VirtualBoardDevice):
        opened.device.device(opened.config)  # build or load the SoC once, outside a test
    yield opened
    close = getattr(opened.device, "close", None)
    if close is not None:
        close()


@pytest.fixture
def link_check(dut: DeviceUnderTest) -> Iterator[None]:
    """After the test: no request given up on, and with faults some recovered."""
    stats = dut.link_stats()
    before = copy.deepcopy(stats)
    yield
    if stats is None or before is None:
        return
    assert stats.reported == before.reported, f"{dut.target}: requests given up: {stats}"
    if dut.faults:
        assert stats.recovered > before.recovered, \
            f"{dut.target}: faults injected but no retry recovered one: {stats}"


def _run_all(dut: DeviceUnderTest, programs: dict) -> None:
    failures: list[str] = []
    for name, prog in programs.items():
        try:
            got = dut.device.run(prog)
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        failures += fsim_differences(prog, got, name)
    assert not failures, (f"{len(failures)} differences on {dut.target} "
                          f"({dut.config.name}):\n" + "\n".join(failures))


def test_directed_programs(dut: DeviceUnderTest, link_check: None) -> None:
    _run_all(dut, directed_programs(dut.config))


def test_random_programs(dut: DeviceUnderTest, link_check: None,
                         request: pytest.FixtureRequest) -> None:
    count = request.config.getoption("--device-programs")
    seeds = range(FIRST_SEED, FIRST_SEED + count)
    _run_all(dut, {f"{dut.config.name} seed {s}": random_program(dut.config, s)
                   for s in seeds})


@pytest.mark.slow
def test_random_programs_long(dut: DeviceUnderTest, link_check: None,
                              request: pytest.FixtureRequest) -> None:
    """Ten times ``--device-programs`` more, after those of :func:`test_random_programs`."""
    count = request.config.getoption("--device-programs")
    first = FIRST_SEED + count
    _run_all(dut, {f"{dut.config.name} seed {s}": random_program(dut.config, s)
                   for s in range(first, first + 10 * count)})


def _requantizing(cfg: HwConfig, mult: int, shift: int, channels: int,
                  relu: bool = False) -> Epilogue:
    """The scale ``mult / 2^shift``: MUL and SHR_RND on the ALU, or in a config without
    the vector ALU its STOREs' REQUANT (the same scale in every channel)."""
    if cfg.vector_alu:
        return Epilogue(requant=(mult, shift), relu=relu)
    return Epilogue.from_scales(np.full(channels, mult / 2.0 ** shift), relu=relu,
                                bias=True, rounding="single")


def test_compiled_layers(dut: DeviceUnderTest, link_check: None) -> None:
    """A 3x3 convolution and a dense layer from the tensor compiler, with requantizing
    epilogues."""
    cfg = dut.config
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 12, 7, 7), dtype=np.int8)
    w = rng.integers(-128, 128, (16, 12, 3, 3), dtype=np.int8)
    bias = rng.integers(-4096, 4096, 16).astype(np.int32)
    conv = conv2d(cfg, x, w, bias, stride=1, padding=1,
                  epilogue=_requantizing(cfg, 19_000, 12, 16, relu=True))
    xd = rng.integers(-128, 128, (5, 40), dtype=np.int8)
    wd = rng.integers(-128, 128, (24, 40), dtype=np.int8)
    fc = dense(cfg, xd, wd, rng.integers(-1000, 1000, 24).astype(np.int32),
               epilogue=_requantizing(cfg, 23_000, 10, 24))
    for name, op in (("conv2d", conv), ("dense", fc)):
        got = dut.device.run(op.program)
        assert_same_as_fsim(op.program, got, name)
        assert np.count_nonzero(got.outputs["out"]), f"{name}: all zero: nothing tested"


def _digits_on(device: Device, batch: int, images: int, config: HwConfig) -> np.ndarray:
    """The digits CNN loaded on ``device`` once (``tensorfab run``'s path), run on
    ``images`` test images in batches: its outputs."""
    from tensorfab.models import load_digits_split
    from tensorfab.models.digits_int8 import compile_digits_int8
    from tensorfab.runtime.profiling import profile_program
    from tensorfab.runtime.resident import ResidentModel

    model = compile_digits_int8(batch=batch, config=config)
    _, _, x, _ = load_digits_split(0)
    outs = []
    with ResidentModel(model.program, device) as resident:
        for i in range(0, images, batch):
            profile = profile_program(model.program, [x[i:i + batch]], device,
                                      resident=resident)
            outs.append(np.asarray(profile.output))
    return np.concatenate(outs)


@pytest.mark.parametrize(("batch", "images"), [
    pytest.param(4, 8, id="batch4"),
    pytest.param(8, 64, id="batch8-64images", marks=pytest.mark.slow)])
def test_digits_cnn_resident(dut: DeviceUnderTest, link_check: None, batch: int,
                             images: int) -> None:
    got = _digits_on(dut.device, batch, images, dut.config)
    want = _digits_on(FunctionalSimulator(), batch, images, dut.config)
    assert got.dtype == want.dtype and got.shape == want.shape == (images, 10)
    np.testing.assert_array_equal(got, want, err_msg=f"digits CNN on {dut.target}")
