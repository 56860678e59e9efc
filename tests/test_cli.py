import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorfab.cli import main
from tensorfab.example import example_path
from tensorfab.isa import PRESETS


def test_config_show_prints_json_with_derived_values(capsys):
    assert main(["config", "show", "default", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["block_in"] == 16
    assert out["derived"]["peak_macs_per_cycle"] == 256
    assert out["derived"]["field_widths"]["gemm"]["uop_begin"] == 13
    assert out["derived"]["insn_width"] == 128
    assert "alu" in out["derived"]["field_widths"]
    # the iCEBreaker's up5k has no vector ALU: no ALU instruction, STOREs with requant
    assert main(["config", "show", "up5k", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["vector_alu"] is False
    assert "alu" not in out["derived"]["field_widths"]
    assert out["derived"]["field_widths"]["store"]["requant"] == 1


def test_config_list_lists_presets_and_board_configs_and_takes_no_name(capsys):
    """`config list tiny` listed every config, the name silently ignored; `--json`
    printed the text table."""
    assert main(["config", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["configs"]
    assert [r["name"] for r in rows if not r["board_config"]] == list(PRESETS)
    assert {"name": "ecp5-25f", "board_config": True, "shape": [1, 4, 2],
            "macs_per_cycle": 8} in rows
    assert main(["config", "list", "tiny"]) == 2
    assert capsys.readouterr().err == ("error: config list takes no name (given 'tiny'); to "
                                       "see one config: tensorfab config show tiny\n")


def test_config_show_unknown_is_a_clear_error(capsys):
    assert main(["config", "show", "huge"]) == 2
    assert "not a preset" in capsys.readouterr().err


def test_asm_disasm_round_trip(tmp_path, capsys):
    src = tmp_path / "p.s"
    shutil.copy(example_path(), src)
    assert main(["asm", str(src), "-o", str(tmp_path / "p.bin"), "--config", "default"]) == 0
    assert "11 instructions" in capsys.readouterr().out
    assert main(["disasm", str(tmp_path / "p.bin")]) == 0
    text = capsys.readouterr().out
    assert text.startswith(".config default\n")
    (tmp_path / "q.s").write_text(text)
    assert main(["asm", str(tmp_path / "q.s"), "-o", str(tmp_path / "q.bin")]) == 0
    assert (tmp_path / "q.bin").read_bytes() == (tmp_path / "p.bin").read_bytes()


def test_asm_refuses_to_overwrite_a_foreign_file(tmp_path, capsys):
    src = tmp_path / "p.s"
    shutil.copy(example_path(), src)
    precious = tmp_path / "notes.bin"
    precious.write_text("my notes")
    assert main(["asm", str(src), "-o", str(precious)]) == 2
    assert "--force" in capsys.readouterr().err
    assert precious.read_text() == "my notes"
    assert main(["asm", str(src), "-o", str(precious), "--force"]) == 0
    # our own output may be replaced without --force
    assert main(["asm", str(src), "-o", str(precious)]) == 0


def test_asm_and_disasm_never_overwrite_their_input(tmp_path, capsys):
    """`asm prog.bin` (its default output FILE.bin is the input) wrote onto its input,
    and `asm p.s -o p.s --force` replaced the source with a binary; an output is never
    the input now, --force or not."""
    src = tmp_path / "p.s"
    shutil.copy(example_path(), src)
    binary = tmp_path / "prog.bin"
    assert main(["asm", str(src), "-o", str(binary)]) == 0
    before = binary.stat().st_mtime_ns, binary.read_bytes()
    text = src.read_text()
    capsys.readouterr()
    for argv in (["asm", str(binary)], ["asm", str(binary), "--force"],
                 ["asm", str(binary), "-o", str(binary)],
                 ["disasm", str(binary), "-o", str(binary), "--force"]):
        assert main(argv) == 2
        assert capsys.readouterr().err == (f"error: {binary}: the output would overwrite "
                                           "the input; name another output with -o\n")
    os.symlink(src, tmp_path / "link.s")
    assert main(["asm", str(src), "-o", str(tmp_path / "link.s"), "--force"]) == 2
    assert "(the input " in capsys.readouterr().err
    assert main(["asm", str(src), "-o", str(src), "--force"]) == 2
    assert (binary.stat().st_mtime_ns, binary.read_bytes()) == before
    assert src.read_text() == text
    assert main(["asm", str(binary), "-o", str(tmp_path / "copy.bin")]) == 0
    assert (tmp_path / "copy.bin").read_bytes() == before[1]


def test_asm_error_names_file_line_column(tmp_path, capsys):
    src = tmp_path / "bad.s"
    src.write_text(".config tiny\nfinish\ngemm uop=0:1 iter=1,1 wgt=1,0\n")
    assert main(["asm", str(src)]) == 2
    err = capsys.readouterr().err
    assert "bad.s:2:1" in err and "FINISH must be the last" in err


def test_asm_config_directive_takes_board_configs(tmp_path, capsys):
    """`.config ecp5-25f` was refused ('not a preset (tiny, ...) nor a JSON config
    file') though `--config ecp5-25f` works; now it names the board config, and an
    unknown name's error lists the board configs too."""
    src = tmp_path / "b.s"
    src.write_text(".config ecp5-25f\nfinish\n")
    assert main(["asm", str(src), "--config", "ecp5-25f", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"] == "ecp5-25f"
    assert main(["sim", str(src), "--json"]) == 0
    capsys.readouterr()
    src.write_text(".config ecp5-52f\nfinish\n")
    assert main(["asm", str(src)]) == 2
    err = capsys.readouterr().err
    assert "b.s:1:9: " in err and "'ecp5-52f'" in err
    assert "ecp5-25f, ecp5-25f-4x4, ecp5-85f, up5k" in err


def test_config_mismatch_between_binary_and_option(tmp_path, capsys):
    src = tmp_path / "p.s"
    shutil.copy(example_path(), src)
    assert main(["asm", str(src)]) == 0
    assert main(["disasm", str(tmp_path / "p.bin")]) == 0
    capsys.readouterr()
    assert main(["sim", str(tmp_path / "p.bin"), "--config", "tiny"]) == 2
    assert "not 'tiny'" in capsys.readouterr().err


def test_config_mismatch_of_one_name_names_the_fields(tmp_path, capsys):
    """A JSON config named 'tiny' with another inp_depth said '.config tiny conflicts
    with the config given (tiny)' (and for a .bin, only the option): now the fields
    that differ are named."""
    cfg = tmp_path / "t.json"
    cfg.write_text(PRESETS["tiny"].replace(inp_depth=128).to_json())
    src = tmp_path / "p.s"
    src.write_text(".config tiny\nfinish\n")
    assert main(["sim", str(src), "--config", str(cfg)]) == 2
    assert "another config named 'tiny': inp_depth 256 vs 128" in capsys.readouterr().err
    assert main(["asm", str(src)]) == 0
    capsys.readouterr()
    assert main(["sim", str(tmp_path / "p.bin"), "--config", str(cfg)]) == 2
    assert "(also named 'tiny': inp_depth 256 vs 128)" in capsys.readouterr().err


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "tensorfab"
    res = subprocess.run([str(exe), "config", "list"], capture_output=True, text=True,
                         check=True)
    for name in PRESETS:
        assert name in res.stdout


@pytest.mark.parametrize("missing", ["nope.s"])
def test_missing_file(missing, capsys):
    assert main(["sim", missing]) == 2
    assert "no such file" in capsys.readouterr().err


def test_gemm_busy_fraction_from_intervals():
    from tensorfab.benches.rtl_gemm_busy import gemm_busy_fraction
    from tensorfab.sim.trace import Interval

    ivs = [Interval("load", "busy", 0, 50), Interval("gemm", "busy", 10, 40),
           Interval("gemm", "busy", 45, 105), Interval("store", "busy", 100, 120)]
    assert gemm_busy_fraction(ivs) == (10, 105, 90)
    with pytest.raises(ValueError, match="no GEMM"):
        gemm_busy_fraction(ivs[:1])


def test_bench_names_are_registered(capsys):
    from tensorfab.benches import BENCHES

    assert {"fsim-gemm", "rtl-gemm-busy", "rtl-speed", "conv2d"} <= set(BENCHES)
    assert main(["bench", "no-such-bench"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err
    assert main(["bench", "fsim-gemm", "--target", "rtl"]) == 2
    assert "no --target option" in capsys.readouterr().err


def test_bench_conv2d_passes_target_and_plot(monkeypatch, capsys, tmp_path):
    import tensorfab.benches.conv2d as bench

    seen = {}

    def fake(target="rtl", config="default", **kw):
        seen.update(kw, target=target)
        return {"bench": "conv2d", "target": target}

    monkeypatch.setattr(bench, "run_conv2d_bench", fake)
    assert main(["bench", "conv2d", "--target", "fsim", "--plot", str(tmp_path / "u.png"),
                 "--json"]) == 0
    assert seen == {"target": "fsim", "plot": str(tmp_path / "u.png")}
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["target"] == "fsim"


def test_bench_rtl_speed_profile_is_the_module_option(monkeypatch, capsys):
    """``tensorfab bench rtl-speed --profile`` was 'unrecognized arguments: --profile'
    (only ``python -m tensorfab.benches.rtl_speed --profile`` profiled); the command
    now asks the benchmark for what the module's own --profile asks, and leaves it out
    as the module does; a benchmark without the option refuses it."""
    import tensorfab.benches.rtl_speed as bench

    calls = []

    def fake(*args, **kw):
        calls.append(kw["profile_cycles"])
        return {"bench": "rtl-speed"}

    monkeypatch.setattr(bench, "run_rtl_speed_bench", fake)
    for flag in (["--profile"], []):
        bench.main([*flag, "--json"])
        assert main(["bench", "rtl-speed", *flag, "--plot", "", "--json"]) == 0
        assert calls[-1] == calls[-2]
    assert calls[0] > 0 and calls[2] == 0
    capsys.readouterr()
    assert main(["bench", "fsim-gemm", "--profile"]) == 2
    assert "benchmark 'fsim-gemm' has no --profile option" in capsys.readouterr().err


def test_bench_resnet18_requant_stage_is_the_module_option(monkeypatch, capsys):
    """``tensorfab bench resnet18 --requant-stage alu`` was 'unrecognized arguments'
    (only ``python -m tensorfab.benches.resnet18`` took it); the command now gives the
    benchmark what the module's own option gives, leaves it out when not given (the
    benchmark's default), checks it against the compiler's ``REQUANT_STAGES`` and
    refuses it for a benchmark without the option."""
    import tensorfab.benches.resnet18 as bench
    from tensorfab.compiler.tensor.epilogue import REQUANT_STAGES

    calls = []

    def fake(*args, **kw):
        calls.append(kw.get("requant_stage"))
        return {"bench": "resnet18"}

    monkeypatch.setattr(bench, "run_resnet18_bench", fake)
    for stage in REQUANT_STAGES:
        bench.main(["--requant-stage", stage, "--plot", ""])
        assert main(["bench", "resnet18", "--requant-stage", stage, "--plot", "",
                     "--json"]) == 0
        assert calls[-2:] == [stage, stage]
    assert main(["bench", "resnet18", "--plot", "", "--json"]) == 0
    assert calls[-1] is None
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["bench", "resnet18", "--requant-stage", "gemm"])
    assert ("argument --requant-stage: invalid choice: 'gemm' (choose from "
            f"{', '.join(map(repr, REQUANT_STAGES))})") in capsys.readouterr().err
    assert main(["bench", "fsim-gemm", "--requant-stage", "alu"]) == 2
    assert "benchmark 'fsim-gemm' has no --requant-stage option" in capsys.readouterr().err


def test_bench_resnet18_takes_every_module_option(monkeypatch, capsys):
    """``tensorfab bench resnet18`` refused the module's --config, --image-size,
    --separate-adds and --agreement ('unrecognized arguments' or 'has no --config
    option'); the command now gives the benchmark (or, under --agreement, the float
    agreement) the same arguments as ``python -m tensorfab.benches.resnet18`` with the
    same options, each alone and all together, and other benchmarks refuse them."""
    import inspect

    import tensorfab.benches.resnet18 as bench

    calls = []

    def recorder(real):
        def fake(*args, **kw):
            bound = inspect.signature(real).bind(*args, **kw)
            bound.apply_defaults()
            calls.append((real.__name__, dict(bound.arguments)))
            return {"bench": "resnet18"}
        return fake

    for name in ("run_resnet18_bench", "float_agreement"):
        monkeypatch.setattr(bench, name, recorder(getattr(bench, name)))
    together = ["--config", "tiny", "--image-size", "32", "--separate-adds"]
    for options in (["--config", "tiny"], ["--image-size", "32"], ["--separate-adds"],
                    together, [*together, "--target", "fsim", "--requant-stage", "alu"],
                    ["--agreement", "3"], [*together, "--agreement", "2"]):
        assert bench.main(options) == 0
        assert main(["bench", "resnet18", *options, "--json"]) == 0
        assert calls[-2] == calls[-1], options
    assert calls[-1] == ("float_agreement", {"images": 2, "image_size": 32, "config": "tiny",
                                             "seed": 0, "fuse": False})
    capsys.readouterr()
    for option in (["--config", "tiny"], ["--image-size", "32"], ["--separate-adds"],
                   ["--agreement", "3"]):
        assert main(["bench", "fsim-gemm", *option]) == 2
        assert f"benchmark 'fsim-gemm' has no {option[0]} option" in capsys.readouterr().err


def test_conv2d_bench_on_rtl(tmp_path):
    """One layer, two thread counts: the record, the best count and the PNG."""
    from tensorfab.benches.conv2d import run_conv2d_bench

    out = run_conv2d_bench("rtl", layers=["C10"], vthreads=(1, 2), plot=tmp_path / "u.png")
    assert out["all_correct"]
    rec = out["layers"]["C10"]["2"]
    assert {"cycles", "macs", "utilization", "roofline_cycles"} <= set(rec)
    assert rec["utilization"] == pytest.approx(rec["macs"] / (rec["cycles"] * 256), abs=1e-4)
    assert rec["roofline_cycles"] >= rec["macs"] / 256
    assert abs(rec["model_cycles"] - rec["cycles"]) < 0.05 * rec["cycles"]
    best = out["best"]["C10"]
    assert out["mean_utilization_best"] == best["utilization"] > 0.8
    assert best["memory_heavy"] and best["speedup_2_over_1"] > 1
    assert (tmp_path / "u.png").read_bytes()[:4] == b"\x89PNG"
    json.dumps(out)


def test_shipped_example_is_generated_from_its_module() -> None:
    """tensorfab/examples/gemm_requant.s is what tensorfab.example generates (rewrite
    it with ``python -m tensorfab.example --write``)."""
    from tensorfab.example import example_source

    assert example_path().read_text() == example_source()


def test_example_reference_matches_an_independent_computation() -> None:
    """The demo's reference, checked on the example's own data by a plain loop."""

    from tensorfab.example import MULT, SHIFT, reference
    from tensorfab.isa.asm import assemble_file

    prog = assemble_file(example_path())
    a, w, bias = (prog.segment(s).data for s in ("A", "W", "bias"))
    got = reference(a, w, bias)
    m, kb, blk = a.shape
    nb = w.shape[0]
    for i in range(m):
        for n in range(nb * blk):
            acc = int(bias.reshape(-1)[n]) + sum(
                int(a[i, k // blk, k % blk]) * int(w[n // blk, k // blk, n % blk, k % blk])
                for k in range(kb * blk))
            p = acc * MULT
            q = (abs(p) + (1 << (SHIFT - 1))) >> SHIFT
            q = max(0, min(127, q if p >= 0 else -q))
            assert got[i, n // blk, n % blk] == q


# ------------------------------------------------------------- outputs (issue 10)
@pytest.fixture
def no_run(monkeypatch):
    """Make every long piece of work fail the test if it starts: outputs must be
    checked before it."""
    import tensorfab.benches as benches
    import tensorfab.hw.verilog as verilog
    from tensorfab.sim.fsim import FunctionalSimulator
    from tensorfab.sim.rtl.device import RtlSimulator

    def started(*a, **k):
        raise AssertionError("the work started before its outputs were checked")

    monkeypatch.setattr(FunctionalSimulator, "run", started)
    monkeypatch.setattr(RtlSimulator, "run", started)
    monkeypatch.setattr(verilog, "core_verilog", started)
    monkeypatch.setitem(benches.BENCHES, "fsim-gemm", started)
    monkeypatch.setitem(benches.BENCHES, "conv2d", started)


def _one_line_error(capsys, *words: str) -> None:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize(("argv", "words"), [
    (["asm", "{ex}", "-o", "/nonexistent/x.bin"], ["/nonexistent", "does not exist"]),
    (["asm", "{ex}", "-o", "{tmp}"], ["is a folder"]),
    (["disasm", "{ex}", "-o", "/nonexistent/x.s"], ["does not exist"]),
    (["sim", "{ex}", "--outputs", "/nonexistent/o.npz"], ["does not exist"]),
    (["sim", "{ex}", "--outputs", "{tmp}/out.txt"], ["out.txt", ".npz"]),
    (["sim", "{ex}", "--target", "rtl", "--plot", "{tmp}/t.xyz"], ["t.xyz", ".png"]),
    (["sim", "{ex}", "--target", "rtl", "--trace", "{tmp}/missing/t.json"],
     ["missing", "does not exist"]),
    (["sim", "{ex}", "--target", "rtl", "--plot", "{tmp}"], ["is a folder"]),
    (["sim", "{ex}", "--target", "rtl", "--plot", "{tmp}/t"], ["without a suffix", ".png"]),
    (["bench", "fsim-gemm", "--plot", "{tmp}/b.xyz"], ["b.xyz", ".png"]),
    (["bench", "conv2d", "--plot", "/nonexistent/b.png"], ["does not exist"]),
    (["hw", "verilog", "-o", "/nonexistent/core.v"], ["does not exist"]),
    (["hw", "verilog", "-o", "{tmp}"], ["is a folder"]),
])
def test_unwritable_outputs_fail_in_one_line_before_the_work(argv, words, tmp_path, capsys,
                                                            no_run):
    argv = [a.format(ex=example_path(), tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    _one_line_error(capsys, *words)


def test_read_only_folder_is_refused_before_the_work(tmp_path, capsys, no_run, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):  # root ignores permissions: let os.access say what it would
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m: Path(p) != ro and real(p, m))
    assert main(["hw", "verilog", "-o", str(ro / "core.v")]) == 2
    _one_line_error(capsys, "not writable")


@pytest.mark.parametrize("option", ["--trace", "--plot"])
def test_trace_and_plot_refuse_a_foreign_file_before_the_run(option, tmp_path, capsys,
                                                             no_run):
    precious = tmp_path / ("t.json" if option == "--trace" else "t.png")
    precious.write_text("my notes")
    assert main(["sim", str(example_path()), "--target", "rtl", option, str(precious)]) == 2
    _one_line_error(capsys, "--force")
    assert precious.read_text() == "my notes"


def test_bench_plot_refuses_a_foreign_file_and_force_overrides(tmp_path, capsys,
                                                               monkeypatch):
    import tensorfab.benches as benches

    seen = []
    monkeypatch.setitem(benches.BENCHES, "conv2d",
                        lambda target="rtl", plot=None: seen.append(plot) or {"ok": 1})
    precious = tmp_path / "u.png"
    precious.write_text("my notes")
    assert main(["bench", "conv2d", "--plot", str(precious)]) == 2
    _one_line_error(capsys, "--force")
    assert seen == []
    assert main(["bench", "conv2d", "--plot", str(precious), "--force", "--json"]) == 0
    assert seen == [str(precious)]


def test_tensorfab_plots_and_traces_are_recognised_as_ours(tmp_path):
    from tensorfab.sim.png_figure import is_tensorfab_png
    from tensorfab.sim.trace import (
        Interval,
        is_tensorfab_trace,
        plot_timeline,
        write_chrome_trace,
    )

    ivs = [Interval("load", "busy", 0, 5)]
    png = plot_timeline(ivs, tmp_path / "t.png")
    trace = write_chrome_trace(ivs, tmp_path / "t.json")
    assert is_tensorfab_png(png) and is_tensorfab_trace(trace)
    other = tmp_path / "o.json"
    other.write_text('{"traceEvents": []}')
    assert not is_tensorfab_png(trace) and not is_tensorfab_trace(other)
    assert not is_tensorfab_trace(png)


def test_sim_outputs_writes_the_named_file_and_keeps_foreign_ones(tmp_path, capsys):
    import numpy as np

    out = tmp_path / "out.npz"
    assert main(["sim", str(example_path()), "--outputs", str(out), "--json"]) == 0
    with np.load(out) as z:
        first = {k: z[k] for k in z.files}
    assert first and not (tmp_path / "out.npz.npz").exists()
    # ours (the same output segments): replaced without --force
    assert main(["sim", str(example_path()), "--outputs", str(out), "--json"]) == 0
    foreign = tmp_path / "mine.npz"
    np.savez(foreign, something=np.arange(3))
    capsys.readouterr()
    assert main(["sim", str(example_path()), "--outputs", str(foreign)]) == 2
    _one_line_error(capsys, "--force")
    with np.load(foreign) as z:
        assert list(z.files) == ["something"]


def test_compiler_error_in_a_benchmark_is_one_line(monkeypatch, capsys, tmp_path):
    """A real ScheduleError from the compiler (padding wider than a LOAD can pad)
    reaches the command as one line, exit 2."""
    import tensorfab.compiler as compiler
    from tensorfab.compiler import ScheduleError, Workload, conv2d
    from tensorfab.isa import get_config

    pad = 40
    bad = Workload.conv2d(1, 16, 4, 4, 16, 3, 1, pad, name="Cbad")
    with pytest.raises(ScheduleError):  # the compiler itself refuses it
        conv2d(get_config("default"), np.zeros((1, 16, 4, 4), np.int8),
               np.zeros((16, 16, 3, 3), np.int8), stride=1, padding=pad)
    monkeypatch.setattr(compiler, "RESNET18_CONV", {"Cbad": bad})
    assert main(["bench", "conv2d", "--target", "fsim", "--plot", "", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "pad" in captured.err


# ------------------------------------------------------------------ help (issue 10)
def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_lists_every_command_and_examples(capsys):
    from tensorfab.cli import build_parser

    text = _help([], capsys)
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    assert {"config", "asm", "disasm", "sim", "bench", "hw", "demo"} <= set(sub.choices)
    for name in sub.choices:
        assert f"    {name} " in text, name
    assert "examples:" in text and "--version" in text


def test_version_is_the_installed_distribution(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"tensorfab {version('tensorfab')}"


def test_bench_help_lists_every_registered_benchmark(capsys):
    from tensorfab.benches import BENCHES

    text = _help(["bench"], capsys)
    for name, fn in BENCHES.items():
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(name + " "))
        assert fn.__doc__.strip().splitlines()[0] in line


@pytest.mark.parametrize("command", ["config", "asm", "disasm", "sim", "bench", "hw", "demo"])
def test_every_command_has_help_and_examples_that_parse(command, capsys):
    import shlex

    from tensorfab.cli import build_parser

    text = _help([command], capsys)
    assert "examples:" in text
    examples = text.split("examples:\n", 1)[1].splitlines()
    assert examples
    for line in examples:
        argv = shlex.split(line)
        assert argv[:2] == ["tensorfab", command]
        build_parser().parse_args(argv[1:])  # SystemExit (a failure) if it does not parse
    for action in build_parser()._subparsers._group_actions[0].choices[command]._actions:
        assert action.help, f"{command} {action.dest} has no help"


def test_sim_help_shows_the_default_target(capsys):
    assert "(default: fsim)" in " ".join(_help(["sim"], capsys).split())


# -------------------------------------------------------------- progress (issue 10)
@pytest.fixture
def terminal(monkeypatch):
    """stderr as a terminal: what the spinner and the build steps show."""
    import io

    from rich.console import Console

    import tensorfab.cli as cli

    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    monkeypatch.setattr(cli, "err_console", console)
    return console.file


def test_long_work_says_what_is_happening(terminal, monkeypatch, tmp_path):
    import tensorfab.hw.verilog as verilog

    monkeypatch.setattr(verilog, "core_verilog", lambda cfg: "// tensorfab_core: x\n")
    assert main(["hw", "verilog", "--config", "tiny", "-o", str(tmp_path / "c.v")]) == 0
    assert "generating the Verilog of the tiny core" in terminal.getvalue()


def test_rtl_build_steps_are_shown_and_the_built_line_kept(terminal):
    from tensorfab.cli import _working
    from tensorfab.sim.rtl.build import _step

    with _working("running p.s on rtl (tiny)"):
        _step("verilating the core")
        _step("built the tiny RTL model in 3 s; later runs reuse it from /cache/k")
    _step("not shown: no listener any more")
    out = terminal.getvalue()
    assert "running p.s on rtl (tiny)" in out and "verilating the core" in out
    assert "built the tiny RTL model in 3 s; later runs reuse it from /cache/k\n" in out
    assert "not shown" not in out


def test_json_output_is_quiet_on_stderr(terminal, capsys):
    assert main(["sim", str(example_path()), "--json"]) == 0
    assert terminal.getvalue() == ""
    json.loads(capsys.readouterr().out)
    assert main(["sim", str(example_path())]) == 0
    assert "running gemm_requant.s on fsim" in terminal.getvalue()


@pytest.mark.slow
def test_cold_rtl_build_is_announced_once(terminal, monkeypatch, tmp_path):
    """A cold build (fresh cache) shows its steps and the line saying it is cached; the
    next run builds nothing."""
    import tensorfab.sim.rtl.build as build

    monkeypatch.setenv("TENSORFAB_VERILATOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_BUILT", {})
    from test_doc_snippets import ROOT, fenced_blocks

    src = tmp_path / "p.s"  # the README's program (tiny)
    src.write_text(next(t for lang, _, t in fenced_blocks(ROOT / "README.md") if lang == "asm"))
    assert main(["sim", str(src), "--target", "rtl"]) == 0
    out = terminal.getvalue()
    assert "building the tiny RTL model once (cached in" in out
    assert "verilating the core" in out
    assert f"later runs reuse it from {tmp_path / 'cache'}" in out
    terminal.truncate(0)
    monkeypatch.setattr(build, "_BUILT", {})
    assert main(["sim", str(src), "--target", "rtl"]) == 0
    assert "building" not in terminal.getvalue()


def test_stderr_that_is_a_log_gets_only_the_build_lines(capsys):
    from tensorfab.cli import _working
    from tensorfab.sim.rtl.build import _step

    assert main(["sim", str(example_path())]) == 0
    assert capsys.readouterr().err == ""
    with _working("running"):
        _step("building the tiny RTL model once (cached in /c/k)")
        _step("verilating the core")
        _step("built the tiny RTL model in 3 s; later runs reuse it from /c/k")
    assert capsys.readouterr().err.splitlines() == [
        "building the tiny RTL model once (cached in /c/k)",
        "built the tiny RTL model in 3 s; later runs reuse it from /c/k"]


def test_model_command_outputs_follow_the_same_policy(tmp_path, capsys, monkeypatch):
    """compile and run check -o before importing or running anything."""
    import tensorfab.compiler.frontend.onnx_import as onnx_import
    import tensorfab.runtime.artifact as artifact

    def started(*a, **k):
        raise AssertionError("the work started before its output was checked")

    monkeypatch.setattr(onnx_import, "prepare_model", started)
    monkeypatch.setattr(artifact, "load_model", started)
    cases = [(["compile", "m.onnx", "-o", "/nonexistent/m.tfm"], "does not exist"),
             (["compile", "m.onnx", "-o", str(tmp_path / "m.bin")], ".tfm"),
             (["run", "m.tfm", "-o", str(tmp_path / "out.txt")], ".npy"),
             (["run", "m.tfm", "-o", str(tmp_path)], "is a folder")]
    foreign = tmp_path / "notes.tfm"
    foreign.write_text("my notes")
    cases.append((["compile", "m.onnx", "-o", str(foreign)], "--force"))
    for argv, words in cases:
        assert main(argv) == 2, argv
        _one_line_error(capsys, words)
    assert foreign.read_text() == "my notes"
