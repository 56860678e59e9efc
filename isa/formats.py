"""The instruction set, declared once.

Every instruction and the micro-op are declared here as :class:`~.fields.Format`
objects whose widths are derived from a :class:`~.config.HwConfig`. Nothing else in
tensorfab writes a bit position.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cache

from .config import HwConfig
from .fields import Field, Format

#: Width of the loop-extent fields of GEMM and ALU (as VTA's LOOP_ITER_WIDTH).
LOOP_ITER_WIDTH = 14
#: Width of the 2-D transfer size and stride fields of LOAD and STORE.
XFER_WIDTH = 16
#: Width of each of the four padding fields of LOAD.
PAD_WIDTH = 4
#: Width of the ALU immediate (signed, sign-extended to the accumulator width).
IMM_WIDTH = 16
#: Largest shift amount of SHR, SHR_RND and SHL.
MAX_SHIFT = 31
#: Largest extent of a GEMM/ALU loop (the loop-extent fields are unsigned).
MAX_ITER = (1 << LOOP_ITER_WIDTH) - 1
#: Largest LOAD/STORE size or stride (the transfer fields are unsigned).
MAX_XFER = (1 << XFER_WIDTH) - 1
#: Range of the signed ALU immediate.
IMM_MIN, IMM_MAX = -(1 << (IMM_WIDTH - 1)), (1 << (IMM_WIDTH - 1)) - 1
#: Largest multiplier a MUL immediate holds (the immediate is signed).
MAX_IMM_MULTIPLIER = IMM_MAX
#: Accumulator entries the compute engine zeroes per cycle in a fast reset (at most;
#: see :func:`~.insn.fast_reset_lanes`).
FAST_RESET_LANES = 16
#: MULHI takes its immediate as the high half of the 32-bit multiplier: ``b = imm << 16``
#: (the 16-bit immediate cannot hold a Q31 multiplier; exact 32-bit multipliers come
#: from a vector operand).
MULHI_IMM_SHIFT = 32 - IMM_WIDTH
#: Register stages of the compute engine's ALU path after the accumulator read: the
#: read entries as they leave the block RAM, the operands (with the results being
#: written forwarded), the multiplications' partial products, the products' low word,
#: and the result before its write-back. Each ALU instruction drains this many more
#: cycles (docs/isa.md, "ALU pipeline"). The hardware and the timing model both read it.
ALU_PIPELINE_STAGES = 5
#: Cycles from an ALU micro-op passing the issue's read (S1C) to a micro-op that
#: reads its result passing it: one reading the entry one of the three ahead of it
#: writes waits at its read, further dependencies are forwarded.
ALU_INTERLOCK_DISTANCE = 4
#: Cycles a multiplying ALU micro-op (MUL, MULHI, REQUANT) holds the vector ALU's one
#: multiplier per lane in a config with ``sequential_multiplier``: one 16×16 partial
#: product a cycle. The issue lets such micro-ops pass this many cycles apart, and the
#: instruction drains this many cycles later, less one.
SEQUENTIAL_MULTIPLY_CYCLES = 4
#: Cycles from a multiplying micro-op passing the issue to a micro-op that reads its
#: result passing it, with ``sequential_multiplier`` (``ALU_INTERLOCK_DISTANCE``
#: without): the multiplier's extra cycles more.
SEQUENTIAL_MULTIPLY_DISTANCE = ALU_INTERLOCK_DISTANCE + SEQUENTIAL_MULTIPLY_CYCLES - 1

#: Cycles from a compute instruction's micro-op read to its index arithmetic: the read
#: and a register after the block RAM (whose clock-to-output is too long for the index
#: adders to follow in the same cycle on an FPGA). Each GEMM and ALU instruction, the
#: fast reset included, takes ``UOP_READ_STAGES - 1`` cycles more than with a bare read.
UOP_READ_STAGES = 2

#: Cycles from a compute micro-op's index sums (micro-op field + loop offset) to the
#: range checks, the interlock and the buffer reads they enable: the sums are
#: registered (adder, range comparison, interlock and the loop counters' advance in one
#: cycle were an FPGA critical path). Each GEMM and ALU instruction, not the fast
#: reset, takes this many cycles more.
UOP_INDEX_STAGES = 1


class Opcode(IntEnum):
    """Instruction opcodes; codes 5 to 7 are illegal."""

    LOAD = 0
    STORE = 1
    GEMM = 2
    ALU = 3
    FINISH = 4


class Buffer(IntEnum):
    """On-chip buffer a LOAD writes."""

    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3


class AluOp(IntEnum):
    """Vector ALU operations over accumulator entries; codes 11 to 15 are illegal."""

    ADD = 0
    MUL = 1
    MIN = 2
    MAX = 3
    SHR = 4
    SHR_RND = 5
    SHL = 6
    CLIP = 7
    MOV = 8
    MULHI = 9
    REQUANT = 10


#: ALU operations of the form ``OP(acc[d], b)``, ``b`` a vector (``acc[s]``) or the
#: immediate: every operation but REQUANT (whose operand is a weight-buffer record).
BINARY_ALU_OPS: tuple[AluOp, ...] = tuple(op for op in AluOp if op is not AluOp.REQUANT)
#: ALU operations that multiply: with ``sequential_multiplier`` each of their micro-ops
#: holds the lane's multiplier :data:`SEQUENTIAL_MULTIPLY_CYCLES` cycles.
MULTIPLYING_ALU_OPS: tuple[AluOp, ...] = (AluOp.MUL, AluOp.MULHI, AluOp.REQUANT)

#: ALU operations whose second operand is a shift amount (0..MAX_SHIFT).
SHIFT_OPS = frozenset({AluOp.SHR, AluOp.SHR_RND, AluOp.SHL})


#: REQUANT's per-channel record: the first bytes of one output channel's row
#: ``w[o][0:12]`` of a weight-buffer entry, little-endian, as ``(name, offset, size,
#: signed)``; see docs/isa.md.
REQUANT_RECORD: tuple[tuple[str, int, int, bool], ...] = (
    ("multiplier", 0, 4, False),
    ("bias", 4, 4, True),
    ("shift", 8, 1, False),
    ("zero_point", 9, 1, True),
    ("lo", 10, 1, True),
    ("hi", 11, 1, True),
)
#: Bytes of a REQUANT record (a weight row must hold at least this many).
REQUANT_RECORD_BYTES = 12
#: Accumulator entries holding the records of a requantizing STORE: record word ``k``
#: (bytes ``4k..4k+3``) of channel ``o`` is lane ``o`` of batch row 0 of entry ``rec + k``.
REQUANT_RECORD_WORDS = REQUANT_RECORD_BYTES // 4
#: Byte of a REQUANT record holding its shift (in record word ``REQUANT_SHIFT_BYTE // 4``
#: of a requantizing STORE's entries).
REQUANT_SHIFT_BYTE = next(off for name, off, *_ in REQUANT_RECORD if name == "shift")
#: Largest rounding right shift of REQUANT (its product has 63 significant bits).
REQUANT_MAX_SHIFT = 62
#: REQUANT's multiplier is the low bits of its field, unsigned (a Q31 multiplier in
#: ``[0, 2^31)``); the field's top bit is ignored.
REQUANT_MULTIPLIER_BITS = 31


def alu_requant_supported(cfg: HwConfig) -> bool:
    """Whether ``cfg`` has the ALU's REQUANT: it has the vector ALU, a weight row of
    ``block_in`` int8 weights holds a :data:`REQUANT_RECORD`, and accumulators are 32
    bits."""
    return (cfg.vector_alu and cfg.wgt_width == 8 and cfg.block_in >= REQUANT_RECORD_BYTES
            and cfg.acc_width == 32)


def requant_supported(cfg: HwConfig) -> bool:
    """Whether ``cfg``'s STOREs requantize (the ``requant`` and ``rec`` fields, records
    in accumulator entries): where the ALU has REQUANT
    (:func:`alu_requant_supported`), and at any ``block_in`` in a config without the
    vector ALU, whose only requantization it is. Accumulators are 32 bits."""
    return cfg.acc_width == 32 and (alu_requant_supported(cfg) or not cfg.vector_alu)


def alu_imm_operand(op: AluOp, imm: int) -> int:
    """The int32 second operand an ALU instruction with ``use_imm`` applies.

    Every operation sign-extends the 16-bit immediate, except MULHI, which takes it
    as the high half of its Q31 multiplier (``imm << MULHI_IMM_SHIFT``).

    Parameters
    ----------
    op : AluOp
        The operation.
    imm : int
        The signed immediate field.

    Returns
    -------
    int
        The operand as a signed 32-bit value.
    """
    return imm << MULHI_IMM_SHIFT if op is AluOp.MULHI else imm


class Engine(IntEnum):
    """The three engines; every opcode runs on exactly one of them."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


