"""Programs that keep their words without encoding them: read from a file
(Program.from_bytes) and placed (place_program). The kept words must equal what
encoding the program's instructions and micro-ops from scratch gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.strategies import configs

from tensorfab.isa import PRESETS, IllegalInstruction, Program
from tensorfab.isa.formats import insn_width, uop_format
from tensorfab.isa.insn import decode_insn, encode_insn
from tensorfab.isa.placement import place_program, placement_alignment
from tensorfab.sim.testing.random_program import random_program


def _fresh(p: Program) -> tuple[np.ndarray, np.ndarray, int]:
    """``p``'s words encoded by a copy that keeps none."""
    words = Program(p.config, list(p.insns), list(p.uops), list(p.segments),
                    p.placement).encoded()
    return words.insns, words.uops, words.uop_offset


def _assert_kept_equal_fresh(p: Program) -> None:
    kept = p.kept_encoded()
    assert kept is not None
    insns, uops, offset = _fresh(p)
    assert np.array_equal(kept.insns, insns)
    assert np.array_equal(kept.uops, uops)
    assert kept.uop_offset == offset
    assert not kept.insns.flags.writeable and not kept.uops.flags.writeable


def _reversed_regions(p: Program) -> dict[str, int]:
    """Every region at a new address, in reverse order, so every transfer moves."""
    lay = p.layout()
    align = placement_alignment(p)
    addresses, pos = {}, 5 * align
    for name in reversed([n for n in lay if n != "end"]):
        addresses[name] = pos
        pos += -(-max(lay[name].nbytes, 1) // align) * align
    return addresses


@settings(max_examples=300, deadline=None)
@given(cfg=configs, word=st.integers(min_value=0, max_value=(1 << 128) - 1))
def test_a_word_that_decodes_encodes_back_to_itself(cfg, word):
    """What from_bytes relies on to keep the words it read."""
    word &= (1 << insn_width(cfg)) - 1
    try:
        insn = decode_insn(word, cfg)
    except IllegalInstruction:
        return
    assert encode_insn(insn, cfg) == word


@pytest.mark.parametrize("config", ["tiny", "small", "default"])
@pytest.mark.parametrize("seed", range(12))
def test_read_and_placed_programs_keep_the_words_encoding_gives(config, seed):
    p = random_program(PRESETS[config], seed)
    read = Program.from_bytes(p.to_bytes())
    _assert_kept_equal_fresh(read)
    placed = place_program(read, _reversed_regions(read))
    assert any(a != b for a, b in zip(read.insns, placed.insns, strict=True))
    _assert_kept_equal_fresh(placed)


def test_a_micro_op_with_reserved_bits_is_read_but_its_words_are_not_kept():
    """The decoder ignores a micro-op's reserved bits (as the hardware does); the
    program then keeps no words, so its encoding is the canonical one."""
    cfg = PRESETS["tiny"]
    p = random_program(cfg, 3)
    assert p.uops
    fmt = uop_format(cfg)
    assert fmt.reserved_mask
    blob = bytearray(p.to_bytes())
    at = len(blob) - sum(s.nbytes for s in p.segments if s.data is not None) \
        - len(p.uops) * fmt.bytes
    top = fmt.width - 1  # the highest bit, reserved
    blob[at + top // 8] |= 1 << (top % 8)
    read = Program.from_bytes(bytes(blob))
    assert read.uops == p.uops
    assert read.kept_encoded() is None
    assert np.array_equal(read.encoded().uops, p.encoded().uops)

