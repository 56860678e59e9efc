"""Every bad input ends in one line naming the file: regression tests of issue 10."""

import json
import re
import shutil

import numpy as np
import pytest

from tensorfab.cli import main
from tensorfab.demo import example_path
from tensorfab.isa import AsmError, BinaryFormatError, Program
from tensorfab.isa.asm import assemble

SMALL = """.config tiny
.segment A int8 1,4
.data A 1 2 3 4
.segment O int8 1,4 output
load.inp sram=0 dram=A y=1 x=1 stride=1
finish
"""


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def one_line_error(capsys, *argv, name):
    code, _, err = run(capsys, *argv)
    assert code == 2, err
    assert err.startswith("error:") and err.count("\n") == 1, err
    assert str(name) in err, err
    return err


@pytest.mark.parametrize("number", ["07", "0_7", "_", "0x_", "1__0", "0x", "9e3"])
def test_bad_numbers_are_asm_errors(tmp_path, capsys, number):
    src = tmp_path / "n.s"
    src.write_text(f".config tiny\nload.inp sram={number} dram=0 y=1 x=1 stride=1\nfinish\n")
    err = one_line_error(capsys, "asm", src, name=f"{src}:2:15")
    assert "expected an integer" in err


@pytest.mark.parametrize("number,value", [("0x_ff", 255), ("1_0", 10), ("0o17", 15),
                                          ("0b101", 5), ("-0x10", -16)])
def test_number_syntax_is_python_integer_literals(number, value):
    prog = assemble(f".segment A int32 1\n.data A {number}\nfinish\n")
    assert int(prog.segment("A").data[0]) == value


def test_data_out_of_the_dtype_range(tmp_path, capsys):
    src = tmp_path / "d.s"
    src.write_text(".segment A int8 2\n.data A 1 99999999999999999999\nfinish\n")
    err = one_line_error(capsys, "asm", src, name=f"{src}:2:")
    assert "outside the int8 range" in err


def test_non_utf8_sources_and_configs(tmp_path, capsys):
    src = tmp_path / "latin.s"
    src.write_bytes(b".config tiny\n; caf\xe9\nfinish\n")
    err = one_line_error(capsys, "asm", src, name=f"{src}:2:6")
    assert "not UTF-8" in err
    garbage = tmp_path / "g.s"
    garbage.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 300, np.uint8)))
    one_line_error(capsys, "asm", garbage, name=garbage)
    cfg = tmp_path / "c.json"
    cfg.write_bytes(b'{"name": "\xff"}')
    one_line_error(capsys, "config", "show", cfg, name=cfg)
    cfg.write_text('{"name": ')
    one_line_error(capsys, "config", "show", cfg, name=cfg)


def test_disasm_of_a_non_program(tmp_path, capsys):
    for name, blob in [("r.bin", bytes(range(256)) * 3), ("e.bin", b"")]:
        f = tmp_path / name
        f.write_bytes(blob)
        err = one_line_error(capsys, "disasm", f, name=f)
        assert "not a tensorfab program" in err
        # sim and asm take .s and .bin: a .bin is not read as assembly ("not UTF-8
        # text" at line 1, column 2, before)
        for argv in (["sim", f], ["asm", f, "-o", tmp_path / "out.bin"]):
            err = one_line_error(capsys, *argv, name=f)
            assert "not a tensorfab program (no TFABPROG header" in err


def _blob() -> bytes:
    return assemble(SMALL).to_bytes()


def _with_header(edit) -> bytes:
    blob = _blob()
    hlen = int.from_bytes(blob[12:16], "little")
    header = json.loads(blob[16:16 + hlen])
    edit(header)
    hdr = json.dumps(header).encode()
    return blob[:12] + len(hdr).to_bytes(4, "little") + hdr + blob[16 + hlen:]


