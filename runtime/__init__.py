"""tensorfab.runtime: runs compiled models without the compiler (docs/runtime.md).

The compiler lowers a graph-IR function to a
:class:`~tensorfab.runtime.interpreter.GraphProgram` (a list of kernel calls) that
:func:`~tensorfab.runtime.interpreter.run_program` evaluates with the numpy kernels of
:mod:`tensorfab.runtime.kernels`; a :class:`~tensorfab.runtime.loaded_model.LoadedModel`
(or a :class:`~tensorfab.runtime.resident.ResidentModel`, placed in device memory) runs
its accelerator programs on a Device, and the VM (:mod:`tensorfab.runtime.vm`) runs it
as an executable with accelerator futures and, for static shapes, an ahead-of-time
memory plan. The ``accel.program`` op is declared in :mod:`.accel_contract`.
"""
