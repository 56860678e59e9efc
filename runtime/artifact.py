"""The ``.tfm`` model file: a lowered :class:`GraphProgram` saved for the runtime.

A ``.tfm`` is a zip archive holding ``graph.json`` (format name and version, the inputs
with their shapes and dtypes, the nodes with their attributes, the output slot),
``constants.npz`` (one array per constant slot; accelerator programs are uint8 arrays of
their TFABPROG bytes), ``vm.json`` (version 2: the VM executable,
:class:`~.vm_executable.Executable`, whose instructions name constants by slot and
accelerator programs by node) and, from ``tensorfab compile``, ``graph.txt``: the planned
graph in the IR's text form, its large constants written ``meta[c<slot>]`` (the arrays of
``constants.npz``). Version 1 files (no ``vm.json``) still load; their executable is
built from the graph when asked for (:func:`load_executable`). :func:`load_model` needs
nothing but the runtime, so a compiled model runs without the compiler;
:func:`load_graph_text` reads the text (the compiler's parser turns it back into the
graph).
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.isa import TensorfabError

from .accel_contract import ACCEL_PROGRAM, accel_nodes, decode_program
from .graph_program import GraphProgram, InputSpec, Node, ProgramFormatError
from .overlap_order import overlap_order
from .static_plan import plan_host_arena
from .vm_build import build_executable
from .vm_executable import Executable

FORMAT = "tensorfab-model"
VERSION = 2
#: The versions :func:`load_model` reads.
READABLE_VERSIONS = (1, 2)


class ModelFileError(TensorfabError):
    """A ``.tfm`` file that cannot be read (names the file and what is wrong)."""


#: The keys graph.json must have, with their JSON types: at its top level, in each input
#: and in each node (a node's ``name`` may be left out).
GRAPH_KEYS = {"inputs": list, "constants": list, "nodes": list, "output": int}
INPUT_KEYS = {"name": str, "slot": int, "shape": list, "dtype": str}
NODE_KEYS = {"op": str, "inputs": list, "attrs": dict, "output": int}


def _check_keys(obj: Any, keys: dict[str, type], where: str) -> None:
    """Refuse a graph.json object without one of ``keys`` or with one of another type,
    naming ``where`` (``node 3 (conv2d)``) and the key.

    Raises
    ------
    ProgramFormatError
    """
    at = f"{where}: " if where else ""
    if not isinstance(obj, dict):
        raise ProgramFormatError(f"{at}not a JSON object")
    for key, kind in keys.items():
        if key not in obj:
            raise ProgramFormatError(f"{at}missing key {key!r}")
        if not isinstance(obj[key], kind) or (kind is int and isinstance(obj[key], bool)):
            raise ProgramFormatError(f"{at}{key} = {obj[key]!r} is not a {kind.__name__}")


def _check_graph(graph: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Every key :func:`load_model` reads from ``graph.json``, of its type, each input's
    and node's named by its index (and the node's name or op); every constant slot in
    ``arrays`` (constants.npz)."""
    _check_keys(graph, GRAPH_KEYS, "")
    for k, i in enumerate(graph["inputs"]):
        _check_keys(i, INPUT_KEYS, f"input {k}")
        _check_dtype(i["dtype"], f"input {k} ({i['name']!r})")
    for k, n in enumerate(graph["nodes"]):
        label = (n.get("name") or n.get("op")) if isinstance(n, dict) else None
        _check_keys(n, NODE_KEYS, f"node {k}{f' ({label})' if label else ''}")
    for slot in graph["constants"]:
        if f"c{slot}" not in arrays:
            raise ProgramFormatError(f"constant slot {slot!r} is not in constants.npz")
    _check_value_types(graph.get("value_types", {}))


