"""Control and status registers and error codes: part of the architecture spec.

The CSR map is declared once here; the hardware CSR block, the drivers and
docs/isa.md are derived from it. Every register is 32 bits wide and word aligned.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ErrorCode(IntEnum):
    """Value of the ERROR_CODE register (and of :attr:`TensorfabError.code`)."""

    NONE = 0
    BAD_OPCODE = 1  #: opcode 5..7
    RESERVED_BITS = 2  #: a reserved bit of the word is set
    BAD_FIELD = 3  #: a field value the config cannot hold or the ISA forbids
    SRAM_RANGE = 4  #: an on-chip buffer index past the buffer's depth
    DRAM_RANGE = 5  #: a DRAM access past the end of memory
    UOP_RANGE = 6  #: a micro-op field past its buffer's depth
    NO_FINISH = 7  #: the instruction stream ended without FINISH
    SHIFT_RANGE = 8  #: an ALU shift amount from a vector operand outside 0..31


@dataclass(frozen=True)
class Csr:
    """One 32-bit register."""

    name: str
    offset: int
    access: str  # "rw", "ro", "w1s" (write 1 to start)
    doc: str


CSRS: tuple[Csr, ...] = (
    Csr("CTRL", 0x00, "w1s", "bit 0: write 1 to start the core (ignored while busy)"),
    Csr("STATUS", 0x04, "ro", "bit 0 busy, bit 1 done (FINISH retired), bit 2 error"),
    Csr("INSN_BASE", 0x08, "rw", "DRAM byte address of instruction 0"),
    Csr("INSN_COUNT", 0x0C, "rw", "number of instructions in the stream"),
    Csr("ERROR_CODE", 0x10, "ro", "ErrorCode of the first error since start"),
    Csr("ERROR_INDEX", 0x14, "ro", "index of the instruction that raised the error"),
    Csr("CYCLES", 0x18, "ro", "cycles since start until done or error"),
    Csr("LOAD_BUSY", 0x1C, "ro", "cycles the load engine held an instruction"),
    Csr("LOAD_STALL", 0x20, "ro", "of those, cycles waiting on a dependency token"),
    Csr("COMPUTE_BUSY", 0x24, "ro", "cycles the compute engine held an instruction"),
    Csr("COMPUTE_STALL", 0x28, "ro", "of those, cycles waiting on a dependency token"),
    Csr("STORE_BUSY", 0x2C, "ro", "cycles the store engine held an instruction"),
    Csr("STORE_STALL", 0x30, "ro", "of those, cycles waiting on a dependency token"),
    Csr("GEMM_BUSY", 0x34, "ro", "GEMM micro-ops executed (one per cycle through the GEMM "
        "core; a fast reset zeroes several accumulators a cycle)"),
    Csr("ALU_BUSY", 0x38, "ro", "cycles the ALU accepted a micro-op"),
    Csr("LOAD_INSNS", 0x3C, "ro", "instructions retired by the load engine"),
    Csr("COMPUTE_INSNS", 0x40, "ro", "instructions retired by the compute engine"),
    Csr("STORE_INSNS", 0x44, "ro", "instructions retired by the store engine"),
    Csr("DRAM_SIZE", 0x48, "rw", "bytes of DRAM the core may touch (0: the whole address "
        "space); loads and stores past it raise DRAM_RANGE"),
)

CSR_BY_NAME: dict[str, Csr] = {c.name: c for c in CSRS}

STATUS_BUSY = 1 << 0
STATUS_DONE = 1 << 1
STATUS_ERROR = 1 << 2
