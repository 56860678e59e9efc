"""Bad input to ``tensorfab fpga``: one line on stderr naming the culprit, exit 2, and
nothing built."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorfab.cli import main


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str, words: tuple[str, ...]
                   ) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


def test_build_output_is_an_existing_file(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "cnn.onnx"
    model.write_bytes(b"not a folder")
    for action in ("build", "breakdown"):
        one_line_error(capsys, "fpga", action, "--board", "ulx3s-25f", "-o", str(model),
                       words=(str(model), "name a folder"))
    assert model.read_bytes() == b"not a folder"


@pytest.mark.parametrize("value", ["-1", "0"])
def test_clocks_must_be_positive(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 value: str) -> None:
    one_line_error(capsys, "fpga", "paths", str(tmp_path), "--target-mhz", value,
                   words=(f"--target-mhz {float(value):g}", "positive"))
    one_line_error(capsys, "fpga", "build", "--board", "ulx3s-25f", "-o",
                   str(tmp_path / "b"), "--clock-mhz", value,
                   words=(f"--clock-mhz {float(value):g}", "positive"))
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("value", ["-1", "0"])
def test_top_must_be_one_or_more(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 value: str) -> None:
    # `fpga paths --top -1` listed all failing groups but the last (a slice [:-1]) and
    # `--top 0` none; `fpga breakdown --top -1` the same, after minutes of synthesis
    one_line_error(capsys, "fpga", "paths", str(tmp_path), "--target-mhz", "100",
                   "--top", value, words=(f"--top {value}: give 1 or more",))
    one_line_error(capsys, "fpga", "breakdown", "--board", "ulx3s-25f", "-o",
                   str(tmp_path / "b"), "--top", value,
                   words=(f"--top {value}: give 1 or more (how many rows to show)",))
    assert not (tmp_path / "b").exists()


def test_paths_of_a_missing_build_folder(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    one_line_error(capsys, "fpga", "paths", str(tmp_path / "nope"),
                   words=(f"{tmp_path / 'nope'}: no such build folder",))


@pytest.mark.parametrize("argv", [["fpga"], ["fpga", "build"], ["fpga", "program"],
                                  ["fpga", "breakdown"], ["fpga", "paths"]])
def test_help_has_a_description_examples_and_the_boards(
        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    from tensorfab.fpga_builds.boards import BOARDS

    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    _usage, description, *_ = text.split("\n\n")
    assert description.strip() and "\nexamples:\n  tensorfab " + " ".join(argv) in text
    if argv != ["fpga", "paths"]:  # the commands that take --board
        for board in BOARDS.values():
            assert f"  {board.name} " in text and f" {board.device}-" in text, board.name


def test_fpga_md_states_the_boards_default_clocks() -> None:
    """docs/fpga.md's board table has each board's default clock (boards.py's)."""
    import re

    from tensorfab.fpga_builds.boards import BOARDS

    text = (Path(__file__).resolve().parents[2] / "docs" / "fpga.md").read_text()
    for board in BOARDS.values():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{board.name}`"))
        mhz = board.clock_mhz or board.target_mhz
        assert re.search(rf"\b{mhz:g} MHz\b", row), (board.name, mhz, row)
        # a sentence naming a board's default clock names this one
        for m in re.finditer(rf"(\d+) MHz, the {board.name} default", text):
            assert float(m[1]) == mhz, m[0]
    assert "60 MHz, the board's default" not in text


def test_build_output_folder_with_the_users_files(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An -o folder holding files of the build's names that no earlier build wrote (a
    user's report.json) is refused before building; an earlier build's folder (its
    Amaranth build plan) and --force are built into."""
    from tensorfab.fpga_builds import flow

    built: list[Path] = []

    def fake_build(board: str, config: str, out: Path, **_kw: object) -> dict:
        built.append(Path(out))
        raise flow.FpgaBuildError("stopped here")

    monkeypatch.setattr(flow, "build_bitstream", fake_build)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.json").write_text('{"my": "notes"}')
    (mine / "notes.txt").write_text("kept")
    for action in ("build", "breakdown"):
        one_line_error(capsys, "fpga", action, "--board", "ulx3s-25f", "-o", str(mine),
                       words=(str(mine), "would overwrite report.json", "--force"))
    assert (mine / "report.json").read_text() == '{"my": "notes"}' and not built
    assert main(["fpga", "build", "--board", "ulx3s-25f", "-o", str(mine), "--force"]) == 2
    assert built == [mine] and "stopped here" in capsys.readouterr().err
    earlier = tmp_path / "earlier"
    (earlier / "seed-1").mkdir(parents=True)
    (earlier / "seed-1" / "build_top.sh").write_text(
        "# Automatically generated by Amaranth 0.5.4. Do not edit.\nset -e\n")
    (earlier / "seeds.json").write_text("{}")
    assert main(["fpga", "build", "--board", "ulx3s-25f", "-o", str(earlier)]) == 2
    assert built == [mine, earlier]
