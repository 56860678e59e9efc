"""Every assembly and shell snippet of README.md and docs/*.md works as written.

Fenced ```` ```asm ```` blocks are complete programs: each is assembled and run on the
functional simulator. Fenced ```` ```sh ```` (``shell``, ``console``, ``bash``) blocks:
each ``tensorfab ...`` line parses with the command's own argument parser and names
benchmarks, executors and presets that exist; a block that starts with ``tensorfab
samples`` is a session run as written, line after line, in an empty folder.
Fragments of assembly belong in plain ```` ``` ```` or ```` ```text ```` blocks.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from tensorfab.benches import BENCHES
from tensorfab.cli import build_parser
from tensorfab.fpga_builds.board_configs import board_config_names
from tensorfab.fpga_builds.boards import BOARDS
from tensorfab.isa import PRESETS
from tensorfab.isa.asm import assemble
from tensorfab.isa.device import device_schemes, target_scheme
from tensorfab.sim import FunctionalSimulator

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = {"sh", "shell", "console", "bash"}
_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```\s*$", re.M | re.S)


def fenced_blocks(path: Path) -> list[tuple[str, int, str]]:
    """``(language, first line number, text)`` of every fenced block of ``path``."""
    text = path.read_text()
    return [(m.group(1).lower(), text.count("\n", 0, m.start(2)) + 1, m.group(2))
            for m in _FENCE.finditer(text)]


def _snippets(langs: set[str]) -> list[tuple[str, str]]:
    return [(f"{p.relative_to(ROOT)}:{line}", body) for p in DOCS
            for lang, line, body in fenced_blocks(p) if lang in langs]


ASM = _snippets({"asm"})
SHELL_LINES = [(f"{where}+{k}", line) for where, body in _snippets(SHELLS)
               for k, line in enumerate(body.splitlines())
               if line.strip().startswith("tensorfab ")]


def test_fence_parser_finds_blocks_with_their_line(tmp_path: Path) -> None:
    md = "x\n```asm\n.config tiny\n```\n\n```sh\ntensorfab demo\n```\n"
    p = tmp_path / "fence-test.md"
    p.write_text(md)
    assert fenced_blocks(p) == [("asm", 3, ".config tiny\n"), ("sh", 7, "tensorfab demo\n")]


def test_the_docs_have_snippets() -> None:
    assert any(w.startswith("README.md") for w, _ in ASM)
    assert len(SHELL_LINES) >= 10


@pytest.mark.parametrize(("where", "text"), ASM, ids=[w for w, _ in ASM])
def test_asm_snippet_assembles_and_runs(where: str, text: str) -> None:
    prog = assemble(text, source=where)
    res = FunctionalSimulator().run(prog)
    assert res.counters.compute_insns + res.counters.store_insns > 0


def test_readme_program_computes_a_times_w_transposed() -> None:
    """The README's program against numpy, on its own data."""
    where, text = next((w, t) for w, t in ASM if w.startswith("README.md"))
    prog = assemble(text, source=where)
    a = prog.segment("A").data.astype(np.int64)  # rows, K blocks, block_in
    w = prog.segment("W").data.astype(np.int64)  # N blocks, K blocks, block_out, block_in
    want = np.einsum("rki,nkoi->rno", a, w)
    got = FunctionalSimulator().run(prog).outputs["C"]
    np.testing.assert_array_equal(got, want.astype(np.int8))
    assert got.reshape(2, 4).tolist() == [[27, 2, 3, 4], [-1, 0, 1, 0]]


def test_readme_shows_what_sim_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    """`tensorfab sim prog.s` on the README's program prints the output the README
    shows (the text block after the program's description)."""
    from tensorfab.cli import main

    text = next(t for w, t in ASM if w.startswith("README.md"))
    shown = next(body for lang, _, body in fenced_blocks(ROOT / "README.md")
                 if lang == "text" and body.startswith("C int8"))
    (tmp_path / "prog.s").write_text(text)
    assert main(["sim", str(tmp_path / "prog.s")]) == 0
    assert shown in capsys.readouterr().out


