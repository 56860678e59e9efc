import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.strategies import programs

from tensorfab.isa import (
    PRESETS,
    AsmError,
    BinaryFormatError,
    Buffer,
    Gemm,
    IllegalInstruction,
    Load,
    Program,
    ProgramError,
)
from tensorfab.isa.asm import assemble
from tensorfab.isa.disasm import disassemble

HEADER = """\
.config tiny
.segment x int8 8,4
.segment y int8 2,4 output
.uop acc=0 src=0 wgt=0
"""


@pytest.mark.parametrize("preset", list(PRESETS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_disasm_asm_is_identity_on_canonical_text(preset, data):
    prog = data.draw(programs(PRESETS[preset]))
    text = disassemble(prog)
    again = assemble(text)
    assert disassemble(again) == text
    assert again.insns == prog.insns and again.uops == prog.uops
    # and through the binary format
    assert disassemble(Program.from_bytes(prog.to_bytes())) == text


def test_symbolic_dram_is_in_entries_of_the_tile():
    prog = assemble(HEADER + "load.inp sram=0 dram=x+3 y=1 x=1 stride=1\nfinish\n")
    lay = prog.layout()
    load = prog.insns[0]
    assert isinstance(load, Load) and load.buffer is Buffer.INP
    assert load.dram * prog.config.inp_entry_bytes == lay["x"].offset + 3 * 4
    assert "dram=x+3" in disassemble(prog)


def test_groups_flags_and_comments():
    prog = assemble(HEADER + """
        gemm uop=0:1 iter=2,3 acc=1,4 inp=5,6 wgt=7,8 reset pop_prev push_next ; a comment
        # another comment
        finish
    """)
    g = prog.insns[0]
    assert g == Gemm(reset=True, uop_begin=0, uop_end=1, iter_out=2, iter_in=3,
                     acc_factor_out=1, acc_factor_in=4, inp_factor_out=5, inp_factor_in=6,
                     wgt_factor_out=7, wgt_factor_in=8, pop_prev=True, push_next=True)


def test_data_section_and_side_file(tmp_path):
    arr = np.arange(-16, 16, dtype=np.int8).reshape(8, 4)
    np.save(tmp_path / "x.npy", arr)
    src = tmp_path / "p.s"
    src.write_text(HEADER.replace(".segment x int8 8,4", ".segment x int8 8,4 file=x.npy")
                   + ".segment b int32 2\n.data b 7\n.data b -9\nfinish\n")
    from tensorfab.isa.asm import assemble_file

    prog = assemble_file(src)
    assert np.array_equal(prog.segment("x").data, arr)
    assert prog.segment("b").data.tolist() == [7, -9]
    image = prog.dram_image()
    assert np.array_equal(prog.read_segment(image, "x"), arr)


@pytest.mark.parametrize("body,line,col,msg", [
    ("lod.inp sram=0\nfinish", 5, 1, "unknown mnemonic"),
    ("load.inp sram=0 dram=x y=0 x=1 stride=1\nfinish", 5, 24, "y = 0"),
    ("load.inp sram=0 dram=nowhere y=1 x=1 stride=1\nfinish", 5, 22, "unknown segment"),
    ("load.inp sram=999 dram=x y=1 x=1 stride=1\nfinish", 5, 10, "past the buffer depth"),
    ("gemm uop=0:1 iter=2,3,4\nfinish", 5, 19, "iter takes 2 values"),
    ("gemm uop=0:1 iter=1,1 reset=1\nfinish", 5, 23, "reset is a flag"),
    ("gemm uop=0:1 iter=1,1 stride=1\nfinish", 5, 23, "has no field 'stride'"),
    ("gemm uop=0:1 iter=1,1 bogus\nfinish", 5, 23, "has no flag 'bogus'"),
    ("gemm uop=0:1 iter=1,x\nfinish", 5, 19, "expected an integer"),
    ("alu.shr uop=0:1 iter=1,1 imm=40\nfinish", 5, 26, "shift amount 40"),
    ("load.inp sram=0 dram=x y=1 x=1 stride=1 pop_prev\nfinish", 5, 41,
     "no previous stage"),
    ("finish\nfinish", 5, 1, "FINISH must be the last"),
    ("gemm uop=0:1 iter=1,1", 5, 1, "does not end with FINISH"),
    (".uop acc=0 src=0 wgt=999\nfinish", 5, 18, "does not fit"),
    (".data nope 1 2\nfinish", 5, 7, "no segment 'nope'"),
    (".segment x int8 2\nfinish", 5, 10, "already declared on line 2"),
])
def test_errors_name_line_and_column(body, line, col, msg):
    with pytest.raises(AsmError) as exc:
        assemble(HEADER + body, source="prog.s")
    e = exc.value
    assert (e.line, e.column) == (line, col), str(e)
    assert msg in str(e)
    assert str(e).startswith(f"prog.s:{line}:{col}:")


def test_data_count_mismatch_names_segment_line():
    with pytest.raises(AsmError, match=r"p.s:2:1: segment 'y' has 3 .data values"):
        assemble(".config tiny\n.segment y int8 2,2\n.data y 1 2 3\nfinish\n", source="p.s")


def test_config_conflict():
    with pytest.raises(AsmError, match="conflicts"):
        assemble(".config tiny\nfinish\n", "default")
    assert assemble("finish\n", "small").config == PRESETS["small"]


def test_binary_errors():
    prog = assemble(HEADER + "finish\n")
    blob = prog.to_bytes()
    with pytest.raises(BinaryFormatError, match="bad magic"):
        Program.from_bytes(b"XXXX" + blob[4:])
    with pytest.raises(BinaryFormatError, match="truncated"):
        Program.from_bytes(blob[:-1])
    with pytest.raises(BinaryFormatError, match="trailing"):
        Program.from_bytes(blob + b"\0")
    # corrupt the instruction word: opcode 7
    hdr_len = int.from_bytes(blob[12:16], "little")
    bad = bytearray(blob)
    bad[16 + hdr_len] = 7
    with pytest.raises(IllegalInstruction, match=r"instruction 0.*unknown opcode 7"):
        Program.from_bytes(bytes(bad))


def test_config_json_file_is_relative_to_the_source_folder(tmp_path, monkeypatch):
    """`.config cfg.json` beside prog.s was looked up in the working folder: `asm
    sub/prog.s` said 'not a preset ... nor a JSON config file' though `cd sub; asm
    prog.s` worked; now it is relative to the .s file's folder, as `file=` is."""
    from tensorfab.isa.asm import assemble_file

    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "cfg.json").write_text(PRESETS["tiny"].replace(name="mine").to_json())
    (sub / "prog.s").write_text(".config cfg.json\nfinish\n")
    monkeypatch.chdir(tmp_path)
    assert assemble_file("sub/prog.s").config.name == "mine"
    (sub / "other.s").write_text(".config nope.json\nfinish\n")
    with pytest.raises(AsmError, match=r"other\.s:1:9: .*sub/nope\.json"):
        assemble_file("sub/other.s")


@pytest.mark.parametrize("name,why", [
    ("a b", "is not a name the assembler reads back"),
    ("9lives", "is not a name the assembler reads back"),
    ("", "is not a name the assembler reads back"),
    ("insns", "is reserved"),
    ("end", "is reserved"),
])
def test_segment_names_assembly_cannot_read_back_are_refused(name, why):
    """Program.to_bytes accepted a segment named 'a b', which disasm printed as
    '.segment a b int8 4' (a line that does not assemble); now to_bytes and disassemble
    refuse it naming the segment, with the assembler's own name grammar."""
    prog = assemble(".config tiny\n.segment A int8 4\nfinish\n")
    prog.segments[0].name = name
    for write in (prog.to_bytes, lambda: disassemble(prog)):
        with pytest.raises(ProgramError, match=f"^segment '{name}': the name {why}"):
            write()
    with pytest.raises(AsmError):  # what disassemble would have printed
        assemble(f".config tiny\n.segment {name} int8 4\nfinish\n")


@pytest.mark.parametrize("name", ["insns", "uops", "end"])
def test_a_program_refuses_a_segment_named_as_a_layout_region(name):
    """Program(...) took a segment named 'insns' or 'end' (only 'uops' was refused): its
    region in layout() was then the instructions' or the end marker's, so fsim ran the
    wrong bytes ('instruction 0 ... transfers must be at least 1', a numpy reshape
    error). Program now refuses the name, as does a run of one renamed afterwards; the
    same rename to a free name runs as the original."""
    import dataclasses

    from tensorfab.example import example_path
    from tensorfab.isa.asm import assemble_file
    from tensorfab.sim import FunctionalSimulator

    prog = assemble_file(example_path())
    out = next(seg for seg in prog.segments if seg.output)
    want = FunctionalSimulator().run(prog).outputs[out.name]
    why = (f"^segment '{name}': the name is reserved \\(insns, uops, end name the "
           "layout's regions\\)$")
    for new in (name, "renamed"):
        segments = [dataclasses.replace(seg, name=new) if seg is out else seg
                    for seg in prog.segments]
        if new == name:
            with pytest.raises(ProgramError, match=why):
                Program(prog.config, prog.insns, prog.uops, segments)
        else:
            renamed = Program(prog.config, prog.insns, prog.uops, segments)
            got = FunctionalSimulator().run(renamed).outputs["renamed"]
            np.testing.assert_array_equal(got, want)
            next(seg for seg in renamed.segments if seg.name == "renamed").name = name
            with pytest.raises(ProgramError, match=why):
                FunctionalSimulator().run(renamed)


def test_segment_names_the_assembler_reads_are_written():
    prog = assemble(".config tiny\n.segment _x.1 int8 4\nload.inp sram=0 dram=_x.1+1 y=1 x=1 "
                    "stride=1\nfinish\n")
    assert Program.from_bytes(prog.to_bytes()).segments[0].name == "_x.1"
    assert assemble(disassemble(prog)) == prog
