"""One import package: the built wheel installs `genrun` and nothing else at site-packages' top level,
and a user's own `analysis` / `runner` packages work beside it (top-level `analysis` / `runner` packages of ours would shadow them).

The wheel is built from a copy of the source tree (so the checkout stays clean), installed with
`--no-deps` into a fresh virtual environment that borrows this interpreter's dependencies through a
`.pth` file (nothing is downloaded), and driven through that environment's own `genrun` script.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import orjson
import pytest

from conftest import REPO, TINY_LM

FORMAT_1 = REPO / "tests" / "fixtures" / "format-1"
SOURCES = ("pyproject.toml", "README.md", "genrun", "runner", "analysis", "schemas")


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with genrun installed from its wheel; returns the venv directory."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    for name in SOURCES:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(origin, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(work / "dist"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "dist").glob("genrun-*.whl")
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=False)
    purelib = Path(subprocess.run([str(env_dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    # Borrow torch, transformers, ... from the interpreter running the tests (a .pth entry adds the
    # directory to sys.path after the venv's own site-packages, where the wheel goes).
    (purelib / "zz-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return env_dir


def _site_packages(env_dir: Path) -> Path:
    (purelib,) = env_dir.glob("lib/python3*/site-packages")
    return purelib


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def test_the_wheel_installs_one_top_level_package(wheel_env: Path) -> None:
    (dist_info,) = _site_packages(wheel_env).glob("genrun-*.dist-info")
    entries = [line.split(",")[0] for line in (dist_info / "RECORD").read_text().splitlines() if line]
    top_level = {entry.split("/")[0] for entry in entries if not entry.startswith("..")} - {dist_info.name}
    assert top_level == {"genrun"}, top_level
    assert "genrun/py.typed" in entries
    # No source file of the three mapped folders is left out of the wheel.
    for folder in ("runner", "analysis", "schemas"):
        for path in (REPO / folder).rglob("*.py"):
            assert f"genrun/{path.relative_to(REPO).as_posix()}" in entries, f"{path} is missing from the wheel"
    assert any(entry.startswith("genrun/schemas/json/") for entry in entries)


def test_a_users_analysis_package_works_under_execute_require_approval(wheel_env: Path, tmp_path: Path) -> None:
    """The user's project has its own `analysis/` package; its entry point imports from it."""
    project = tmp_path / "project"
    (project / "analysis").mkdir(parents=True)
    (project / "analysis" / "__init__.py").write_text("def score(text):\n    return len(text.split())\n")
    (project / "runner").mkdir()
    (project / "runner" / "__init__.py").write_text("NAME = 'the user runner'\n")
    (project / "entry.py").write_text(
        "from analysis import score\nfrom runner import NAME\n\n"
        "def run(model, tokenizer, inputs, generation, **kwargs):\n"
        "    encoded = tokenizer(inputs['prompt'], return_tensors='pt')\n"
        "    out = model.generate(**encoded, **generation)\n"
        "    text = tokenizer.decode(out[0, encoded['input_ids'].shape[1]:], skip_special_tokens=True)\n"
        "    return {'text': text, 'words': score(text), 'runner': NAME}\n"
    )
    (project / "request.toml").write_text(
        f'name = "collision"\nseed = 0\n[model]\npath = "{TINY_LM}"\ndtype = "float32"\ndevice = "cpu"\n'
        '[input]\nprompt = "count down from 5 :"\n[generation]\nmax_new_tokens = 16\n'
        '[entrypoint]\ncallable = "entry:run"\n'
        '[policy]\nrequire_approval = "any"\n'  # an unsigned approval counts (the gate itself is tested in test_approval_gate.py)
    )
    genrun = str(wheel_env / "bin" / "genrun")
    store = tmp_path / "store"
    planned = subprocess.run([genrun, "plan", "request.toml", "--store", str(store), "--json"], cwd=project,
                             capture_output=True, text=True, env=_env())
    assert planned.returncode == 0, planned.stderr
    snapshot = Path(orjson.loads(planned.stdout)["snapshot"])
    approved = subprocess.run([genrun, "signoff", str(snapshot), "--decision", "approve", "--by", "owner@example.org"],
                              cwd=project, capture_output=True, text=True, env=_env())
    assert approved.returncode == 0, approved.stderr
    done = subprocess.run([genrun, "execute", str(snapshot), "--require-approval", "--json"], cwd=project,
                          capture_output=True, text=True, env=_env())
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["status"] == "succeeded"
    returned = orjson.loads((snapshot / "outputs" / "entrypoint-result.json").read_bytes())
    assert returned == {"text": "4 3 2 1 0", "words": 5, "runner": "the user runner"}


def test_genrun_commands_work_from_a_directory_with_its_own_analysis_folder(wheel_env: Path, tmp_path: Path) -> None:
    for folder in ("analysis", "runner", "schemas"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("raise ImportError('the user package was imported by genrun')\n")
    snapshot = next(p for p in FORMAT_1.iterdir() if p.is_dir() and "-tiny-" in p.name)
    done = subprocess.run([str(wheel_env / "bin" / "python"), "-m", "genrun", "verify", str(snapshot), "--json"], cwd=tmp_path,
                          capture_output=True, text=True, env=_env())
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["summary"]["failed"] == 0
