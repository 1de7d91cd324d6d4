"""The Python API (cotrain/api.py): the example of docs/api.md runs as written, from another directory."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_documented_example_runs_as_written_from_another_directory(tmp_path):
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    proc = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("refused: ") and "steps" in lines[-1], lines[-1]
    assert (tmp_path / "runs" / "api_grpo" / "eval.json").is_file()


def test_importing_the_package_loads_no_torch_and_names_the_api():
    proc = subprocess.run([sys.executable, "-c", "import sys, cotrain; print('torch' in sys.modules, "
                           "cotrain.run.__module__, cotrain.check.__module__, cotrain.UserError.__name__)"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.stdout.split() == ["False", "cotrain.api", "cotrain.api", "UserError"], proc.stdout + proc.stderr


def test_load_run_refuses_what_is_not_a_run(tmp_path):
    import pytest

    import cotrain

    with pytest.raises(cotrain.UserError, match="not a run directory"):
        cotrain.load_run(tmp_path)
