"""The hardware-in-the-loop targets of :func:`tensorfab.isa.device.open_device`
(entry points of pyproject.toml):

- ``serial:///dev/ttyUSB0[?baud=115200]``: a board on a serial port;
- ``socket://127.0.0.1:PORT[?token=TOKEN]``: a virtual board served by ``tensorfab
  board virtual`` (the token in the URL, the ``token=`` option, or ``TENSORFAB_TOKEN``);
- ``virtual`` or ``virtual://BOARD[?exact=1&mem_bytes=N&sdram=1&direct_memory=1]``: a
  virtual board in this process (fast UART), built for each program's config, or
  modelled on BOARD (its config, device memory, clock: a ULX3S's memory is its SDRAM);
  ``sdram=1`` puts the memory in SDRAM, ``sdram=0`` on-chip, ``mem_bytes`` sets the
  on-chip memory, ``direct_memory`` reads and writes the SDRAM's contents without the
  UART (:class:`~.virtual.DirectMemory`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import numpy as np

from tensorfab.isa import HwConfig, Program
from tensorfab.isa.device import Device
from tensorfab.isa.errors import UsageError

from .board import BoardDevice, BoardMemory, BoardRunResult
from .connection import url_token
from .errors import TOKEN_ENV, BoardConfigMismatch
from .link import HostLink
from .transport import SerialTransport, parse_link_url
from .virtual import DirectMemory, InProcessTransport, LinkFaults, SocSpec, VirtualBoard

__all__ = ["VirtualBoardDevice", "open_link_board", "open_virtual"]


def open_link_board(target: str, *, baud: int | None = None, token: str | None = None,
                    timeout: float = 1.0, retries: int = 8, **options: object
                    ) -> BoardDevice:
    """A :class:`BoardDevice` on a serial port or a virtual board's socket."""
    url, rate = parse_link_url(target, baud)
    if url.startswith("socket://") and token is None:
        token = url_token(target) or os.environ.get(TOKEN_ENV)
    name = target.split("?")[0]  # not a token given in the URL
    link = HostLink(SerialTransport(url, rate, token=token), timeout=timeout, retries=retries,
                    name=name)
    return BoardDevice(link, name=name, **options)  # type: ignore[arg-type]


