"""tensorfab.hil: hardware in the loop (host-link protocol host side, board devices)."""
