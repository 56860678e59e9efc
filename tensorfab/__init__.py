"""tensorfab: design tensor accelerators and run real models on them.

The package itself imports nothing heavy: :func:`open_device` (from
:mod:`tensorfab.isa.device`) is imported on first use, so ``import tensorfab`` stays as
quick as reading its version.
"""

#: (``typing.TYPE_CHECKING`` without importing typing, which would double the import time)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from tensorfab.isa.device import open_device

__version__ = "0.1.0"

__all__ = ["__version__", "open_device"]


def __getattr__(name: str) -> object:
    """The top-level API imported on first use (:pep:`562`): ``open_device``."""
    if name == "open_device":
        from tensorfab.isa.device import open_device

        return open_device
    raise AttributeError(f"module 'tensorfab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
