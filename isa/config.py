"""Accelerator configuration: every hardware parameter in one frozen, validated dataclass."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import TensorfabError


class ConfigError(TensorfabError, ValueError):
    """An invalid :class:`HwConfig`: the message names the field and the rule it breaks."""

    def __init__(self, field_name: str, value: Any, rule: str) -> None:
        self.field = field_name
        self.value = value
        self.rule = rule
        super().__init__(f"HwConfig.{field_name} = {value!r}: {rule}")


def _is_pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def log2(n: int) -> int:
    """Exact base-2 logarithm of a power of two."""
    if not _is_pow2(n):
        raise ValueError(f"{n} is not a power of two")
    return n.bit_length() - 1


def _object_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members as a dict, refusing a key given twice (a
    :class:`ConfigError` naming it and both values)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(key, value, f"given twice (first as {out[key]!r}); give "
                              "each field once")
        out[key] = value
    return out


@dataclass(frozen=True)
class HwConfig:
    """Parameters of one accelerator instance.

    Buffer depths count entries (rows), each entry being one tensor tile:
    input entries hold ``batch × block_in`` int8 values, weight entries
    ``block_out × block_in`` int8 values, accumulator entries ``batch × block_out``
    int32 values and micro-op entries one micro-op.

    Parameters
    ----------
    name : str
        Preset name or a user label; informational only.
    batch, block_in, block_out : int
        GEMM core shape: ``batch × block_in × block_out`` MACs per cycle.
    inp_width, wgt_width, acc_width, out_width : int
        Element widths in bits (signed). Only 8/8/32/8 is supported.
    inp_depth, wgt_depth, acc_depth, uop_depth : int
        Entries in the on-chip input, weight, accumulator and micro-op buffers.
    dram_addr_width : int
        Width of DRAM byte addresses; DRAM holds at most ``2**dram_addr_width`` bytes.
    mem_bus_width : int
        Width of the memory bus data path in bits.
    dep_queue_depth : int
        Capacity of each of the four dependency-token queues.
    cmd_queue_depth : int
        Capacity of each engine's instruction (command) queue.
    clock_mhz : float
        Target clock frequency.
    perf_counters : bool
        The core keeps all twelve 32-bit performance counters. Without them (False: a
        small FPGA's config) it keeps CYCLES alone (a run's hardware time); the
        engines' busy and stall cycles, GEMM_BUSY, ALU_BUSY and the retired
        instructions read 0, and a run's counters are then the program's own counts.
    block_ram_fifos : bool
        The fetch unit's instruction buffer and the memory arbiter's two
        outstanding-command FIFOs keep their entries in memories with a synchronous
        read, placed in block RAM (an iCE40 has no LUT RAM: 8 EBRs hold the 8 words
        of 128 bits, one EBR each FIFO of the arbiter, instead of flip-flops): the
        fetch unit's stage register and the FIFOs' heads are the memories' read
        registers. False (the default): FIFOs with an asynchronous read (LUT RAM on
        ECP5) and registers of their own. The two run every program in the same
        cycles.
    fast_reset : bool
        The compute engine zeroes the accumulators of a resetting GEMM many entries
        per cycle (a fast reset, through one zero flag per accumulator entry) when its
        fields allow (:func:`~tensorfab.isa.insn.is_fast_reset`). False (a small
        FPGA's config): every GEMM goes through the micro-op pipeline, one entry per
        cycle; the results are the same, the cycles of such GEMMs more, and the core
        has no zero flags.
    sequential_multiplier : bool
        The vector ALU multiplies (MUL, MULHI, REQUANT) with one 16×16 multiplier per
        lane over :data:`~tensorfab.isa.formats.SEQUENTIAL_MULTIPLY_CYCLES` cycles
        instead of four multipliers per lane in one (a small FPGA's config: a quarter
        of the ALU's DSP blocks). The results are the same; a multiplying ALU
        instruction's micro-ops then pass the issue that many cycles apart (a
        dependent one :data:`~tensorfab.isa.formats.SEQUENTIAL_MULTIPLY_DISTANCE`
        after the one it reads) and its pipeline drains that many cycles later, less
        one. False (the default): a multiplying micro-op a cycle.
    vector_alu : bool
        The compute engine has the vector ALU (True, the default). False (a config for
        an FPGA too small for it, the iCEBreaker's ``up5k``): ALU instructions are not
        instructions of the config (``BAD_OPCODE``), and the STOREs requantize at any
        ``block_in`` (:func:`~tensorfab.isa.formats.requant_supported`): a
        convolution's epilogue is then its STOREs' REQUANT alone, and the compiler
        keeps every operator that needs the ALU on the CPU.
    """

    name: str = "custom"
    batch: int = 1
    block_in: int = 16
    block_out: int = 16
    inp_width: int = 8
    wgt_width: int = 8
    acc_width: int = 32
    out_width: int = 8
    inp_depth: int = 2048
    wgt_depth: int = 1024
    acc_depth: int = 2048
    uop_depth: int = 8192
    dram_addr_width: int = 32
    mem_bus_width: int = 64
    dep_queue_depth: int = 8
    cmd_queue_depth: int = 8
    clock_mhz: float = 100.0
    perf_counters: bool = True
    block_ram_fifos: bool = False
    fast_reset: bool = True
    sequential_multiplier: bool = False
    vector_alu: bool = True

    def __post_init__(self) -> None:
        for name in ("batch", "block_in", "block_out", "inp_depth", "wgt_depth",
                     "acc_depth", "uop_depth", "dep_queue_depth", "cmd_queue_depth"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(name, value, "must be an integer")
            if not _is_pow2(value):
                raise ConfigError(name, value, "must be a power of two")
        for name in ("batch", "block_in", "block_out"):
            if getattr(self, name) > 256:
                raise ConfigError(name, getattr(self, name), "must be at most 256")
        for name, want in (("inp_width", 8), ("wgt_width", 8), ("acc_width", 32),
                           ("out_width", 8)):
            if getattr(self, name) != want:
                raise ConfigError(name, getattr(self, name),
                                  f"only {want}-bit signed elements are supported")
        for name in ("inp_depth", "wgt_depth", "acc_depth", "uop_depth"):
            value = getattr(self, name)
            least = 4 if name == "acc_depth" else 2  # two rows of zero flags, 2 lanes each
            if not least <= value <= 1 << 16:
                raise ConfigError(name, value, f"must be between {least} and 65536 entries")
        if not 2 <= self.dep_queue_depth <= 1024:
            raise ConfigError("dep_queue_depth", self.dep_queue_depth,
                              "must be between 2 and 1024")
        if not 2 <= self.cmd_queue_depth <= 1024:
            raise ConfigError("cmd_queue_depth", self.cmd_queue_depth,
                              "must be between 2 and 1024")
        if not isinstance(self.dram_addr_width, int) or not 16 <= self.dram_addr_width <= 32:
            raise ConfigError("dram_addr_width", self.dram_addr_width,
                              "must be an integer between 16 and 32")
        bus = self.mem_bus_width
        if not isinstance(bus, int) or not _is_pow2(bus) or not 8 <= bus <= 1024:
            raise ConfigError("mem_bus_width", bus,
                              "must be a power of two between 8 and 1024 bits")
        smallest = min(self.inp_entry_bytes, self.wgt_entry_bytes, self.out_entry_bytes)
        if smallest % (bus // 8):
            raise ConfigError("mem_bus_width", bus,
                              f"must divide every tile: the smallest (input, weight or output "
                              f"entry) is {smallest * 8} bits")
        if not isinstance(self.clock_mhz, int | float) or not 0 < self.clock_mhz <= 2000:
            raise ConfigError("clock_mhz", self.clock_mhz, "must be in (0, 2000]")
        if not isinstance(self.perf_counters, bool):
            raise ConfigError("perf_counters", self.perf_counters, "must be true or false")
        for name in ("block_ram_fifos", "fast_reset", "sequential_multiplier", "vector_alu"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "must be true or false")
        if self.sequential_multiplier and not self.vector_alu:
            raise ConfigError("sequential_multiplier", True,
                              "needs the vector ALU (vector_alu is false)")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("name", self.name, "must be a non-empty string")

    # ----------------------------------------------------------------- derived values
    @property
    def inp_entry_bytes(self) -> int:
        """Bytes of one input-buffer entry (``batch × block_in`` int8)."""
        return self.batch * self.block_in * self.inp_width // 8

    @property
    def wgt_entry_bytes(self) -> int:
        """Bytes of one weight-buffer entry (``block_out × block_in`` int8)."""
        return self.block_out * self.block_in * self.wgt_width // 8

    @property
    def acc_entry_bytes(self) -> int:
        """Bytes of one accumulator entry (``batch × block_out`` int32)."""
        return self.batch * self.block_out * self.acc_width // 8

    @property
    def out_entry_bytes(self) -> int:
        """Bytes of one output entry in DRAM (``batch × block_out`` int8)."""
        return self.batch * self.block_out * self.out_width // 8

    @property
    def inp_bits(self) -> int:
        """Index width of the input buffer."""
        return log2(self.inp_depth)

    @property
    def wgt_bits(self) -> int:
        """Index width of the weight buffer."""
        return log2(self.wgt_depth)

    @property
    def acc_bits(self) -> int:
        """Index width of the accumulator buffer."""
        return log2(self.acc_depth)

    @property
    def uop_bits(self) -> int:
        """Index width of the micro-op buffer."""
        return log2(self.uop_depth)

    @property
    def src_bits(self) -> int:
        """Width of a micro-op's source index: an input index (GEMM) or an accumulator
        index (ALU), whichever is wider."""
        return max(self.inp_bits, self.acc_bits)

    @property
    def peak_macs_per_cycle(self) -> int:
        """MACs the GEMM core performs per cycle at one micro-op per cycle."""
        return self.batch * self.block_in * self.block_out

    @property
    def mem_bus_bytes(self) -> int:
        """Bytes per memory-bus beat."""
        return self.mem_bus_width // 8

    @property
    def dram_bytes(self) -> int:
        """Largest DRAM the address width can reach."""
        return 1 << self.dram_addr_width

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """Parameters as a plain dict (JSON-ready).

        The fields added after the first presets (:data:`OPTIONAL_FIELDS`) appear
        only when they differ from their defaults: a config of today's hardware has the
        JSON (and so the CRC that seeds random programs and names a bitstream's config)
        it had before the field existed; :meth:`from_dict` reads a missing one as its
        default.
        """
        out = dataclasses.asdict(self)
        for name, default in OPTIONAL_FIELDS.items():
            if out[name] == default:
                del out[name]
        return out

    def to_json(self) -> str:
        """Parameters as JSON text; :meth:`from_json` reads it back."""
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HwConfig:
        """Build a config from a dict, rejecting unknown keys by name.

        The output of ``tensorfab config show`` (``{"config": {...}, "derived": {...}}``)
        is accepted too: its ``config`` member is read.
        """
        if not isinstance(data, dict):
            raise ConfigError("<root>", data, "a config must be a JSON object")
        if set(data) == {"config", "derived"} and isinstance(data["config"], dict):
            data = data["config"]
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                raise ConfigError(key, data[key],
                                  f"unknown field (known: {', '.join(sorted(known))})")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> HwConfig:
        """Parse JSON text produced by :meth:`to_json`.

        Raises
        ------
        ConfigError
            Text that is not JSON, a field given twice in one object (JSON parsers keep
            the last value and drop the first silently), or what :meth:`from_dict`
            refuses.
        """
        try:
            data = json.loads(text, object_pairs_hook=_object_once)
        except json.JSONDecodeError as exc:
            raise ConfigError("<json>", text[:40], f"not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    def replace(self, **changes: Any) -> HwConfig:
        """A copy with some parameters changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def differences(self, other: HwConfig) -> str:
        """The parameters in which ``other`` differs, for a message: ``inp_depth 256
        vs 128, clock_mhz 24.0 vs 50.0`` (this config's value first); empty when equal."""
        return ", ".join(f"{f.name} {getattr(self, f.name)!r} vs {getattr(other, f.name)!r}"
                         for f in dataclasses.fields(self)
                         if getattr(self, f.name) != getattr(other, f.name))


#: Fields a config's JSON names only when they differ from these defaults (the
#: hardware options added after the first presets; see :meth:`HwConfig.to_dict`).
OPTIONAL_FIELDS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(HwConfig)
    if f.name in ("perf_counters", "block_ram_fifos", "fast_reset", "sequential_multiplier",
                  "vector_alu")}

PRESETS: dict[str, HwConfig] = {
    # The smallest preset: 9 KiB of buffers, 4x4 MACs, 32-bit bus (an iCE40UP5K needs
    # the `up5k` board config and more: docs/fpga.md).
    "tiny": HwConfig(name="tiny", batch=1, block_in=4, block_out=4, inp_depth=256,
                     wgt_depth=128, acc_depth=256, uop_depth=512, dram_addr_width=24,
                     mem_bus_width=32, dep_queue_depth=4, cmd_queue_depth=4,
                     clock_mhz=24.0),
    "small": HwConfig(name="small", batch=1, block_in=8, block_out=8, inp_depth=1024,
                      wgt_depth=512, acc_depth=1024, uop_depth=2048, dram_addr_width=28,
                      mem_bus_width=64, dep_queue_depth=8, cmd_queue_depth=8,
                      clock_mhz=50.0),
    # VTA's default: input 32 KiB, weight 256 KiB, accumulator 128 KiB, micro-op 32 KiB.
    "default": HwConfig(name="default"),
    "large": HwConfig(name="large", batch=1, block_in=32, block_out=32, inp_depth=2048,
                      wgt_depth=512, acc_depth=2048, uop_depth=8192, mem_bus_width=128,
                      dep_queue_depth=16, cmd_queue_depth=16, clock_mhz=150.0),
}


def get_config(name_or_path: str | Path) -> HwConfig:
    """A preset by name, or a config read from a JSON file path.

    Raises
    ------
    ConfigError
        If the name is neither a preset nor a readable JSON file.
    """
    key = str(name_or_path)
    if key in PRESETS:
        return PRESETS[key]
    path = Path(key)
    if path.suffix == ".json" and path.is_file():
        try:
            text = path.read_bytes().decode("utf-8")
        except OSError as exc:
            raise ConfigError("name", key, f"cannot read: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError("name", key, f"not UTF-8 JSON text (byte {exc.start})") from exc
        try:
            return HwConfig.from_json(text)
        except ConfigError as exc:
            raise ConfigError(exc.field, exc.value, f"{exc.rule} (in {path})") from exc
    raise ConfigError("name", key,
                      f"not a preset ({', '.join(PRESETS)}) nor a JSON config file")


CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HwConfig))
"""Names of the HwConfig parameters, in declaration order."""

__all__ = ["CONFIG_FIELDS", "OPTIONAL_FIELDS", "PRESETS", "ConfigError", "HwConfig", "get_config",
           "log2"]