def _check_value_types(types: Any) -> None:
    """Refuse a ``value_types`` that is not ``{"slot": [shape, dtype]}``, naming the
    entry.

    Raises
    ------
    ProgramFormatError
    """
    if not isinstance(types, dict):
        raise ProgramFormatError(f"value_types = {types!r} is not a JSON object")
    for key, entry in types.items():
        at = f"value_types[{key!r}]"
        if not key.lstrip("-").isdigit():
            raise ProgramFormatError(f"{at}: the key is not a slot number")
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)
                and isinstance(entry[1], str)):
            raise ProgramFormatError(f"{at} = {entry!r} is not [shape, dtype] (a list of "
                                     "dims and a dtype name)")
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in entry[0]):
            raise ProgramFormatError(f"{at}: shape {entry[0]!r} is not a list of integers")
        _check_dtype(entry[1], at)


def _check_dtype(name: str, where: str) -> None:
    """Refuse a dtype name numpy does not know (``float99``), naming ``where``.

    Raises
    ------
    ProgramFormatError
    """
    try:
        np.dtype(name)
    except TypeError:
        raise ProgramFormatError(f"{where}: dtype {name!r} is not a dtype name (int8, "
                                 "float32, ...)") from None


def _tuples(v: Any) -> Any:
    """JSON lists back to the tuples attributes hold."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def save_model(program: GraphProgram, path: str | os.PathLike,
               graph_text: str | None = None, executable: Executable | None = None) -> None:
    """Write ``program`` as a ``.tfm`` file, with the planned graph's ``graph_text``
    when given, and its VM ``executable`` (when not given, the program's own, else built
    from ``program`` in :func:`~.overlap_order.overlap_order`, so that a loaded model's
    futures overlap independent host work, with its static host memory plan over that
    order when the inputs' shapes are fixed). The file is replaced only once it is
    complete: an error or Ctrl-C while writing leaves the one that was there."""
    program.validate()
    if executable is None:
        executable = program.executable
    if executable is None:  # in the overlap order, with the host plan over that order
        # when every input's shape is fixed
        static = all(isinstance(d, int) for i in program.inputs for d in i.shape)
        order = overlap_order(program)
        executable = build_executable(
            program, plan_host_arena(program, order=order) if static else None, order)
    executable.validate()
    graph = {
        "format": FORMAT,
        "version": VERSION,
        "inputs": [{"name": i.name, "slot": i.slot, "shape": list(i.shape), "dtype": i.dtype}
                   for i in program.inputs],
        "nodes": [{"op": n.op, "inputs": list(n.inputs), "attrs": n.attrs,
                   "output": n.output, "name": n.name} for n in program.nodes],
        "constants": sorted(program.constants),
        "output": program.output,
        "num_slots": program.num_slots,
        "value_types": {str(k): [list(s), d] for k, (s, d) in program.value_types.items()},
    }
    arrays = io.BytesIO()
    np.savez(arrays, **{f"c{slot}": np.asarray(v) for slot, v in program.constants.items()})
    # written beside it and moved into place: an error or Ctrl-C while writing leaves
    # the file that was there (a model compiled before) as it was
    tmp = Path(path).with_name(f".{Path(path).name}.tmp{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("graph.json", json.dumps(graph, indent=1))
            z.writestr("constants.npz", arrays.getvalue())
            z.writestr("vm.json", json.dumps(executable.to_json(), indent=None,
                                             default=_json_default))
            if graph_text is not None:
                z.writestr("graph.txt", graph_text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def is_model_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a ``.tfm`` file of any version (a zip archive whose
    ``graph.json`` names :data:`FORMAT`): what ``tensorfab compile`` may overwrite."""
    try:
        with zipfile.ZipFile(path) as z:
            graph = json.loads(z.read("graph.json"))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError):
        return False
    return isinstance(graph, dict) and graph.get("format") == FORMAT


