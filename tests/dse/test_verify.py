"""``tensorfab verify``: random programs on fsim and the RTL on a Dask LocalCluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorfab.cli import main
from tensorfab.dse.verify import chunks, memory_timing_for, replay_case
from tensorfab.isa import PRESETS, UsageError
from tensorfab.isa.program import Program
from tensorfab.sim.testing.random_program import random_program


def test_small_run_passes_and_injected_mismatch_is_saved_and_replays(
        tmp_path: Path, capsys) -> None:
    """20 tiny programs on a 1-worker LocalCluster: all match but the one whose expected
    image was corrupted, which is reported, saved as its seed's program and replays."""
    out = tmp_path / "fails"
    code = main(["verify", "--programs", "20", "--configs", "tiny", "--workers", "1",
                 "--seed", "100", "--out", str(out), "--inject-mismatch", "107", "--json"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1
    assert result["configs"] == {"tiny": {"programs": 20, "passed": 19, "failed": 1}}
    (fail,) = result["failures"]
    assert fail["seed"] == 107 and "DRAM byte(s) differ" in fail["problems"][0]
    saved = Path(fail["saved"])
    assert saved == out / "tiny-107.json" and fail["replay"].endswith(str(saved))
    blob = (out / "tiny-107.bin").read_bytes()
    assert blob == random_program(PRESETS["tiny"], 107).to_bytes()
    assert Program.from_bytes(blob).config == PRESETS["tiny"]
    record = json.loads(saved.read_text())
    assert record["memory"]["read_latency"] == memory_timing_for(107).read_latency
    # the replay reproduces the failure; without the injection the RTL matches
    assert replay_case(saved).problems == fail["problems"]
    assert main(["verify", "--replay", str(saved)]) == 1
    record["inject"] = False
    saved.write_text(json.dumps(record))
    assert replay_case(saved).passed
    assert main(["verify", "--replay", str(saved)]) == 0


def test_replay_of_a_file_that_is_not_a_failure_names_it(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(UsageError, match=r"x\.json: not a saved verify failure"):
        replay_case(bad)


def test_chunks_cover_every_seed_once() -> None:
    seeds = list(range(5, 28))
    parts = chunks(seeds, 4)
    assert len(parts) <= 4 and [s for p in parts for s in p] == seeds
    assert chunks([1], 8) == [[1]]


def test_memory_timing_is_a_function_of_the_seed() -> None:
    assert memory_timing_for(3) == memory_timing_for(3)
    assert len({memory_timing_for(s) for s in range(20)}) > 10


def test_configs_take_board_configs_as_every_config_option_does(
        tmp_path: Path, capsys) -> None:
    """`verify --configs up5k` was refused as 'not a preset ... nor a JSON config file',
    though every other config option takes the board configs; now it runs them."""
    code = main(["verify", "--programs", "2", "--configs", "up5k", "--workers", "1",
                 "--out", str(tmp_path / "fails"), "--json"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0
    assert result["configs"] == {"up5k": {"programs": 2, "passed": 2, "failed": 0}}


def test_out_that_is_a_file_is_refused_before_any_program_runs(
        tmp_path: Path, capsys) -> None:
    """`verify --out FILE` ran the programs, then a failure's save raised
    FileExistsError from a worker (a traceback); now refused first, the file kept."""
    out = tmp_path / "notes.txt"
    out.write_text("mine\n")
    code = main(["verify", "--programs", "1", "--configs", "tiny", "--workers", "1",
                 "--out", str(out), "--inject-mismatch", "0"])
    assert code == 2
    assert capsys.readouterr().err == (
        f"error: --out {out} is a file; name a folder (failures are saved in it as "
        "CONFIG-SEED.bin and CONFIG-SEED.json)\n")
    assert out.read_text() == "mine\n"


@pytest.mark.parametrize(("args", "message"), [
    (["--programs", "0"], "--programs 0: give at least 1 program per config"),
    (["--programs", "-3"], "--programs -3: give at least 1 program per config"),
    (["--seed", "-1"], "--seed -1: seeds are 0 or more"),
    (["--configs", ","], "--configs names no config; give presets, board configs or JSON "
                         "config files, comma-separated")])
def test_bad_programs_seed_or_configs_name_the_option(args: list[str], message: str,
                                                      capsys) -> None:
    """The three were one message that named all three rules ('verify needs at least one
    config, --programs >= 1 and a non-negative --seed'), not the option that broke one."""
    assert main(["verify", "--configs", "tiny", "--programs", "1", *args]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


def test_two_configs_of_one_name_are_refused(tmp_path: Path, capsys) -> None:
    """A JSON config named like a preset ('tiny', 1x8x8) ran beside the preset as one
    row, 'tiny': 2 programs of 1, and the two configs' failures overwrote each other's
    tiny-SEED.json; the same config given twice checked every seed twice."""
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"name": "tiny", "block_in": 8, "block_out": 8}))
    for configs, message in [
            (f"tiny,{mine}", f"tiny and {mine} are both named 'tiny'"),
            ("tiny,small,tiny", "'tiny' is given twice")]:
        assert main(["verify", "--configs", configs, "--programs", "1",
                     "--out", str(tmp_path / "fails")]) == 2
        assert capsys.readouterr().err == (
            f"error: --configs: {message}; their results and saved failures "
            "(tiny-SEED.json) would mix: list a config once, and give a JSON config "
            "another \"name\"\n")


@pytest.mark.parametrize("content,match", [
    (None, r"x\.json: no such file"),
    ('{"config": {}, "program": "x.bin"}', r"missing key\(s\) 'seed'"),
    ("[1]", r"a JSON object with config, seed, program expected"),
    ('{"config": {"batch": 3}, "seed": 1, "program": "x.bin"}',
     r"config: HwConfig\.batch = 3: must be a power of two"),
    ('{"config": {}, "seed": "1", "program": "x.bin"}', r"seed = '1'"),
    ('{"config": {}, "seed": 1, "program": "x.bin"}', r"its program .*x\.bin cannot be read"),
])
def test_replay_names_what_is_wrong_with_the_file(tmp_path: Path, content, match) -> None:
    """`verify --replay` of a record without its seed said 'not a saved verify failure
    ('seed')', of a JSON list 'list indices must be integers or slices, not str';
    now the missing key, the bad value or the missing program is named."""
    bad = tmp_path / "x.json"
    if content is not None:
        bad.write_text(content)
    with pytest.raises(UsageError, match=match):
        replay_case(bad)
