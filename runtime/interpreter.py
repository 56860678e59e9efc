"""Running a graph given as data once: :func:`run_program`, the program loaded
(:class:`~.loaded_model.LoadedModel`) and run by the VM (:mod:`.vm`, the runtime's one
dispatch loop). The program's types (:class:`GraphProgram`, :class:`Node`,
:class:`InputSpec`, the errors) live in :mod:`.graph_program` and are named here too,
where the compiler and the tests have always imported them from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .graph_program import (
    GraphProgram,
    InputSpec,
    Node,
    ProgramFormatError,
    RuntimeInputError,
    input_values,
)
from .loaded_model import LoadedModel

__all__ = ["GraphProgram", "InputSpec", "Node", "ProgramFormatError", "RuntimeInputError",
           "input_values", "run_program"]


def run_program(program: GraphProgram,
                inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> Any:
    """Evaluate ``program`` on ``inputs`` (by name, or in order): the program loaded
    (:class:`~.loaded_model.LoadedModel`, accelerator programs on each node's
    ``executor``) and run once by the VM, the one dispatch loop.

    Returns
    -------
    numpy.ndarray or tuple
        The output value (a tuple for a tuple-valued program).

    Raises
    ------
    RuntimeInputError
        Inputs that do not match the program's (see :func:`input_values`).
    """
    with LoadedModel(program) as model:
        return model.run(inputs)
