"""tensorfab: design tensor accelerators and run real models on them."""

__version__ = "0.1.0"
