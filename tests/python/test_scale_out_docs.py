"""The examples of docs/scale-out.md are complete programs: each ```python block runs here as
a file (two simulated devices; a block whose first line is `# run: mpiexec -n 2` runs under
mpiexec), and must exit with status 0."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "scale-out.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_examples():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("code", BLOCKS, ids=[f"example-{i}" for i in range(len(BLOCKS))])
def test_example_runs(code, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    command = [sys.executable, str(script)]
    if code.startswith("# run: mpiexec -n 2"):
        command = [str(Path(sys.executable).parent / "mpiexec"), "-n", "2"] + command
    env = os.environ | {"CAI_BACKEND": "sim", "CAI_SIM_DEVICES": "2"}
    r = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
