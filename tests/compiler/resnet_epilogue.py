"""The requantizing epilogue the ResNet-18 layer tests compile with (fsim and RTL)."""

from __future__ import annotations

import numpy as np

from tensorfab.compiler import Epilogue, accumulator_bound, quantize_multiplier


def requant_epilogue(reduction: int) -> Epilogue:
    """Requantize and ReLU for a reduction of ``reduction`` int8 products.

    The test data (``numpy_reference.resnet_conv_case``) is int8 activations and
    weights of about N(0, 40); the scale maps ±4σ of the sum into int8.
    """
    sigma = 40 * 40 * np.sqrt(reduction)
    mult, shift = quantize_multiplier(127 / (4 * sigma), accumulator_bound(reduction, 1 << 16))
    return Epilogue(requant=(mult, shift), relu=True)
