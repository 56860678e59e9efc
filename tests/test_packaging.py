"""The package metadata: an editable build is quiet, every shipped file is declared."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Builds the editable wheel with setuptools' PEP 660 hook (what ``pip install -e .``
#: calls) and prints every warning raised as JSON (category, first line).
_BUILD = """
import json, tempfile, warnings
from setuptools import build_meta
with warnings.catch_warnings(record=True) as seen, tempfile.TemporaryDirectory() as d:
    warnings.simplefilter("always")
    build_meta.build_editable(d)
print(json.dumps([[w.category.__name__, str(w.message).strip().splitlines()[0]]
                  for w in seen]))
"""


def test_editable_build_emits_no_metadata_warnings() -> None:
    """No deprecated license table, no data folder missing from ``packages``: the only
    message left is setuptools' note that an editable install maps folders."""
    res = subprocess.run([sys.executable, "-c", _BUILD], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert [w for w in seen if w != ["InformationOnly", "Editable installation."]] == []


def test_every_folder_with_files_is_a_declared_package() -> None:
    """Each mapped folder holding a module or a data file is in ``packages``, and its
    data files match a ``package-data`` pattern (statically, without building)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(meta["packages"])
    data = meta.get("package-data", {})
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    for pkg, folder in meta["package-dir"].items():
        for rel in tracked:
            path = Path(rel)
            if not rel.startswith(folder + "/"):
                continue
            sub = path.parent.relative_to(folder)
            name = ".".join([pkg, *sub.parts]) if sub.parts else pkg
            if any(p in ("__pycache__",) for p in sub.parts):
                continue
            assert name in declared, f"{rel}: package {name} missing from packages"
            if path.suffix != ".py":
                assert any(path.match(f"*/{pat}") or path.match(pat)
                           for pat in data.get(name, [])), \
                    f"{rel}: no package-data pattern of {name} matches it"


def test_make_setup_hides_the_editable_install_note() -> None:
    """``make demo`` on a fresh clone: the editable build under the Makefile's
    ``QUIET_BUILD`` environment prints no setuptools warning block."""
    import os
    import re

    match = re.search(r'^QUIET_BUILD := (\w+)="([^"]*)"$', (ROOT / "Makefile").read_text(),
                      re.MULTILINE)
    assert match, "Makefile: no QUIET_BUILD"
    assert "$(QUIET_BUILD) $(BIN)/python -m pip install" in (ROOT / "Makefile").read_text()
    script = ("import tempfile\nfrom setuptools import build_meta\n"
              "with tempfile.TemporaryDirectory() as d:\n    build_meta.build_editable(d)\n")
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env=os.environ | {match[1]: match[2]})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "!!" not in res.stderr and "Warning" not in res.stderr, res.stderr
