"""Programs that stop the core with an error, one or more per error code, with the
(code, index) the core and the functional simulator must report. Where a case needs an
illegal word, its DRAM image is patched (the image is given; otherwise ``None``)."""

from __future__ import annotations

import numpy as np

from tensorfab.isa import (
    PRESETS,
    Alu,
    AluOp,
    Buffer,
    ErrorCode,
    Finish,
    Gemm,
    HwConfig,
    Load,
    Opcode,
    Program,
    Segment,
    Store,
    Uop,
    insn_formats,
    uop_format,
)


def patched_word(program: Program, index: int, word: int) -> np.ndarray:
    """``program``'s DRAM image with instruction ``index`` replaced by ``word``."""
    image = program.dram_image()
    nb = program.insn_bytes
    image[index * nb:(index + 1) * nb] = np.frombuffer(word.to_bytes(nb, "little"),
                                                       dtype=np.uint8)
    return image


def patchable_program(cfg: HwConfig) -> Program:
    """Four legal instructions to patch an illegal word into (:func:`patched_opcode`,
    :func:`patched_word`): a micro-op LOAD, two resetting GEMMs, FINISH."""
    return Program(cfg, [Load(buffer=Buffer.UOP, sram=0, dram=0, y=1, x=1, push_next=True),
                         Gemm(pop_prev=True, reset=True), Gemm(reset=True), Finish()],
                   [Uop()], [])


def patched_opcode(program: Program, index: int, opcode: int = 7) -> np.ndarray:
    """``program``'s DRAM image with instruction ``index``'s opcode replaced."""
    image = program.dram_image()
    nb = program.insn_bytes
    image[index * nb] = (image[index * nb] & 0xF8) | opcode
    return image


def tiny_error_programs() -> tuple[list[Program], list[np.ndarray | None], list[tuple]]:
    """Programs that must stop the core with an error, and the expected (code, index)."""
    cfg = PRESETS["tiny"]
    seg = Segment("x", "int8", (8, 4), np.arange(32) - 16)
    out = Segment("y", "int8", (8, 4), output=True)
    ok = [Load(buffer=Buffer.ACC, sram=0, dram=0, y=1, x=1, push_next=True),
          Finish(pop_prev=True)]
    progs: list[Program] = []
    images: list[np.ndarray | None] = []
    expect: list[tuple] = []

    def add(insns, code, index, patch=None):
        p = Program(cfg, insns, [Uop()], [seg, out])
        image = None
        if patch is not None:
            image = p.dram_image()
            nb = p.insn_bytes
            image[patch[0] * nb: (patch[0] + 1) * nb] = np.frombuffer(
                patch[1].to_bytes(nb, "little"), dtype=np.uint8)
        progs.append(p)
        images.append(image)
        expect.append((code, index))

    base = [Load(buffer=Buffer.INP, sram=0, dram=0, y=1, x=1), *ok]
    # illegal words patched into the stream at index 1
    add(base, ErrorCode.BAD_OPCODE, 1, (1, 7))
    fmt = insn_formats(cfg)[Opcode.FINISH]
    add(base, ErrorCode.RESERVED_BITS, 1, (1, int(Opcode.FINISH) | 1 << (fmt.width - 1)))
    # DMA past the end of DRAM (the image is a few hundred bytes)
    far = Load(buffer=Buffer.INP, sram=0, dram=1 << 16, y=1, x=1)
    add([Load(buffer=Buffer.INP, y=1, x=1), far, *ok], ErrorCode.DRAM_RANGE, 1)
    # SRAM block past the buffer
    deep = Load(buffer=Buffer.INP, sram=cfg.inp_depth - 2, dram=0, y=2, x=2)
    add([deep, *ok], ErrorCode.SRAM_RANGE, 0)
    # store into the instruction stream
    add([*ok[:1], Store(sram=0, dram=0, y=1, x=1), ok[1]], ErrorCode.DRAM_RANGE, 1)
    # ALU: vector shift amounts outside 0..31, a vector operand index past the buffer
    uops = [Uop(acc=1, src=0), Uop(acc=0, src=1)]

    def alu_case(b: int, insn: Alu, code: ErrorCode) -> None:
        pre = [Load(buffer=Buffer.UOP, sram=0, dram=0, y=1, x=2, push_next=True),
               Alu(op=AluOp.MOV, use_imm=True, imm=b, uop_begin=0, uop_end=1, pop_prev=True),
               Alu(op=AluOp.MOV, use_imm=True, imm=-7, uop_begin=1, uop_end=2)]
        p = Program(cfg, [*pre, insn, Finish()], uops, [seg, out])
        pre[0] = Load(buffer=Buffer.UOP, sram=0, y=1, x=2, push_next=True,
                      dram=p.layout()["uops"].offset // uop_format(cfg).bytes)
        p = Program(cfg, [*pre, insn, Finish()], uops, [seg, out])
        progs.append(p)
        images.append(None)
        expect.append((code, len(pre)))

    vec = {"uop_begin": 1, "uop_end": 2, "iter_out": 3}
    alu_case(32, Alu(op=AluOp.SHR_RND, **vec), ErrorCode.SHIFT_RANGE)
    alu_case(-1, Alu(op=AluOp.SHL, **vec), ErrorCode.SHIFT_RANGE)
    alu_case(32767, Alu(op=AluOp.SHR, **vec), ErrorCode.SHIFT_RANGE)
    alu_case(3, Alu(op=AluOp.MULHI, src_factor_out=cfg.acc_depth // 2, **vec),
             ErrorCode.SRAM_RANGE)
    return progs, images, expect
