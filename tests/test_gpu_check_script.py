"""bench/gpu_check.sh: what CI can check without a GPU. It parses (`bash -n`), and on a machine without CUDA it stops
before building anything, saying so, with exit status 2."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gpu_check.sh"


def test_the_gpu_check_parses() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_without_cuda_it_refuses_before_building_anything(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("the refusal is what a CPU machine shows; a CUDA machine runs the whole check")
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "work")], capture_output=True, text=True, check=False,
                          env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "no CUDA device visible" in done.stderr, done.stderr
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["store"]  # no model built
