"""The device-memory plan of a model: every accelerator program of a
:class:`~.interpreter.GraphProgram` placed once in one device DRAM, with activation
buffers shared between consecutive programs.

Layout of the device memory::

    0              static area: each program's instructions, micro-ops and constant
                   segments (weights, biases, requantization records), written once
    static_bytes   activation area: buffers reused by liveness (greedy by size, a
                   hill climb when that stays above the lower bound: .arena_plan)

An accelerator program's output is a buffer live from its run to its last reader. A
program whose input is another program's output, with the same shape and dtype (the
blocked layout they share), reads that buffer in place: the activation never leaves the
device (no host round trip). Any other input gets a buffer of its own, written by the
host just before the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tensorfab.isa import HwConfig, Program, TensorfabError
from tensorfab.isa.placement import place_program, placement_alignment

from .accel_contract import accel_nodes, decode_program, program_blob
from .arena_plan import ArenaPlan, LiveBuffer, plan_arena
from .graph_program import GraphProgram

__all__ = ["Buffer", "MemoryPlan", "MemoryPlanError", "OutOfDeviceMemory", "PlacedProgram",
           "plan_memory"]


class MemoryPlanError(TensorfabError):
    """A model whose accelerator programs cannot share one device memory (names why)."""


class OutOfDeviceMemory(MemoryPlanError):
    """A plan larger than the configuration's address space.

    Attributes
    ----------
    needed : int
        Bytes of device memory the model needs (static area + activation area).
    available : int
        Bytes the address space holds.
    """

    def __init__(self, message: str, needed: int, available: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available


@dataclass(frozen=True)
class Buffer:
    """An activation buffer: bytes ``[addr, addr + nbytes)`` live from node ``first``
    to node ``last`` (indices into the program's nodes)."""

    addr: int
    nbytes: int
    first: int
    last: int


@dataclass(frozen=True)
class PlacedProgram:
    """One ``accel.program`` node in device memory.

    Attributes
    ----------
    node : int
        Index of the node in the :class:`GraphProgram`.
    program : Program
        The program placed at its addresses.
    input : Buffer
        Where its input segment is.
    output : Buffer
        Where its output segment is.
    input_on_device : bool
        Whether the input is another program's output buffer (nothing to write).
    input_segment, output_segment : str
        The program's segments for its input and its output.
    extra_on_device : bool
        Whether its second input (a residual add's, ``extra_input_segment``) is another
        program's output buffer (nothing to write).
    """

    node: int
    program: Program
    input: Buffer
    output: Buffer
    input_on_device: bool
    input_segment: str
    output_segment: str
    extra_on_device: bool = False


@dataclass
class MemoryPlan:
    """Where a model's accelerator programs and activations live in device memory.

    Attributes
    ----------
    config : HwConfig
        The accelerator configuration of every program.
    programs : dict[int, PlacedProgram]
        By node index.
    static : list[tuple[int, numpy.ndarray]]
        ``(address, bytes)`` written once when the model is loaded.
    static_bytes : int
        Size of the static area (programs and weights).
    size : int
        Bytes of device memory the model needs.
    activations : ArenaPlan
        The activation area's plan (:func:`~.arena_plan.plan_arena`: greedy by size,
        hill-climb fallback), with its naive sum and lower bound.
    """

    config: HwConfig
    programs: dict[int, PlacedProgram]
    static: list[tuple[int, np.ndarray]] = field(default_factory=list)
    static_bytes: int = 0
    size: int = 0
    activations: ArenaPlan | None = None

    @property
    def activation_bytes(self) -> int:
        """Peak size of the activation area."""
        return self.size - self.static_bytes

    @property
    def on_device_inputs(self) -> int:
        """Programs whose input never leaves the device."""
        return sum(p.input_on_device for p in self.programs.values())

    def text(self) -> str:
        """The plan as a short table (``tensorfab inspect`` prints it)."""
        lines = [f"device memory ({self.config.name}): {self.size} bytes = "
                 f"{self.static_bytes} static (programs, weights) + "
                 f"{self.activation_bytes} activations"]
        for k, p in self.programs.items():
            src = "device" if p.input_on_device else "host"
            lines.append(f"  node {k}: program @{p.program.insn_base:#x}, input "
                         f"@{p.input.addr:#x} ({p.input.nbytes} B, from {src}), output "
                         f"@{p.output.addr:#x} ({p.output.nbytes} B, live to node "
                         f"{p.output.last})")
        return "\n".join(lines) + "\n"


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def plan_memory(program: GraphProgram,
                programs: Mapping[int, Program] | None = None,
                activations: ArenaPlan | None = None) -> MemoryPlan | None:
    """The memory plan of ``program``'s ``accel.program`` nodes (None if it has none).

    ``programs``: the nodes' decoded programs by node index, when the caller has them
    (a :class:`~.loaded_model.LoadedModel` decodes each once); else decoded here.
    ``activations``: the activation area's plan made ahead of time (stored in the
    ``.tfm``'s executable), checked and used instead of planning it here.

    Raises
    ------
    MemoryPlanError
        Programs for different configurations, a program that cannot be placed, or
        ``activations`` that do not place this model's buffers.
    OutOfDeviceMemory
        A plan larger than the configuration's address space.
    """
    accel = list(accel_nodes(program))
    if not accel:
        return None
    if programs is None:
        programs = {k: decode_program(program_blob(program, k)) for k, _ in accel}
    configs = {p.config for p in programs.values()}
    if len(configs) != 1:
        raise MemoryPlanError("the model's accelerator programs are for configs "
                              f"{sorted(c.name for c in configs)}; one device memory "
                              "serves one config")
    cfg = configs.pop()
    align = placement_alignment(cfg)
    last_use: dict[int, int] = {}
    end = len(program.nodes)
    for k, node in enumerate(program.nodes):
        for s in node.inputs:
            last_use[s] = k
        if node.op in ("tuple", "tuple_get_item"):  # values escape into a tuple
            for s in node.inputs:
                last_use[s] = end
    last_use[program.output] = end

    # a residual add's second input read in place from its producer's output buffer
    producer = {n.output: k for k, n in accel}
    extra_src: dict[int, int] = {}
    for k, node in accel:
        seg = node.attrs.get("extra_input_segment")
        src = producer.get(node.inputs[2]) if seg and len(node.inputs) == 3 else None
        if src is not None:
            out = programs[src].segment(program.nodes[src].attrs["output_segment"])
            b = programs[k].segment(seg)
            if (out.shape, out.dtype) == (b.shape, b.dtype):
                extra_src[k] = src

    # static area: everything but the activation segments, in node order
    static: list[tuple[int, np.ndarray]] = []
    addresses: dict[int, dict[str, int]] = {}
    pos = 0
    for k, node in accel:
        p, attrs = programs[k], node.attrs
        lay = p.layout()
        addresses[k] = {}
        for name in ["insns", "uops", *(s.name for s in p.segments)]:
            if name in (attrs["input_segment"], attrs["output_segment"]) or \
                    (k in extra_src and name == attrs["extra_input_segment"]):
                continue
            r = lay[name]
            addresses[k][name] = pos
            if r.nbytes and name != "insns":  # placement rewrites the instructions
                data = p.region_bytes(name)
                static.append((pos, np.zeros(r.nbytes, np.uint8) if data is None else data))
            pos = _align(pos + r.nbytes, align)
    static_bytes = pos

    # activation buffers: each output, and each input not read in place
    requests: list[tuple[int, int, int]] = []
    owner: list[tuple[int, str]] = []  # (node, "in" | "out")
    shares: dict[int, int] = {}  # consumer node -> producer node
    for k, node in accel:
        p, attrs = programs[k], node.attrs
        src = producer.get(node.inputs[0])
        seg_in = p.segment(attrs["input_segment"])
        if src is not None:
            out = programs[src].segment(program.nodes[src].attrs["output_segment"])
            if (out.shape, out.dtype) == (seg_in.shape, seg_in.dtype):
                shares[k] = src
        if k not in shares:
            requests.append((seg_in.nbytes, k, k))
            owner.append((k, "in"))
        seg_out = p.segment(attrs["output_segment"])
        requests.append((seg_out.nbytes, k, last_use.get(node.output, k)))
        owner.append((k, "out"))
    live = [LiveBuffer(i, n, first, last) for i, (n, first, last) in enumerate(requests)]
    if activations is None:
        activations = plan_arena(live, align)
    else:
        why = activations.conflict(live, align)
        if why is not None or len(activations.offsets) != len(live):
            raise MemoryPlanError("the stored device memory plan does not fit the model: "
                                  f"{why or 'another number of buffers'}")
    rel = [activations.offsets[i] for i in range(len(requests))]
    area = activations.peak
    size = static_bytes + area
    if size > cfg.dram_bytes:
        raise OutOfDeviceMemory(f"the model needs {size} bytes of device memory, more than "
                                f"the {cfg.dram_addr_width}-bit address space of {cfg.name}",
                                size, cfg.dram_bytes)
    buffers: dict[tuple[int, str], Buffer] = {
        key: Buffer(static_bytes + a, req[0], req[1], req[2])
        for key, a, req in zip(owner, rel, requests, strict=True)}

    placed: dict[int, PlacedProgram] = {}
    for k, node in accel:
        attrs = node.attrs
        inp = buffers[(shares[k], "out")] if k in shares else buffers[(k, "in")]
        out = buffers[(k, "out")]
        where = {**addresses[k], attrs["input_segment"]: inp.addr,
                 attrs["output_segment"]: out.addr}
        if k in extra_src:
            where[attrs["extra_input_segment"]] = buffers[(extra_src[k], "out")].addr
        try:
            placed_program = place_program(programs[k], where)
        except TensorfabError as e:
            raise MemoryPlanError(f"node {k} ({attrs.get('layer') or node.op}): {e}") from None
        static.append((placed_program.insn_base, placed_program.encode_insns()))
        placed[k] = PlacedProgram(k, placed_program, inp, out, k in shares,
                                  attrs["input_segment"], attrs["output_segment"],
                                  k in extra_src)
    return MemoryPlan(cfg, placed, static, static_bytes, size, activations)
