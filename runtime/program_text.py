"""A readable listing of a :class:`~.interpreter.GraphProgram` (what ``tensorfab inspect
model.tfm`` prints): one line per node with the device it runs on.

```
%0: Tensor[(16, 1, 8, 8), float32]                       // input image
%3 = qnn.quantize(%0, c1: float32[], c2: int8[], axis=1, out_dtype="int8")  @cpu
%7 = accel.program(%6, program(tiny, 37 insns), layer="conv2d_integer+add+...")  @accel(tiny)
return %17
```

Constant arguments read ``c<slot>: dtype[shape]``, an accelerator program's bytes
``program(<config>, <n> insns)``, long attribute lists are shortened.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .accel_contract import ACCEL_PROGRAM, decode_program
from .graph_program import GraphProgram, Node

__all__ = ["program_text"]

#: Attribute lists longer than this print as their length.
_LONG = 8
#: Attributes left out of the listing (their value is the same for every node).
_QUIET = {"executor", "input_segment", "output_segment"}


def _attr(v: Any) -> str:
    if isinstance(v, tuple | list):
        if len(v) > _LONG:
            return f"[{len(v)} values]"
        return "[" + ", ".join(_attr(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def _arg(program: GraphProgram, node: Node, k: int, slot: int) -> str:
    if slot not in program.constants:
        return f"%{slot}"
    c = np.asarray(program.constants[slot])
    if node.op == ACCEL_PROGRAM and k == 1:
        p = decode_program(c)
        return f"program({p.config.name}, {len(p.insns)} insns)"
    return f"c{slot}: {c.dtype}[{', '.join(map(str, c.shape))}]"


def program_text(program: GraphProgram) -> str:
    """The listing of ``program`` (see the module docstring)."""
    lines = [f"%{i.slot}: Tensor[{tuple(i.shape)}, {i.dtype}]  // input {i.name}"
             for i in program.inputs]
    for node in program.nodes:
        args = [_arg(program, node, k, s) for k, s in enumerate(node.inputs)]
        args += [f"{k}={_attr(v)}" for k, v in node.attrs.items()
                 if k not in _QUIET and v != ""]
        device = "@cpu"
        if node.op == ACCEL_PROGRAM:
            device = f"@accel({decode_program(program.constants[node.inputs[1]]).config.name})"
        lines.append(f"%{node.output} = {node.op}({', '.join(args)})  {device}")
    lines.append(f"return %{program.output}")
    return "\n".join(lines) + "\n"
