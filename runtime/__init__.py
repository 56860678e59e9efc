"""tensorfab.runtime: runs compiled models without the compiler (docs/runtime.md).

The compiler lowers a graph-IR function to a
:class:`~tensorfab.runtime.graph_program.GraphProgram` (a list of kernel calls over the
numpy kernels of :mod:`tensorfab.runtime.kernels`). The VM (:mod:`tensorfab.runtime.vm`)
is the one executor: a :class:`~tensorfab.runtime.loaded_model.LoadedModel` (or a
:class:`~tensorfab.runtime.resident.ResidentModel`, placed in device memory) runs the
program's executable on it, accelerator programs on a Device (as futures when asked),
for static shapes with an ahead-of-time memory plan;
:func:`~tensorfab.runtime.interpreter.run_program` runs a program once. The
``accel.program`` op is declared in :mod:`.accel_contract`.
"""
