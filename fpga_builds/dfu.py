"""The USB DFU file suffix (DFU 1.1, appendix B), as ``dfu-suffix -a`` appends it.

The OrangeCrab's bootloader takes bitstreams over DFU; amaranth-boards' platform runs
``dfu-suffix`` (Debian's dfu-util) after ``ecppack``. The suffix is 16 bytes, so it is
written here instead of asking users to install that package to build.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

__all__ = ["DFU_SUFFIX_LENGTH", "add_dfu_suffix", "dfu_suffix"]

DFU_SUFFIX_LENGTH = 16


def dfu_suffix(data: bytes, vid: int, pid: int, *, device: int = 0xFFFF) -> bytes:
    """The 16-byte suffix of firmware ``data`` for USB ``vid``:``pid``.

    Fields (little endian): bcdDevice, idProduct, idVendor, bcdDFU (0x0100), the
    signature ``UFD``, bLength (16), then dwCRC: CRC-32 of the file and the first 12
    suffix bytes, without the final inversion (dfu-util's ``crc32_byte`` recurrence).
    """
    for name, value in (("vid", vid), ("pid", pid), ("device", device)):
        if not 0 <= value <= 0xFFFF:
            raise ValueError(f"DFU suffix: {name} {value:#x} is not a 16-bit number")
    head = struct.pack("<HHHH3sB", device, pid, vid, 0x0100, b"UFD", DFU_SUFFIX_LENGTH)
    crc = zlib.crc32(data + head) ^ 0xFFFFFFFF
    return head + struct.pack("<I", crc)


def add_dfu_suffix(path: str | Path, vid: int, pid: int) -> None:
    """Append the suffix to the file at ``path`` (as ``dfu-suffix -v VID -p PID -a``)."""
    path = Path(path)
    data = path.read_bytes()
    path.write_bytes(data + dfu_suffix(data, vid, pid))
