"""tensorfab.runtime: CPU kernels in numpy and an interpreter of graphs given as data.

The runtime never imports :mod:`tensorfab.compiler`: the compiler lowers a graph-IR
function to a :class:`~tensorfab.runtime.interpreter.GraphProgram` (a list of kernel
calls), which :func:`~tensorfab.runtime.interpreter.run_program` evaluates with the
kernels of :mod:`tensorfab.runtime.kernels`.
"""