ENGINE_OF: dict[Opcode, Engine] = {
    Opcode.LOAD: Engine.LOAD,
    Opcode.STORE: Engine.STORE,
    Opcode.GEMM: Engine.COMPUTE,
    Opcode.ALU: Engine.COMPUTE,
    Opcode.FINISH: Engine.COMPUTE,
}
"""Which engine executes each opcode."""


@dataclass(frozen=True)
class TokenQueue:
    """One dependency-token queue between two engines.

    The producer pushes a token with the instruction flag ``push`` (``push_next`` or
    ``push_prev``); the consumer pops it with ``pop``. Every executor (the functional
    simulator, its race detector, the hardware core, the random-program generator)
    derives its queues from :data:`TOKEN_QUEUES`.
    """

    name: str
    producer: Engine
    push: str
    consumer: Engine
    pop: str

    @property
    def label(self) -> str:
        """``load→compute`` and so on."""
        return f"{self.producer.name.lower()}→{self.consumer.name.lower()}"


TOKEN_QUEUES: tuple[TokenQueue, ...] = (
    TokenQueue("l2c", Engine.LOAD, "push_next", Engine.COMPUTE, "pop_prev"),
    TokenQueue("c2l", Engine.COMPUTE, "push_prev", Engine.LOAD, "pop_next"),
    TokenQueue("c2s", Engine.COMPUTE, "push_next", Engine.STORE, "pop_prev"),
    TokenQueue("s2c", Engine.STORE, "push_prev", Engine.COMPUTE, "pop_next"),
)
"""The four dependency-token queues (as VTA's): load↔compute and compute↔store."""


