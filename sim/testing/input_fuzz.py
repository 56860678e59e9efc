"""Mutated and random inputs for fuzzing the command line's readers.

Seeded mutators of assembly text and program binaries: every output is reproducible
from ``(seed program, rng state)``. The fuzz tests feed them through ``tensorfab asm``,
``disasm`` and ``sim`` in-process and require that every failure is one of tensorfab's
own errors naming the file.
"""

from __future__ import annotations

import json

import numpy as np

from tensorfab.isa.program import MAGIC, VERSION

INTERESTING_NUMBERS = ("0", "-1", "1", "07", "0_7", "_", "0x_", "0x", "99999999999999999999",
                       "4294967296", "-4294967296", "65535", "65536", "255", "256", "1e3",
                       "0b2", "--1", "+", "0o8", "1,1", "1:1", ":")
INTERESTING_TOKENS = ("#", ";", "=", ",", ":", "+", "uops", "uops+1", "A+99999999",
                      "output", "file=missing.npy", "file=", "reset", "pop_prev",
                      "push_next", ".config", ".segment", ".data", ".uop", "int8", "int64",
                      "{", '{"batch": 3}', "é", "\x00", "\ufeff", "[b]", "finish")


def mutate_text(text: str, rng: np.random.Generator) -> bytes:
    """One to four edits of assembly text: tokens, numbers, lines or raw bytes."""
    lines = text.splitlines()
    for _ in range(int(rng.integers(1, 5))):
        kind = int(rng.integers(0, 8))
        if not lines:
            lines = [""]
        i = int(rng.integers(0, len(lines)))
        toks = lines[i].split(" ")
        j = int(rng.integers(0, len(toks)))
        if kind == 0:  # replace a number inside a token
            head, sep, _ = toks[j].rpartition("=")
            num = INTERESTING_NUMBERS[int(rng.integers(0, len(INTERESTING_NUMBERS)))]
            toks[j] = f"{head}{sep}{num}"
        elif kind == 1:  # insert a token
            toks.insert(j, INTERESTING_TOKENS[int(rng.integers(0, len(INTERESTING_TOKENS)))])
        elif kind == 2:  # drop a token
            toks.pop(j)
        elif kind == 3:  # drop, duplicate or swap lines
            k = int(rng.integers(0, len(lines)))
            op = int(rng.integers(0, 3))
            if op == 0:
                lines.pop(i)
                continue
            if op == 1:
                lines.insert(k, lines[i])
                continue
            lines[i], lines[k] = lines[k], lines[i]
            continue
        elif kind == 4:  # change one character
            s = " ".join(toks)
            if s:
                p = int(rng.integers(0, len(s)))
                s = s[:p] + chr(int(rng.integers(32, 127))) + s[p + 1:]
            toks = [s]
        elif kind == 5:  # swap the values of two keys
            k = int(rng.integers(0, len(toks)))
            toks[j], toks[k] = toks[k], toks[j]
        elif kind == 6:  # a digit changed (sizes, indices, counts)
            s = " ".join(toks)
            digits = [p for p, c in enumerate(s) if c.isdigit()]
            if digits:
                p = digits[int(rng.integers(0, len(digits)))]
                s = s[:p] + str(int(rng.integers(0, 10))) * int(rng.integers(1, 4)) + s[p + 1:]
            toks = [s]
        else:
            lines[i] = " ".join(toks)
            raw = "\n".join(lines).encode()
            return mutate_bytes(raw, rng, edits=1)
        lines[i] = " ".join(toks)
    return ("\n".join(lines) + "\n").encode()


def mutate_bytes(blob: bytes, rng: np.random.Generator, edits: int | None = None) -> bytes:
    """Flip, overwrite, insert or delete a few bytes (or truncate)."""
    b = bytearray(blob)
    for _ in range(edits or int(rng.integers(1, 4))):
        if not b:
            b += bytes(rng.integers(0, 256, 8, dtype=np.uint8))
        p = int(rng.integers(0, len(b)))
        kind = int(rng.integers(0, 6))
        if kind == 0:
            b[p] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            b[p] = int(rng.integers(0, 256))
        elif kind == 2:
            b.insert(p, int(rng.integers(0, 256)))
        elif kind == 3:
            del b[p]
        elif kind == 4:
            del b[p:]
        else:
            b[p] = (0, 0xFF, 0x7F, 0x80)[int(rng.integers(0, 4))]
    return bytes(b)


def mutate_header(blob: bytes, rng: np.random.Generator) -> bytes:
    """A binary whose JSON header has one value replaced by another JSON value."""
    hlen = int.from_bytes(blob[12:16], "little")
    header = json.loads(blob[16: 16 + hlen])
    values = (None, True, -1, 0, 3, 1 << 40, 1.5, "x", "int9", [], [0], [1 << 33, 1 << 33],
              {}, "default")
    targets = [header, header["config"], *header["segments"]]
    obj = targets[int(rng.integers(0, len(targets)))]
    if obj:
        key = sorted(obj)[int(rng.integers(0, len(obj)))]
        if rng.integers(0, 5) == 0:
            del obj[key]
        else:
            obj[key] = values[int(rng.integers(0, len(values)))]
    hdr = json.dumps(header).encode()
    return blob[:12] + len(hdr).to_bytes(4, "little") + hdr + blob[16 + hlen:]


def random_blob(rng: np.random.Generator) -> bytes:
    """Random bytes; a third start with the magic, a third with magic and version."""
    body = bytes(rng.integers(0, 256, int(rng.integers(0, 200)), dtype=np.uint8))
    kind = int(rng.integers(0, 3))
    if kind == 0:
        return body
    if kind == 1:
        return MAGIC + body
    return MAGIC + VERSION.to_bytes(4, "little") + body


__all__ = ["mutate_bytes", "mutate_header", "mutate_text", "random_blob"]