class VirtualBoardDevice(Device):
    """Virtual boards in this process, one per config, reached over the in-process
    transport: the host link, the bridge and the SoC are all exercised.

    Parameters
    ----------
    board : str, optional
        Model this board (its default config, memory and clock).
    exact : bool
        The board builds' bit rate instead of the fast UART.
    faults : LinkFaults, optional
        Faults on the link, both directions.
    mem_bytes : int, optional
        On-chip memory (default: the board's, else 1 MiB).
    timeout_bytes : int
        A response's timeout beyond its own bytes, in byte times of the board's UART
        (the in-process transport keeps simulated time).
    retries : int
        Retries of a request before the link gives up.
    sdram : bool, optional
        Device memory in SDRAM (the controller the ULX3S bitstreams hold, the chip
        modelled in the harness) or on-chip (False); None: the board's (SDRAM on a
        ULX3S), on-chip without a board (:meth:`~.virtual.SocSpec.for_board`).
    direct_memory : bool
        Device memory reads and writes go straight into the SDRAM chip's contents
        (:class:`~.virtual.DirectMemory`), only commands over the UART: what makes a
        model of megabytes quick to load. Needs the memory in SDRAM.

    Raises
    ------
    UsageError
        ``direct_memory`` without the memory in SDRAM, ``sdram`` on a board without
        one, ``mem_bytes`` with the memory in SDRAM.
    """

    name = "virtual"

    def __init__(self, board: str | None = None, *, exact: bool = False,
                 faults: LinkFaults | None = None, mem_bytes: int | None = None,
                 timeout_bytes: int = 64, retries: int = 12, sdram: bool | None = None,
                 direct_memory: bool = False) -> None:
        # a board's memory is checked here, before any SoC is built
        self.sdram = (SocSpec.for_board(board, mem_bytes=mem_bytes, sdram=sdram).sdram
                      if board else bool(sdram))
        if direct_memory and not self.sdram:
            raise UsageError("virtual board: direct_memory needs sdram (the SDRAM chip's "
                             "contents are what it reads and writes)")
        self.board = board
        self.direct_memory = direct_memory
        self.exact = exact
        self.faults = faults
        self.mem_bytes = mem_bytes
        self.timeout_bytes = timeout_bytes
        self.retries = retries
        self._devices: dict[HwConfig, BoardDevice] = {}
        self._transfer_progress: Callable[[str, int, int], None] | None = None

    @property
    def transfer_progress(self) -> Callable[[str, int, int], None] | None:
        """Called as memory moves over each board's link
        (:attr:`~.link.HostLink.transfer_progress`)."""
        return self._transfer_progress

    @transfer_progress.setter
    def transfer_progress(self, report: Callable[[str, int, int], None] | None) -> None:
        self._transfer_progress = report
        for device in self._devices.values():
            device.transfer_progress = report

    def spec(self, config: HwConfig) -> SocSpec:
        """The SoC that runs ``config``'s programs (nothing built)."""
        return SocSpec.for_board(self.board, None if self.board else config,
                                 exact=self.exact, mem_bytes=self.mem_bytes, sdram=self.sdram)

    def memory_bytes(self, config: HwConfig) -> int:
        """Bytes of device memory a model for ``config`` can use (known before the SoC
        is built)."""
        return self.spec(config).mem_bytes

    def check_config(self, config: HwConfig) -> None:
        """Refuse ``config`` on a board modelled on one that runs another (before its SoC
        is built).

        Raises
        ------
        BoardConfigMismatch
        """
        runs = self.spec(config).config
        if runs != config:
            raise BoardConfigMismatch(
                f"virtual://{self.board} runs {runs.name}, the program is for "
                f"{config.name}: compile for {runs.name} (--config {runs.name})")

    def device(self, config: HwConfig) -> BoardDevice:
        """The board device for ``config`` (its SoC built once, cached)."""
        if config not in self._devices:
            vb = VirtualBoard(self.spec(config))
            transport = InProcessTransport(vb, self.faults)
            link = HostLink(transport, timeout=self.timeout_bytes * transport.byte_seconds,
                            retries=self.retries)
            link.transfer_progress = self._transfer_progress
            self._devices[config] = BoardDevice(
                link, name="virtual", memory=DirectMemory(vb) if self.direct_memory else None)
        return self._devices[config]

    def run(self, program: Program, dram: np.ndarray | None = None) -> BoardRunResult:
        return self.device(program.config).run(program, dram)

    def open_memory(self, config: HwConfig, size: int) -> BoardMemory:
        """The memory of the board for ``config``, checked against its config and size
        before the board is built.

        Raises
        ------
        BoardConfigMismatch
            A board modelled on one that runs another config.
        UsageError
            ``size`` larger than the board's memory.
        """
        self.check_config(config)
        if size > self.memory_bytes(config):
            raise UsageError(f"virtual: a device memory of {size} bytes does not fit the "
                             f"board's {self.memory_bytes(config)} bytes")
        return self.device(config).open_memory(config, size)


def open_virtual(target: str, **options: object) -> VirtualBoardDevice:
    """``virtual`` or ``virtual://BOARD[?exact=1&mem_bytes=N&sdram=1&direct_memory=1]``.

    Raises
    ------
    UsageError
        A ``mem_bytes`` that is not a number, a flag that is not 1/0 (true/false,
        yes/no), an option it does not take (a misspelt one would be left out without
        a word), an address that cannot be parsed.
    """
    try:
        parts = urlsplit(target)
    except ValueError as exc:  # urllib's 'Invalid IPv6 URL'
        raise UsageError(f"{target}: not a virtual board target: {exc}") from None
    board = parts.netloc or None
    query = parse_qs(parts.query, keep_blank_values=True)
    flags = ("exact", "sdram", "direct_memory")
    unknown = sorted(set(query) - {*flags, "mem_bytes"})
    if unknown:
        raise UsageError(f"{target}: unknown option {', '.join(unknown)} (a virtual board "
                         f"takes {', '.join(flags)}, mem_bytes)")
    for flag in flags:
        if flag in query:
            value = query[flag][0].lower()
            if value not in ("1", "true", "yes", "0", "false", "no"):
                raise UsageError(f"{target}: {flag}={query[flag][0]!r}: give 1 or 0 (true or "
                                 "false, yes or no)")
            options.setdefault(flag, value in ("1", "true", "yes"))
    if "mem_bytes" in query:
        value = query["mem_bytes"][0]
        if not value.isdigit():
            raise UsageError(f"{target}: mem_bytes={value!r} is not a number of bytes")
        options.setdefault("mem_bytes", int(value))
    return VirtualBoardDevice(board, **options)  # type: ignore[arg-type]
