"""``tensorfab serve`` and ``tensorfab tracker``: a device served over TCP to clients
holding a token, and the tracker that hands registered devices out by kind."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from collections.abc import Callable

__all__ = ["add_serve_commands", "serve_until_interrupted"]

#: Seconds between a served device's heartbeats to its tracker.
HEARTBEAT_SECONDS = 5.0


def _log_to_stderr() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    log = logging.getLogger("tensorfab.hil")
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def _advertised(host: str, port: int, advertise: str | None) -> str:
    """The address clients reach a server bound to ``host:port`` at."""
    name = advertise or (socket.getfqdn() if host in ("0.0.0.0", "::", "") else host)
    return f"tcp://{f'[{name}]' if ':' in name else name}:{port}"


def serve_until_interrupted(serve: Callable[[], None], close: Callable[[], None]) -> None:
    """Run ``serve`` until Ctrl-C (a quiet end), then ``close``. Ctrl-C works even when
    the process was started with SIGINT ignored (a background job of a shell)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        serve()
    except KeyboardInterrupt:
        pass
    finally:
        close()


def cmd_serve(args: argparse.Namespace) -> int:
    from tensorfab.hil.errors import HilError, TokenError
    from tensorfab.hil.server import DeviceServer, served_token_hint
    from tensorfab.hil.tracker import TrackerRegistration

    if (args.tracker is None) != (args.kind is None):
        raise HilError("--tracker and --kind go together: the tracker hands this device "
                       "out as KIND")
    if args.tracker is not None and args.token is None:
        raise HilError("--tracker needs --token: the tracker's token, which clients of "
                       "this device use too")
    try:
        server = DeviceServer(args.device, args.host, args.port, args.token)
    except TokenError as exc:  # --token is this server's, not the served device's
        hint = served_token_hint(args.device)
        if hint is None:
            raise
        raise exc.given_with(f"{hint[0]} token in --device '{hint[1]}' (--token is this "
                             "server's own)") from None
    registration = None
    try:
        address = _advertised(args.host, server.port, args.advertise)
        if args.tracker is not None:
            registration = TrackerRegistration(args.tracker, server.token, args.kind, address,
                                               interval=HEARTBEAT_SECONDS,
                                               available=server.device_available)
        print(f"serving {server.device.name} at {server.address}", flush=True)
        print(f"token: {server.token}", flush=True)
        if registration is not None:
            print(f"registered with tracker {args.tracker} as {args.kind} ({address})",
                  flush=True)
        print(f"connect: TENSORFAB_TOKEN={server.token} ... open_device('{address}')",
              flush=True)
    except BaseException:
        server.close()
        raise
    _log_to_stderr()

    def close() -> None:
        if registration is not None:
            registration.close()
        server.close()

    serve_until_interrupted(server.serve_forever, close)
    return 0


def cmd_tracker(args: argparse.Namespace) -> int:
    from tensorfab.hil.tracker import Tracker

    tracker = Tracker(args.host, args.port, args.token)
    print(f"tracker at {tracker.address}", flush=True)
    print(f"token: {tracker.token}", flush=True)
    _log_to_stderr()
    serve_until_interrupted(tracker.serve_forever, tracker.close)
    return 0


def add_serve_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``serve`` and ``tracker`` with the parser's ``command(name, help, *examples,
    description=...)`` helper."""
    s = command(
        "serve", "serve a device over TCP to clients holding a token",
        "tensorfab serve --device fsim",
        "tensorfab serve --device rtl --port 9000 --token $TENSORFAB_TOKEN",
        "tensorfab serve --device fsim --tracker 127.0.0.1:9190 --kind fsim",
        description="Serve a device over TCP (docs/hil.md). Clients connect with\n"
        "open_device('tcp://HOST:PORT', token=...) or RemoteDevice. It listens on\n"
        "127.0.0.1 unless --host says otherwise (which needs --token); without --token\n"
        "a token is made and printed. Runs are serialized. A device whose link fails\n"
        "is reopened on the next request (logged on stderr). Ctrl-C stops it.")
    s.add_argument("--device", default="fsim",
                   help="target to serve: fsim, rtl or any registered target "
                        "(default: %(default)s)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s, this machine only)")
    s.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    s.add_argument("--token", help="shared secret clients send (default: a new random one)")
    s.add_argument("--tracker", metavar="HOST:PORT",
                   help="register with this tracker (with --kind; --token is the tracker's)")
    s.add_argument("--kind", help="kind of device the tracker hands this one out as")
    s.add_argument("--advertise", metavar="HOST",
                   help="host name clients reach this server at (default: --host, or this "
                        "machine's name when listening on every address)")
    s.set_defaults(func=cmd_serve)

    t = command(
        "tracker", "hand registered device servers out by kind",
        "tensorfab tracker --port 9190",
        "tensorfab tracker --host 0.0.0.0 --port 9190 --token $TENSORFAB_TOKEN",
        description="A tracker (docs/hil.md): servers started with --tracker register\n"
        "with it; open_device('tracker://HOST:PORT/KIND', token=...) gets the next free\n"
        "device of that kind. Same token rules as serve. Ctrl-C stops it.")
    t.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s, this machine only)")
    t.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    t.add_argument("--token", help="shared secret (default: a new random one)")
    t.set_defaults(func=cmd_tracker)
