"""tensorfab.hil: hardware in the loop (host-link protocol host side, board devices, the
device server and its tracker: docs/hil.md)."""