@pytest.mark.parametrize("edit,match", [
    (lambda h: h["segments"][0].update(dtype="int9"), "dtype 'int9'"),
    (lambda h: h["segments"][0].pop("shape"), "missing key 'shape'"),
    (lambda h: h["segments"][0].update(shape=[0]), "positive"),
    (lambda h: h["segments"][0].update(shape=[1 << 32, 1 << 32]), "address space"),
    (lambda h: h.update(n_insns="2"), "n_insns"),
    (lambda h: h.update(n_insns=-1), "negative"),
    (lambda h: h.update(segments={}), "segments"),
    (lambda h: h["config"].update(batch=3), "power of two"),
    (lambda h: h["config"].update(bogus=1), "unknown field"),
    (lambda h: h.update(config=[]), "config"),
    (lambda h: h.update(extra=1), "unknown key"),
    (lambda h: h["segments"][0].update(name="a b"), r"segment 0 \('a b'\): the name is not a "
                                                    "name the assembler reads back"),
    (lambda h: h["segments"][0].update(name="end"), r"segment 0 \('end'\): the name is "
                                                    "reserved"),
])
def test_binary_header_is_untrusted(edit, match):
    with pytest.raises(BinaryFormatError, match=match) as info:
        Program.from_bytes(_with_header(edit), source="x.bin")
    assert str(info.value).startswith("x.bin: header: ")


def _long_header_length(blob: bytes) -> bytes:
    return blob[:12] + (3423435367).to_bytes(4, "little") + blob[16:]


@pytest.mark.parametrize("cut,match", [
    (lambda b: b[:12], r": truncated at byte 12, inside the 16-byte preamble"),
    (lambda b: b[:50], r": header: truncated: the file ends at byte 50, inside its JSON "
                       r"header \(which starts at byte 16\)$"),
    (lambda b: b[:16], r": header: truncated: the file ends at byte 16, inside its JSON"),
    (_long_header_length, r": header: the header length \(bytes 12-15\) reaches past the end "
                          r"of the file \(byte \d+\), and byte \d+ is not header text"),
])
def test_binary_cut_inside_its_header_says_truncated(tmp_path, capsys, cut, match):
    """A .bin cut inside its JSON header said 'unreadable header: Expecting ','
    delimiter: line 1 column 35 (char 34)', one cut inside the preamble the message of
    struct.unpack_from; now each says where the file ends, without repeating the
    header length the damaged file claims."""
    f = tmp_path / "cut.bin"
    f.write_bytes(cut(_blob()))
    err = one_line_error(capsys, "disasm", f, name=f).strip()
    assert re.search(match, err), err
    if len(cut(_blob())) >= 16:
        assert str(int.from_bytes(cut(_blob())[12:16], "little")) not in err


def test_side_files(tmp_path, capsys):
    src = tmp_path / "f.s"
    for fname, save, match in [
        ("x.npz", lambda p: np.savez(p, a=np.zeros(4, np.int8)), ".npy arrays"),
        ("s.npy", lambda p: np.save(p, np.array(["a", "b", "c", "d"])), "needs integers"),
        ("f.npy", lambda p: np.save(p, np.array([0.5, 1, 2, 3])), "needs integers"),
        ("n.npy", lambda p: p.write_bytes(b"\x93NUMPY garbage"), "cannot read"),
    ]:
        save(tmp_path / fname)
        src.write_text(f".segment A int8 4 file={fname}\nfinish\n")
        err = one_line_error(capsys, "asm", src, name=f"{src}:1:")
        assert match in err


def test_segment_size_that_overflows(tmp_path, capsys):
    src = tmp_path / "big.s"
    src.write_text(".segment A int8 4294967296,4294967296\nfinish\n")
    err = one_line_error(capsys, "asm", src, name=f"{src}:1:")
    assert "address space" in err
    with pytest.raises(AsmError, match="address space"):
        assemble(".segment A int32 1073741824\nfinish\n")


def test_hash_inside_a_token_is_not_a_comment(capsys):
    with pytest.raises(AsmError, match="expected an integer"):
        assemble(".config tiny\nload.inp sram=0 y=1 x=8#stride=8\nfinish\n")
    # a comment after whitespace, and ';' anywhere, still comment
    assemble(".config tiny # the preset\nfinish;done\n# whole line\n")


