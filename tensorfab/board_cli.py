"""``tensorfab board virtual``: the SoC a bitstream holds, simulated in Verilator and
served as a board on a TCP socket and a pty (docs/hil.md)."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Callable

__all__ = ["add_board_commands"]


def cmd_board_virtual(args: argparse.Namespace) -> int:
    from tensorfab.fpga_builds.board_configs import board_config
    from tensorfab.hil.board_server import BoardServer, board_token
    from tensorfab.hil.virtual import (
        PROBABILITIES,
        LinkFaults,
        SocSpec,
        VirtualBoard,
        check_probability,
    )
    from tensorfab.sim.rtl.build import build_steps

    from .cli_output import CliError
    from .serve_cli import serve_until_interrupted

    # before the Verilator build, which takes minutes the first time
    for name in PROBABILITIES:
        check_probability(getattr(args, name), f"--{name.replace('_', '-')}")
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port {args.port}: a TCP port is 0 (any free one) to 65535")
    if args.mem_bytes is not None and args.mem_bytes <= 0:
        raise CliError(f"--mem-bytes {args.mem_bytes}: give a positive size in bytes")
    token = board_token(args.host, args.token)
    import socket

    try:  # as BoardServer binds it (SO_REUSEADDR), then free again: a port in use, a
        socket.create_server((args.host, args.port)).close()  # host not of this machine
    except OSError as e:
        raise CliError(f"virtual board: cannot listen on {args.host}:{args.port}: "
                       f"{e.strerror or e}") from None
    config = board_config(args.config) if args.config else None
    sdram = None if args.memory is None else args.memory == "sdram"
    spec = SocSpec.for_board(args.board, config, exact=args.exact, mem_bytes=args.mem_bytes,
                             sdram=sdram)
    faults = LinkFaults(bit_flip=args.bit_flip, drop=args.drop, delay=args.delay,
                        seed=args.seed)
    with build_steps(lambda step: print(f"  {step}", flush=True)):
        board = VirtualBoard(spec)
    server = BoardServer(board, args.host, args.port, token, pty=not args.no_pty,
                         faults=faults)
    speed = (f"exact UART: {spec.baud} baud" if spec.exact else
             f"fast UART: {spec.divisor} cycles a bit, not the board's {115200} baud")
    memory = "SDRAM" if spec.sdram else "on-chip"
    print(f"virtual {spec.board or 'board'}: config {spec.config.name}, "
          f"{spec.mem_bytes // 1024} KiB {memory}, {spec.clock_hz / 1e6:g} MHz, {speed}",
          flush=True)
    print(f"listening at {server.address}", flush=True)
    print(f"token: {server.token}", flush=True)
    if server.pty_path:
        print(f"pty: {server.pty_path} (serial://{server.pty_path})", flush=True)
    print(f"connect: TENSORFAB_TOKEN={server.token} tensorfab run MODEL.tfm --target "
          f"{server.address}", flush=True)
    signal.signal(signal.SIGUSR1, lambda *_: server.press_reset())

    def close() -> None:
        server.close()
        board.close()

    serve_until_interrupted(server.serve_forever, close)
    return 0


def add_board_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``board`` (``board virtual``) with the parser's ``command`` helper."""
    b = command(
        "board", "boards without hardware: a virtual board (the SoC in Verilator)",
        "tensorfab board virtual --board ulx3s-25f",
        "tensorfab board virtual --config tiny --mem-bytes 1048576 --port 9100",
        "tensorfab board virtual --board ulx3s-25f --exact --drop 0.01",
        "tensorfab board virtual --board ulx3s-25f --memory on-chip",
        description="tensorfab board virtual: the SoC gateware of a board's bitstream (host\n"
        "bridge, core, device memory: a ULX3S's SDRAM) in Verilator, its UART on a TCP\n"
        "socket and a pty, as a real board's USB-serial port. Connect with --target\n"
        "socket://HOST:PORT (token in TENSORFAB_TOKEN) or serial://PTY. The fast UART\n"
        "(default) takes 4 clock cycles a bit; --exact runs it at the board builds'\n"
        "115200 baud. SIGUSR1 presses the board's reset. Ctrl-C stops it.")
    b.add_argument("what", choices=["virtual"], help="virtual: a simulated board")
    b.add_argument("--board", help="model this board: its default config, memory and clock")
    b.add_argument("--config", help="config (preset, board config or JSON file); default: "
                   "the board's")
    b.add_argument("--memory", choices=("sdram", "on-chip"),
                   help="device memory in the board's SDRAM (the chip modelled cycle by "
                   "cycle) or on-chip (default: the board's, SDRAM on a ULX3S; on-chip "
                   "without --board)")
    b.add_argument("--mem-bytes", type=int, help="on-chip memory (default: the board's, "
                   "else 1 MiB)")
    b.add_argument("--exact", action="store_true",
                   help="UART at the board's bit rate (slow, exact timing)")
    b.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s, this machine only)")
    b.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    b.add_argument("--token", help="secret a TCP client sends first (default: a new one)")
    b.add_argument("--no-pty", action="store_true", help="no pty, TCP only")
    b.add_argument("--bit-flip", type=float, default=0.0, metavar="P",
                   help="probability a byte has a bit flipped (both directions)")
    b.add_argument("--drop", type=float, default=0.0, metavar="P",
                   help="probability a byte is lost")
    b.add_argument("--delay", type=float, default=0.0, metavar="P",
                   help="probability a byte is held back 2 ms")
    b.add_argument("--seed", type=int, default=0, help="seed of the faults")
    b.set_defaults(func=cmd_board_virtual)
