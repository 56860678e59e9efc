"""One matplotlib figure written as a PNG: the plots of the simulators and benchmarks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["PNG_SOFTWARE", "is_tensorfab_png", "png_figure"]

#: The ``Software`` text chunk of every PNG written here: how the command line tells
#: its own plots (which it may replace) from a user's files.
PNG_SOFTWARE = "tensorfab"


def is_tensorfab_png(path: str | Path) -> bool:
    """Whether ``path`` is a PNG written by :func:`png_figure`."""
    with Path(path).open("rb") as f:
        head = f.read(4096)
    return head.startswith(b"\x89PNG") and b"tEXtSoftware\x00" + PNG_SOFTWARE.encode() in head


@contextmanager
def png_figure(path: str | Path, figsize: tuple[float, float], dpi: int = 110
               ) -> Iterator[tuple[Any, Any]]:
    """A figure with one axes on matplotlib's headless (Agg) backend, saved to
    ``path`` (folders created) when the block ends without an error, then closed.

    Yields
    ------
    (Figure, Axes)
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=figsize)
    try:
        yield fig, ax
        fig.tight_layout()
        fig.savefig(path, dpi=dpi, format="png", metadata={"Software": PNG_SOFTWARE})
    finally:
        plt.close(fig)