def token_pops(engine: Engine) -> tuple[tuple[str, str], ...]:
    """``(flag, queue name)`` of every queue ``engine`` pops from."""
    return tuple((q.pop, q.name) for q in TOKEN_QUEUES if q.consumer is engine)


def token_pushes(engine: Engine) -> tuple[tuple[str, str], ...]:
    """``(flag, queue name)`` of every queue ``engine`` pushes to."""
    return tuple((q.push, q.name) for q in TOKEN_QUEUES if q.producer is engine)


def _header() -> tuple[Field, ...]:
    return (
        Field("opcode", 3, "operation (LOAD=0, STORE=1, GEMM=2, ALU=3, FINISH=4)",
              enum=Opcode),
        Field("pop_prev", 1, "wait for and pop a token from the previous stage"),
        Field("pop_next", 1, "wait for and pop a token from the next stage"),
        Field("push_prev", 1, "push a token to the previous stage when done"),
        Field("push_next", 1, "push a token to the next stage when done"),
    )


def _loop_fields(cfg: HwConfig) -> tuple[Field, ...]:
    return (
        Field("uop_begin", cfg.uop_bits, "first micro-op index"),
        Field("uop_end", cfg.uop_bits + 1, "one past the last micro-op index"),
        Field("iter_out", LOOP_ITER_WIDTH, "outer loop extent (>= 1)"),
        Field("iter_in", LOOP_ITER_WIDTH, "inner loop extent (>= 1)"),
    )


