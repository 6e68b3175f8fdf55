"""A loop (or entry point) whose module imports something not installed is refused at plan time, naming the missing
distribution and the `pip install` line (issue 41, item 7), instead of "check the module name and its location".

The bundled ONNX example runs through the real `genrun plan` in a fresh interpreter where a `sys.meta_path` finder
makes one of its imports missing, as on a machine without it; the store must stay untouched.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, PROCESS_TIMEOUT_S, REPO, run_cli, write_request
from _refusal_helpers import store_content, store_with_a_bystander

from genrun.runner.backends.entrypoint import pip_line_for

PLAN_WITHOUT = r'''
import importlib.abc, sys

MISSING = sys.argv.pop(1)

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == MISSING:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from genrun.runner.cli import main
sys.exit(main(sys.argv[1:]))
'''


@pytest.mark.parametrize("missing", ["numpy", "onnxruntime"])
def test_the_onnx_example_without_its_engine_is_refused_with_the_pip_line(missing: str, tmp_path: Path) -> None:
    store, before = store_with_a_bystander(tmp_path)
    proc = subprocess.run([sys.executable, "-c", PLAN_WITHOUT, missing, "plan", str(EXAMPLES / "tiny-onnx-loop.toml"), "--store", str(store)],
                          cwd=REPO, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == 2, proc.stderr
    assert (f"[loop] callable 'lm_loop:generate': module 'lm_loop' imports {missing!r}, which is not installed here; "
            f"install it: pip install {missing}") in " ".join(proc.stderr.split())
    assert store_content(store) == before


def test_a_module_that_is_not_there_is_still_a_wrong_name(tmp_path: Path) -> None:
    request = write_request(tmp_path, (EXAMPLES / "tiny-onnx-loop.toml").read_text().replace('"lm_loop:generate"', '"lm_lop:generate"')
                            .replace('"models/tiny-lm-onnx"', f'"{EXAMPLES / "models" / "tiny-lm-onnx"}"'))
    proc = run_cli("plan", request, "--store", tmp_path / "store")
    assert proc.returncode == 2
    assert "cannot import module 'lm_lop' (No module named 'lm_lop'); check the module name and its location" in " ".join(proc.stderr.split())


def test_a_users_loop_importing_an_unknown_module_gets_a_guess_said_as_one(tmp_path: Path) -> None:
    (tmp_path / "my_loop.py").write_text("import engine_nobody_installed\n\ndef generate(model_dir, inputs, generation, rec):\n    pass\n")
    request = write_request(tmp_path, (EXAMPLES / "tiny-onnx-loop.toml").read_text().replace('"lm_loop:generate"', '"my_loop:generate"')
                            .replace('"models/tiny-lm-onnx"', f'"{EXAMPLES / "models" / "tiny-lm-onnx"}"'))
    store, before = store_with_a_bystander(tmp_path)
    proc = run_cli("plan", request, "--store", store)
    assert proc.returncode == 2, proc.stderr
    assert ("module 'my_loop' imports 'engine_nobody_installed', which is not installed here; install it: pip install "
            "engine_nobody_installed (the distribution that provides 'engine_nobody_installed', when its name differs)"
            ) in " ".join(proc.stderr.split())
    assert store_content(store) == before


def test_distribution_names_that_differ_from_the_module() -> None:
    assert pip_line_for("MNN.expr") == "pip install MNN"
    assert pip_line_for("cv2") == "pip install opencv-python"
    assert pip_line_for("PIL.Image") == "pip install pillow"