@pytest.mark.parametrize(("where", "line"), SHELL_LINES, ids=[w for w, _ in SHELL_LINES])
def test_shell_snippet_parses_with_the_cli(where: str, line: str) -> None:
    argv = shlex.split(line, comments=True)[1:]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and --version exit 0
        if exc.code != 0:
            pytest.fail(f"{where}: `{line.strip()}` does not parse (exit {exc.code})")
        return
    if args.command == "bench":
        assert args.name in BENCHES, f"{where}: no benchmark {args.name!r}"
    if getattr(args, "target", None):
        assert target_scheme(args.target) in device_schemes(), \
            f"{where}: no executor {args.target!r}"
    if getattr(args, "config", None):
        assert args.config in (*PRESETS, *board_config_names()), \
            f"{where}: no preset or board config {args.config!r}"
    if getattr(args, "board", None):
        assert args.board in BOARDS, f"{where}: no board {args.board!r}"


SESSIONS = [(where, [line for line in body.splitlines() if line.strip()])
            for where, body in _snippets(SHELLS)
            if body.lstrip().startswith("tensorfab samples")]


def test_the_docs_have_sessions() -> None:
    assert {w.split(":")[0] for w, _ in SESSIONS} >= {"docs/graph.md",
                                                      "docs/quantization.md"}


@pytest.mark.parametrize(("where", "lines"), SESSIONS, ids=[w for w, _ in SESSIONS])
def test_shell_session_runs_as_written(where: str, lines: list[str], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Every command of the session, in order, in a fresh folder: exit status 0."""
    from tensorfab.cli import main

    monkeypatch.chdir(tmp_path)
    for line in lines:
        argv = shlex.split(line, comments=True)
        assert argv[0] == "tensorfab", f"{where}: {line}"
        code = main(argv[1:])
        assert code == 0, f"{where}: `{line}` exit {code}: {capsys.readouterr().err}"


#: Python blocks that start with this comment run as written on the files `tensorfab
#: samples` writes.
ON_SAMPLES = "# in a folder where `tensorfab samples` wrote"
SAMPLE_SCRIPTS = [(where, body) for where, body in _snippets({"python"})
                  if body.startswith(ON_SAMPLES)]


def test_the_docs_have_sample_scripts() -> None:
    assert "docs/graph.md" in {w.split(":")[0] for w, _ in SAMPLE_SCRIPTS}


@pytest.mark.parametrize(("where", "text"), SAMPLE_SCRIPTS, ids=[w for w, _ in SAMPLE_SCRIPTS])
def test_python_snippet_runs_on_the_samples(where: str, text: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The block runs in a folder of `tensorfab samples`' files, and uses every name it
    imports (docs/graph.md's first block imported accel and CPU for nothing and fed
    {"x": x}, an input the samples' model does not have, from a variable never set)."""
    import ast

    from tensorfab.cli import main

    tree = ast.parse(text, where)
    imported = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom) for a in node.names}
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not imported - used, f"{where}: imported and not used: {imported - used}"
    monkeypatch.chdir(tmp_path)
    assert main(["samples"]) == 0
    exec(compile(tree, where, "exec"), {"__name__": "__doc_snippet__"})


#: Pages that describe what is, for users: how figures were reached belongs to the
#: commit messages.
CURRENT_PAGES = ["docs/fpga.md", "docs/architecture.md", "docs/graph.md",
                 "docs/model-benchmarks.md", "README.md"]
_HISTORY = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
    r"twelfth|this|that|one|the same)\s+session\b|(?<!Yosys )\bissues? #?\d+|"
    r"\ban earlier measurement\b|DESIGN\.md|\b20\d\d-\d\d-\d\d\b", re.IGNORECASE)


@pytest.mark.parametrize("page", CURRENT_PAGES)
def test_pages_describe_what_is(page: str) -> None:
    text = (ROOT / page).read_text()
    found = [(text.count("\n", 0, m.start()) + 1, m[0]) for m in _HISTORY.finditer(text)]
    assert not found, f"{page}: history (line, words): {found}"


def test_fpga_md_has_one_results_table_with_every_board() -> None:
    text = (ROOT / "docs" / "fpga.md").read_text()
    tables = [line for line in text.splitlines()
              if line.startswith("| board | config |")]
    assert len(tables) == 1, tables
    for board in BOARDS.values():
        assert re.search(rf"^\| {board.name} \| {board.config}\b", text, re.MULTILINE), \
            board.name