def _raw_formats(cfg: HwConfig) -> dict[Opcode, tuple[Field, ...]]:
    sram_bits = max(cfg.inp_bits, cfg.wgt_bits, cfg.acc_bits, cfg.uop_bits)
    xfer = (
        Field("dram", cfg.dram_addr_width, "DRAM base, in entries of the transferred tile"),
        Field("y", XFER_WIDTH, "rows to transfer (>= 1)"),
        Field("x", XFER_WIDTH, "entries per row (>= 1)"),
        Field("stride", XFER_WIDTH, "DRAM distance between rows, in entries"),
    )
    return {
        Opcode.LOAD: _header() + (
            Field("buffer", 2, "destination buffer (UOP=0, WGT=1, INP=2, ACC=3)", enum=Buffer),
            Field("sram", sram_bits, "first destination entry"),
        ) + xfer + (
            Field("pad_top", PAD_WIDTH, "zero rows before the data"),
            Field("pad_bottom", PAD_WIDTH, "zero rows after the data"),
            Field("pad_left", PAD_WIDTH, "zero entries before each row"),
            Field("pad_right", PAD_WIDTH, "zero entries after each row"),
        ),
        Opcode.STORE: _header() + (
            Field("sram", cfg.acc_bits, "first accumulator entry to store"),
        ) + xfer + (_store_requant_fields(cfg) if requant_supported(cfg) else ()),
        Opcode.GEMM: _header() + (
            Field("reset", 1, "write zeros to the addressed accumulators instead of MACs"),
        ) + _loop_fields(cfg) + (
            Field("acc_factor_out", cfg.acc_bits, "accumulator index step per outer iteration"),
            Field("acc_factor_in", cfg.acc_bits, "accumulator index step per inner iteration"),
            Field("inp_factor_out", cfg.inp_bits, "input index step per outer iteration"),
            Field("inp_factor_in", cfg.inp_bits, "input index step per inner iteration"),
            Field("wgt_factor_out", cfg.wgt_bits, "weight index step per outer iteration"),
            Field("wgt_factor_in", cfg.wgt_bits, "weight index step per inner iteration"),
        ),
        Opcode.ALU: _header() + (
            Field("op", 4, "ALU operation (see AluOp)", enum=AluOp),
            Field("use_imm", 1, "second operand is the immediate, not an accumulator"),
            Field("imm", IMM_WIDTH, "immediate operand", signed=True),
        ) + _loop_fields(cfg) + (
            Field("dst_factor_out", cfg.acc_bits, "destination step per outer iteration"),
            Field("dst_factor_in", cfg.acc_bits, "destination step per inner iteration"),
            Field("src_factor_out", cfg.acc_bits, "source (REQUANT: record) step per outer "
                                                "iteration"),
            Field("src_factor_in", cfg.acc_bits, "source (REQUANT: record) step per inner "
                                               "iteration"),
        ),
        Opcode.FINISH: _header(),
    }


def _store_requant_fields(cfg: HwConfig) -> tuple[Field, ...]:
    """A STORE's requantization (configs with REQUANT only): its records' entries."""
    return (
        Field("requant", 1, "narrow through REQUANT with the records at acc[rec..rec+2]"),
        Field("rec", cfg.acc_bits, "first of the accumulator entries holding the records"),
    )


def _round_word(bits: int) -> int:
    width = 64
    while width < bits:
        width *= 2
    return width


@cache
def insn_width(cfg: HwConfig) -> int:
    """Instruction word width in bits: the widest format rounded up to a power of two,
    and at least one memory-bus beat."""
    used = max(sum(f.width for f in fs) for fs in _raw_formats(cfg).values())
    return max(_round_word(used), cfg.mem_bus_width)


@cache
def insn_formats(cfg: HwConfig) -> dict[Opcode, Format]:
    """Every instruction format for ``cfg``, keyed by opcode."""
    width = insn_width(cfg)
    return {op: Format(op.name.lower(), fs, width) for op, fs in _raw_formats(cfg).items()}


@cache
def uop_format(cfg: HwConfig) -> Format:
    """The micro-op format: accumulator (destination), source and weight indices."""
    fields = (
        Field("acc", cfg.acc_bits, "accumulator (destination) index"),
        Field("src", cfg.src_bits, "input index (GEMM) or accumulator source index (ALU)"),
        Field("wgt", cfg.wgt_bits, "weight index (GEMM; REQUANT's record entry; ignored by "
                                   "other ALU operations)"),
    )
    width = 32
    while width < sum(f.width for f in fields):
        width *= 2
    # whole bus beats, so that every DMA transfer is a whole number of beats
    return Format("uop", fields, max(width, cfg.mem_bus_width))


def header_format(cfg: HwConfig) -> Format:
    """The fields every instruction starts with (opcode and dependency flags)."""
    return Format("header", _header(), insn_width(cfg))


def buffer_bytes(cfg: HwConfig) -> dict[str, int]:
    """On-chip buffer sizes in bytes, by buffer name (micro-ops at their used bits)."""
    return {
        "inp": cfg.inp_depth * cfg.inp_entry_bytes,
        "wgt": cfg.wgt_depth * cfg.wgt_entry_bytes,
        "acc": cfg.acc_depth * cfg.acc_entry_bytes,
        "uop": cfg.uop_depth * -(-uop_format(cfg).used_bits // 8),
    }
