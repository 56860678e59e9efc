"""tensorfab.isa: the accelerator's configuration and instruction set, declared once.

Everything that knows a bit position derives it from :mod:`tensorfab.isa.formats`.
"""

# after the names it uses
from .builder import ProgramBuilder
from .config import CONFIG_FIELDS, PRESETS, ConfigError, HwConfig, get_config
from .csr import CSR_BY_NAME, CSRS, ErrorCode
from .errors import (
    AsmError,
    BinaryFormatError,
    IllegalInstruction,
    ProgramError,
    TensorfabError,
    UsageError,
)
from .fields import Field, FieldRangeError, Format
from .formats import (
    ENGINE_OF,
    AluOp,
    Buffer,
    Engine,
    Opcode,
    insn_formats,
    insn_width,
    uop_format,
)
from .insn import (
    Alu,
    Finish,
    Gemm,
    Insn,
    Load,
    Store,
    Uop,
    buffer_depth,
    buffer_entry_bytes,
    check_insn,
    decode_insn,
    decode_uop,
    encode_insn,
    encode_uop,
)
from .program import (
    DTYPES,
    UOP_SEGMENT,
    EncodedWords,
    Program,
    Region,
    Segment,
    dram_alignment,
)

__all__ = [
    "CONFIG_FIELDS",
    "CSRS",
    "CSR_BY_NAME",
    "DTYPES",
    "ENGINE_OF",
    "PRESETS",
    "UOP_SEGMENT",
    "Alu",
    "AluOp",
    "AsmError",
    "BinaryFormatError",
    "Buffer",
    "ConfigError",
    "EncodedWords",
    "Engine",
    "ErrorCode",
    "Field",
    "FieldRangeError",
    "Finish",
    "Format",
    "Gemm",
    "HwConfig",
    "IllegalInstruction",
    "Insn",
    "Load",
    "Opcode",
    "Program",
    "ProgramBuilder",
    "ProgramError",
    "Region",
    "Segment",
    "Store",
    "TensorfabError",
    "Uop",
    "UsageError",
    "buffer_depth",
    "buffer_entry_bytes",
    "check_insn",
    "decode_insn",
    "decode_uop",
    "dram_alignment",
    "encode_insn",
    "encode_uop",
    "get_config",
    "insn_formats",
    "insn_width",
    "uop_format",
]
