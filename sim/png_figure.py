"""One matplotlib figure written as a PNG: the plots of the simulators and benchmarks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["png_figure"]


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
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
