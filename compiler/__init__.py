"""tensorfab.compiler: from operators and models to accelerator programs.

Subpackages
-----------
tensor
    the tensor-level compiler: one int8 operator (:func:`conv2d`, :func:`dense`,
    :func:`batch_matmul`) with a fused :class:`Epilogue` becomes a
    :class:`~tensorfab.isa.Program` (schedules, tensorization, tokens, tile search).
graph
    the typed graph IR, its text form, passes and device planning.
frontend
    model importers (ONNX).

The tensor-level compiler's public names are re-exported here.
"""

from .tensor import *  # noqa: F403
from .tensor import __all__  # noqa: F401