def test_output_paths_checked_before_the_work(tmp_path, capsys):
    src = tmp_path / "p.s"
    shutil.copy(example_path(), src)
    one_line_error(capsys, "asm", src, "-o", tmp_path / "no" / "x.bin", name="does not exist")
    one_line_error(capsys, "asm", src, "-o", tmp_path, name="is a folder")
    assert main(["asm", str(src)]) == 0
    capsys.readouterr()
    binary = tmp_path / "p.bin"
    one_line_error(capsys, "disasm", binary, "-o", tmp_path / "no" / "x.s",
                   name="does not exist")
    for opt, value, match in [("--plot", tmp_path / "t.xyz", ".png"),
                              ("--trace", tmp_path / "no" / "t.json", "does not exist"),
                              ("--outputs", tmp_path / "out.txt", ".npz")]:
        one_line_error(capsys, "sim", binary, "--target", "rtl", opt, value, name=match)
    one_line_error(capsys, "bench", "rtl-speed", "--plot", tmp_path / "no" / "x.png",
                   name="does not exist")
    one_line_error(capsys, "hw", "verilog", "--config", "tiny", "-o", tmp_path / "no" / "c.v",
                   name="does not exist")


def test_one_overwrite_policy(tmp_path, capsys):
    src = tmp_path / "p.s"
    shutil.copy(example_path(), src)
    mine = tmp_path / "mine.npz"
    mine.write_text("precious")
    one_line_error(capsys, "sim", src, "--outputs", mine, name="--force")
    assert mine.read_text() == "precious"
    assert main(["sim", str(src), "--outputs", str(mine), "--force", "--json"]) == 0
    assert sorted(np.load(mine)) == ["C"]
    # a file tensorfab wrote is replaced without --force
    assert main(["sim", str(src), "--outputs", str(mine), "--json"]) == 0
    assert not (tmp_path / "mine.npz.npz").exists()


def test_file_names_are_not_markup(tmp_path, capsys):
    src = tmp_path / "[b]ok.s"
    shutil.copy(example_path(), src)
    code, out, _ = run(capsys, "sim", src)
    assert code == 0 and "[b]ok.s" in out


def test_config_show_output_is_a_config(tmp_path, capsys):
    code, out, _ = run(capsys, "config", "show", "tiny", "--json")
    (tmp_path / "t.json").write_text(out)
    code, out2, err = run(capsys, "config", "show", tmp_path / "t.json", "--json")
    assert code == 0, err
    assert json.loads(out2) == json.loads(out)


def test_help_lists_every_command_and_benchmark(capsys):
    from tensorfab.benches import BENCHES

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("config", "asm", "disasm", "sim", "bench", "hw", "demo"):
        assert f"    {cmd} " in out
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in BENCHES)
    with pytest.raises(SystemExit):
        main(["sim", "--help"])
    assert "(default: fsim)" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("tensorfab ")


@pytest.mark.parametrize("line,missing", [
    ("load.inp sram=0 y=1 x=8 stride=8", "dram="),
    ("load.wgt dram=0 y=1 x=1 stride=1", "sram="),
    ("store sram=0 dram=0 y=1 x=1", "stride="),
    ("gemm iter=1,1", "uop="),
    ("alu.add uop=0:1 dst=0,0", "iter="),
])
def test_fields_without_default_are_required(line, missing):
    with pytest.raises(AsmError, match=f"needs .*{missing}") as info:
        assemble(f".config tiny\n{line}\nfinish\n", source="r.s")
    assert str(info.value).startswith("r.s:2:1: ")


def test_optional_fields_take_their_documented_defaults():
    prog = assemble(".config tiny\nload.inp sram=0 dram=0 y=1 x=1 stride=1\n"
                    "gemm uop=0:1 iter=1,1\nalu.max uop=0:1 iter=1,1\nfinish\n")
    load, gemm, alu = prog.insns[:3]
    assert (load.pad_top, load.pad_bottom, load.pad_left, load.pad_right) == (0, 0, 0, 0)
    assert (gemm.acc_factor_out, gemm.inp_factor_in, gemm.wgt_factor_out, gemm.reset) == (
        0, 0, 0, False)
    assert (alu.use_imm, alu.imm, alu.dst_factor_out, alu.src_factor_in) == (False, 0, 0, 0)