def load_model(path: str | os.PathLike) -> GraphProgram:
    """Read a ``.tfm`` file into a :class:`GraphProgram` (validated).

    Raises
    ------
    ModelFileError
        A missing or unreadable file, another format or version, or a malformed graph.
    """
    where = str(path)
    try:
        with zipfile.ZipFile(path) as z:
            graph = json.loads(z.read("graph.json"))
            if not isinstance(graph, dict):
                raise ModelFileError(f"{where}: graph.json is not a JSON object")
            if graph.get("format") != FORMAT or graph.get("version") not in \
                    READABLE_VERSIONS:
                raise ModelFileError(f"{where}: format {graph.get('format')!r} version "
                                     f"{graph.get('version')!r}; this runtime reads "
                                     f"{FORMAT!r} versions "
                                     f"{', '.join(map(str, READABLE_VERSIONS))}")
            with np.load(io.BytesIO(z.read("constants.npz"))) as npz:
                arrays = {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise ModelFileError(f"{where}: no such file") from None
    except (zipfile.BadZipFile, KeyError, ValueError, EOFError, OSError) as e:
        raise ModelFileError(f"{where}: not a tensorfab model file: {e}") from None
    try:
        _check_graph(graph, arrays)
        program = GraphProgram(
            inputs=[InputSpec(i["name"], i["slot"], tuple(i["shape"]), i["dtype"])
                    for i in graph["inputs"]],
            constants={slot: arrays[f"c{slot}"] for slot in graph["constants"]},
            nodes=[Node(n["op"], tuple(n["inputs"]),
                        {k: _tuples(v) for k, v in n["attrs"].items()}, n["output"],
                        n.get("name", "")) for n in graph["nodes"]],
            output=graph["output"], num_slots=graph.get("num_slots", 0),
            value_types={int(k): (tuple(s), d)
                         for k, (s, d) in graph.get("value_types", {}).items()})
        program.validate()
    except (KeyError, TypeError, TensorfabError) as e:
        raise ModelFileError(f"{where}: malformed graph: {e}") from None
    _check_accel_programs(program, where)
    if graph["version"] >= 2:  # version 1 has no executable: built when it runs
        program.executable = load_executable(path, program)
    return program


def load_executable(path: str | os.PathLike,
                    program: GraphProgram | None = None) -> Executable:
    """The VM executable of a ``.tfm`` file: the stored one (version 2), or one built
    from its graph (version 1; ``program``: the graph when loaded already).

    Raises
    ------
    ModelFileError
        A missing or unreadable file, or a malformed executable.
    """
    try:
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("vm.json")) if "vm.json" in z.namelist() else None
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise ModelFileError(f"{path}: not a tensorfab model file: {e}") from None
    if data is None:
        return build_executable(program if program is not None else load_model(path))
    try:
        return Executable.from_json(data)
    except TensorfabError as e:
        raise ModelFileError(f"{path}: vm.json: {e}") from None


def _json_default(v: Any) -> Any:
    """numpy scalars in attributes as Python numbers."""
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON data")


#: How ``graph.txt`` starts a comment line naming a convolution left on the CPU and why.
CPU_CONVOLUTION_COMMENT = "// on the CPU: "


def load_graph_text(path: str | os.PathLike) -> str | None:
    """The planned graph's text form stored in a ``.tfm`` file (None if it has none).

    Raises
    ------
    ModelFileError
        A missing or unreadable file.
    """
    try:
        with zipfile.ZipFile(path) as z:
            if "graph.txt" not in z.namelist():
                return None
            return z.read("graph.txt").decode()
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, UnicodeDecodeError, OSError) as e:
        raise ModelFileError(f"{path}: not a tensorfab model file: {e}") from None


def _check_accel_programs(program: GraphProgram, where: str) -> None:
    """Decode every accelerator program now, so that a damaged one is reported with the
    file and the node rather than in the middle of a run."""
    for k, node in accel_nodes(program):
        blob = program.constants.get(node.inputs[1]) if len(node.inputs) in (2, 3) else None
        if blob is None:
            raise ModelFileError(f"{where}: node {k} ({ACCEL_PROGRAM}) has no program bytes")
        try:
            decode_program(blob)
        except TensorfabError as e:
            raise ModelFileError(f"{where}: node {k} ({node.attrs.get('layer') or node.op}):"
                                 f" damaged accelerator program: {e}") from None
