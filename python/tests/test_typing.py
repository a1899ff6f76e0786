"""The package's inline annotations (it ships py.typed) hold: mypy over
python/kiln, where mypy is installed (scripts/python-venv.sh installs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kiln"


def test_mypy_clean() -> None:
    pytest.importorskip("mypy")
    assert (PACKAGE / "py.typed").exists()
    r = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--no-incremental",
                        "--cache-dir", "/dev/null", str(PACKAGE)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
