"""Tensor layouts named as strings, and the relayout between a plain layout and its blocked
form.

A layout is a plain base of upper-case axis letters (``NCHW``, ``OIHW``) followed by
blocks, each an extent and the lower-case letter of the axis it splits: ``NCHW1n16c`` is
the accelerator's activation layout (``(N/1, C/16, H, W, 1, 16)``), ``OIHW16o16i`` its
weight layout. Packing zero-pads a blocked axis to a multiple of its block; unpacking
gives the padded extents (crop with a slice to drop the padding).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tensorfab.isa import TensorfabError


class LayoutError(TensorfabError):
    """A layout string that does not parse, or two layouts with no transform between."""


@dataclass(frozen=True)
class Layout:
    """A parsed layout: ``base`` axis letters and ``blocks`` as (axis letter, extent)."""

    name: str
    base: str
    blocks: tuple[tuple[str, int], ...]

    @property
    def ndim(self) -> int:
        """Rank of a tensor in this layout."""
        return len(self.base) + len(self.blocks)


_LAYOUT = re.compile(r"^([A-Z]+)((?:\d+[a-z])*)$")


def parse_layout(name: str) -> Layout:
    """Parse ``name`` (``NCHW``, ``NCHW1n16c``, ``OIHW16o16i``) into a :class:`Layout`."""
    m = _LAYOUT.match(name) if isinstance(name, str) else None
    if m is None:
        raise LayoutError(f"layout {name!r} does not parse: expected upper-case axes then "
                          "blocks such as 16c, e.g. NCHW1n16c")
    base = m.group(1)
    if len(set(base)) != len(base):
        raise LayoutError(f"layout {name!r} repeats an axis")
    blocks = tuple((letter.upper(), int(n))
                   for n, letter in re.findall(r"(\d+)([a-z])", m.group(2)))
    for letter, n in blocks:
        if letter not in base:
            raise LayoutError(f"layout {name!r}: block {n}{letter.lower()} splits no axis")
        if n < 1:
            raise LayoutError(f"layout {name!r}: block {n}{letter.lower()} is empty")
    if len({b[0] for b in blocks}) != len(blocks):
        raise LayoutError(f"layout {name!r} blocks an axis twice")
    return Layout(name, base, blocks)


def _pair(src: str, dst: str) -> tuple[Layout, Layout, bool]:
    """(plain, blocked, packing) for a transform between ``src`` and ``dst``."""
    s, d = parse_layout(src), parse_layout(dst)
    if s.base != d.base or (s.blocks and d.blocks):
        raise LayoutError(f"no transform from {src} to {dst}: one must be the plain "
                          "form of the other")
    return (s, d, True) if not s.blocks else (d, s, False)


def transformed_shape(shape: tuple, src: str, dst: str) -> tuple:
    """Shape after relayout from ``src`` to ``dst``; dims may be symbols where their block
    is 1 or they are not blocked."""
    plain, blocked, packing = _pair(src, dst)
    if packing and len(shape) != len(plain.base):
        raise LayoutError(f"shape {tuple(shape)} does not have the {len(plain.base)} dims of "
                          f"{src}")
    if not packing and len(shape) != blocked.ndim:
        raise LayoutError(f"shape {tuple(shape)} does not have the {blocked.ndim} dims of "
                          f"{src}")
    factor = dict(blocked.blocks)
    if packing:
        out = []
        for letter, d in zip(plain.base, shape, strict=True):
            f = factor.get(letter, 1)
            if f == 1:
                out.append(d)
            elif isinstance(d, int):
                out.append(-(-d // f))
            else:
                raise LayoutError(f"dim {letter}={d} is symbolic; it cannot be blocked by {f}")
        return (*out, *(f for _, f in blocked.blocks))
    outer = shape[: len(plain.base)]
    inner = dict(zip((b[0] for b in blocked.blocks), shape[len(plain.base):], strict=True))
    out = []
    for letter, d in zip(plain.base, outer, strict=True):
        f = inner.get(letter, 1)
        if f != factor.get(letter, 1):
            raise LayoutError(f"block of axis {letter} is {f}, {src} says "
                              f"{factor.get(letter)}")
        out.append(d if f == 1 else d * f)
    return tuple(out)


def layout_transform(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Relayout ``x`` from ``src`` to ``dst`` (one plain, the other blocked)."""
    plain, blocked, packing = _pair(src, dst)
    x = np.asarray(x)
    transformed_shape(x.shape, src, dst)  # validates rank and blocks
    factor = dict(blocked.blocks)
    nbase = len(plain.base)
    block_letters = [b[0] for b in blocked.blocks]
    if packing:
        pad = [(0, -d % factor.get(letter, 1)) for letter, d in zip(plain.base, x.shape,
                                                                     strict=True)]
        x = np.pad(x, pad)
        split_shape, outer_axes, inner_axes = [], [], {}
        for letter, d in zip(plain.base, x.shape, strict=True):
            f = factor.get(letter, 1)
            outer_axes.append(len(split_shape))
            split_shape.append(d // f)
            if letter in factor:
                inner_axes[letter] = len(split_shape)
                split_shape.append(f)
        order = outer_axes + [inner_axes[letter] for letter in block_letters]
        return np.ascontiguousarray(x.reshape(split_shape).transpose(order))
    # unpacking: put each axis's inner block right after its outer extent, then merge
    order, merged = [], []
    for i, letter in enumerate(plain.base):
        order.append(i)
        if letter in factor:
            order.append(nbase + block_letters.index(letter))
            merged.append(x.shape[i] * factor[letter])
        else:
            merged.append(x.shape[i])
    return np.ascontiguousarray(x.transpose(order).reshape(merged))
