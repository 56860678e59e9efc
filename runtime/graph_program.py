"""Graphs given as data: a list of kernel calls over numbered slots, and their inputs.

The compiler lowers a graph-IR function to a :class:`GraphProgram`: each :class:`Node`
calls a kernel of :data:`~tensorfab.runtime.kernels.KERNELS` (two pseudo-ops shape
tuples: ``tuple`` packs its inputs, ``tuple_get_item``, attribute ``index``, unpacks
one); :func:`input_values` checks inputs against the declared shapes and dtypes. The VM
(:mod:`.vm`) runs it; :func:`~.interpreter.run_program` once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorfab.isa import TensorfabError

from .kernels import KERNELS

if TYPE_CHECKING:
    from .vm_executable import Executable


class RuntimeInputError(TensorfabError):
    """Inputs that do not match a program's declared inputs (names which and how)."""


class ProgramFormatError(TensorfabError):
    """A :class:`GraphProgram` that refers to unknown kernels or undefined slots."""


@dataclass(frozen=True)
class InputSpec:
    """A program input: name, slot, dims (ints or symbol names) and dtype name."""

    name: str
    slot: int
    shape: tuple[int | str, ...]
    dtype: str


@dataclass(frozen=True)
class Node:
    """One kernel call: ``op`` on the values in ``inputs`` with ``attrs`` into ``output``."""

    op: str
    inputs: tuple[int, ...]
    attrs: Mapping[str, Any]
    output: int
    name: str = ""


@dataclass
class GraphProgram:
    """A graph as data: inputs, constants and nodes over slots, and the output slot.

    ``value_types`` gives the shape and dtype name of node outputs whose type the
    compiler knew with fixed dims (by slot): what the static memory plan sizes.
    ``executable`` is the VM executable stored with it (a ``.tfm``'s ``vm.json``,
    :func:`~.artifact.load_model`); None: built from the graph when it runs.
    """

    inputs: list[InputSpec]
    constants: dict[int, np.ndarray]
    nodes: list[Node]
    output: int
    num_slots: int = field(default=0)
    value_types: dict[int, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    executable: Executable | None = field(default=None, compare=False, repr=False)

    def validate(self) -> None:
        """Raise :class:`ProgramFormatError` on an unknown op or an undefined slot."""
        defined = {i.slot for i in self.inputs} | set(self.constants)
        for k, node in enumerate(self.nodes):
            if node.op not in KERNELS and node.op not in ("tuple", "tuple_get_item"):
                raise ProgramFormatError(f"node {k} ({node.name or node.op}): no CPU kernel "
                                         f"for {node.op!r}")
            for s in node.inputs:
                if s not in defined:
                    raise ProgramFormatError(f"node {k} ({node.op}) reads slot {s} before "
                                             "it is written")
            defined.add(node.output)
        if self.output not in defined:
            raise ProgramFormatError(f"output slot {self.output} is never written")


def _check_inputs(program: GraphProgram, values: Sequence[np.ndarray]) -> dict[str, int]:
    """Check the inputs against the declared specs; return the symbols' values."""
    symbols: dict[str, int] = {}
    for spec, v in zip(program.inputs, values, strict=True):
        if str(v.dtype) != spec.dtype and not (spec.dtype == "bool" and v.dtype == np.bool_):
            raise RuntimeInputError(f"input {spec.name!r}: dtype {v.dtype}, expected "
                                    f"{spec.dtype}")
        if v.ndim != len(spec.shape):
            raise RuntimeInputError(f"input {spec.name!r}: shape {v.shape}, expected "
                                    f"{spec.shape}")
        for axis, (got, want) in enumerate(zip(v.shape, spec.shape, strict=True)):
            if isinstance(want, str):
                if symbols.setdefault(want, got) != got:
                    raise RuntimeInputError(f"input {spec.name!r}: dim {axis} ({want}) is "
                                            f"{got}, another input has {want}="
                                            f"{symbols[want]}")
            elif got != want:
                raise RuntimeInputError(f"input {spec.name!r}: dim {axis} is {got}, "
                                        f"expected {want} (shape {spec.shape})")
    return symbols


def input_values(program: GraphProgram,
                 inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
    """``inputs`` (by name, or in order) as arrays in the program's input order, checked
    against the declared shapes and dtypes; a NaN or inf in a float input that the model
    quantizes (read by ``qnn.quantize``: int8 has neither) is refused too.

    Raises
    ------
    RuntimeInputError
        Names the input and what is wrong.
    """
    if isinstance(inputs, Mapping):
        names = [i.name for i in program.inputs]
        missing = [n for n in names if n not in inputs]
        extra = [n for n in inputs if n not in names]
        if missing or extra:
            raise RuntimeInputError(f"inputs missing: {missing}, unknown: {extra}; the "
                                    f"program takes {names}")
        values = [np.asarray(inputs[n]) for n in names]
    else:
        values = [np.asarray(v) for v in inputs]
        if len(values) != len(program.inputs):
            raise RuntimeInputError(f"{len(values)} inputs given, the program takes "
                                    f"{len(program.inputs)}")
    _check_inputs(program, values)
    quantized = {s for n in program.nodes if n.op == "qnn.quantize" for s in n.inputs[:1]}
    for spec, v in zip(program.inputs, values, strict=True):
        if spec.slot in quantized and v.dtype.kind == "f" and not np.isfinite(v).all():
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(v))[0])
            raise RuntimeInputError(f"input {spec.name!r}: {v[bad]} at index {bad}; a "
                                    "quantized model takes finite values only (int8 has "
                                    "no NaN or inf)")
    return values
