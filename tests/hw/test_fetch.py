"""The fetch unit (Verilator, testbench: tb_fetch.py) and its legality check (Amaranth sim)."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from hw.dma_top import FetchTop
from tensorfab.hw.insn_check import InsnCheck
from tensorfab.hw.signatures import InsnStreamLayout
from tensorfab.isa import (
    PRESETS,
    ErrorCode,
    HwConfig,
    IllegalInstruction,
    Opcode,
    decode_insn,
    insn_formats,
    insn_width,
)
from tensorfab.sim.testing.cocotb_runner import build, run


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_fetch(preset: str) -> None:
    built = build(FetchTop(PRESETS[preset]), "fetch_top", {"preset": preset})
    run(built, "hw.tb_fetch")


def test_fetch_buffer_in_block_ram() -> None:
    """The same testbench, the buffer a BlockRamFifo (HwConfig.block_ram_fifos)."""
    cfg = PRESETS["tiny"].replace(block_ram_fifos=True)
    built = build(FetchTop(cfg), "fetch_top", {"preset": "tiny", "block_ram_fifos": True})
    run(built, "hw.tb_fetch")


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["small", "large"])
def test_fetch_more_presets(preset: str) -> None:
    built = build(FetchTop(PRESETS[preset]), "fetch_top", {"preset": preset})
    run(built, "hw.tb_fetch")


def near_legal_words(cfg: HwConfig, rng: random.Random, count: int) -> list[int]:
    """Words built field by field with values at and around every boundary, some with
    a reserved bit set, some with an illegal opcode."""
    fmts = insn_formats(cfg)
    depths = [cfg.inp_depth, cfg.wgt_depth, cfg.acc_depth, cfg.uop_depth]
    words = []
    for _ in range(count):
        op = rng.choice([*range(5), *range(5), 5, 6, 7])
        if op > 4:
            words.append((rng.getrandbits(insn_width(cfg)) & ~7) | op)
            continue
        fmt = fmts[Opcode(op)]
        values: dict[str, int] = {"opcode": op}
        for f in fmt.fields[1:]:
            if f.width == 1:
                values[f.name] = int(rng.random() < 0.15)
                continue
            picks = [0, 1, 2, f.hi, f.lo, rng.randint(f.lo, f.hi)]
            picks += [d + e for d in depths for e in (-1, 0, 1) if f.lo <= d + e <= f.hi]
            if f.name == "imm":
                picks += [-1, 31, 32, 0, 0, 0]
            if f.name in ("op",):
                picks += [8, 9, 15, 3]
            if f.name.startswith("pad"):
                picks = [0, 0, 0, 0, 1, f.hi]
            values[f.name] = rng.choice(picks)
        word = fmt.pack(values)
        if rng.random() < 0.08 and fmt.reserved_mask:
            spare = [b for b in range(fmt.width) if fmt.reserved_mask >> b & 1]
            word |= 1 << rng.choice(spare)
        words.append(word)
    return words


@pytest.mark.parametrize("preset", ["tiny", "default", "large"])
def test_insn_check_matches_decoder(preset: str) -> None:
    """InsnCheck gives exactly decode_insn's verdict (code) on near-legal words."""
    cfg = PRESETS[preset]
    dut = InsnCheck(cfg)
    words = near_legal_words(cfg, random.Random(7), 3000)
    seen: set[int] = set()
    mismatches: list[str] = []

    async def bench(ctx) -> None:
        for w in words:
            try:
                decode_insn(w, cfg)
                want = ErrorCode.NONE
            except IllegalInstruction as exc:
                want = ErrorCode(exc.code)
            ctx.set(dut.word, w)
            got = ctx.get(dut.code)
            ok = ctx.get(dut.ok)
            seen.add(int(want))
            if got != want or ok != (want == ErrorCode.NONE):
                mismatches.append(f"{w:#x}: got {got} ok={ok}, want {want.name}")

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, mismatches[:5]
    assert seen >= {0, 1, 2, 3}, f"codes exercised: {seen}"


def test_fetch_unit_parameters_are_checked_with_a_message() -> None:
    from tensorfab.hw.fetch import Fetch

    with pytest.raises(ValueError, match=r"buffer_words = 1; .* at least 2"):
        Fetch(PRESETS["tiny"], buffer_words=1)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_insn_index_width_covers_a_program_filling_dram(preset: str) -> None:
    """Every index of a program that fills DRAM fits the streams' index field, and
    no bit more is carried (the field was 32 bits whatever the DRAM)."""
    cfg = PRESETS[preset]
    width = InsnStreamLayout(cfg)["index"].shape.width
    most_insns = cfg.dram_bytes // (insn_width(cfg) // 8)
    assert (1 << width) == most_insns
    assert width < 32 or cfg.dram_addr_width == 32