@pytest.mark.parametrize("argv", [["config", "show", "default"], ["config", "list"],
                                  ["inspect", "MODEL"]])
def test_closed_stdout_ends_quietly(argv):
    """``tensorfab ... | head``: the reader closed the pipe before the command wrote."""
    import os
    import subprocess
    import sys

    from tensorfab.models.digits_cnn import model_path

    argv = [str(model_path()) if a == "MODEL" else a for a in argv]
    read, write = os.pipe()
    os.close(read)  # every write of the command fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "tensorfab.cli", *argv], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write)
    assert done.stderr == "" and done.returncode == 1, done.stderr


@pytest.mark.parametrize("target,words", [
    ("socket://localhost:99999", "Port out of range"),
    ("serial://[::1", "Invalid IPv6 URL"),
    ("virtual://[x", "Invalid IPv6 URL"),
    ("tcp://[::1:5", "Invalid IPv6 URL"),
    ("tcp://localhost:99999", "Port out of range"),
    ("tracker://[::1:5/fsim", "Invalid IPv6 URL"),
])
def test_a_target_urllib_cannot_parse_is_one_line(tmp_path, capsys, target, words):
    """A port beyond 65535 or an unclosed '[' in --target was urllib's ValueError
    traceback; it is one line naming the target."""
    src = tmp_path / "p.s"
    src.write_text(SMALL)
    token = ["--token", "t"] if target.startswith(("tcp", "tracker")) else []
    err = one_line_error(capsys, "sim", src, "--target", target, *token, name=target)
    assert words in err


@pytest.mark.parametrize("target", ["serial:///dev/ttyUSB0?baud=0",
                                    "socket://127.0.0.1:9?baud=0"])
def test_a_baud_of_0_is_refused_not_taken_for_115200(tmp_path, capsys, target):
    """?baud=0 opened the port at 115200 as if no baud were given; it is refused."""
    src = tmp_path / "p.s"
    src.write_text(SMALL)
    err = one_line_error(capsys, "sim", src, "--target", target, name=target)
    assert "baud 0 must be positive" in err


@pytest.mark.parametrize("target,words", [
    ("virtual://?mem_byte=65536", "unknown option mem_byte (a virtual board takes"),
    ("virtual://?exact=maybe", "exact='maybe': give 1 or 0"),
    ("serial:///dev/ttyUSB0?buad=9600", "unknown option buad (a serial:// target takes baud)"),
    ("socket://127.0.0.1:9?tokn=t", "unknown option tokn (a socket:// target takes baud, "
                                    "token)"),
])
def test_a_misspelt_target_option_is_refused_not_left_out(tmp_path, capsys, target, words):
    """virtual://?mem_byte=65536 ran on a board of the default 1 MiB, ?exact=maybe ran
    exact, serial://...?buad=9600 at 115200: options were read by name and the rest left
    out without a word."""
    src = tmp_path / "p.s"
    src.write_text(SMALL)
    err = one_line_error(capsys, "sim", src, "--target", target, name=target)
    assert words in err


def test_hw_verilog_over_a_program_names_the_reason_truly(tmp_path, capsys):
    """`hw verilog -o prog.bin` over the program `asm` wrote said the file 'was not
    written by tensorfab' (it was); the file is kept and the message says why."""
    prog = tmp_path / "prog.bin"
    assert main(["asm", str(example_path()), "-o", str(prog)]) == 0
    before = prog.read_bytes()
    capsys.readouterr()
    assert main(["hw", "verilog", "-o", str(prog)]) == 2
    assert capsys.readouterr().err == (f"error: {prog} exists and is not a file this command "
                                       f"writes; pass --force to overwrite it\n")
    assert prog.read_bytes() == before
