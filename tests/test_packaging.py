"""One import package and a torch-free core: what the built wheel installs, and what it needs.

The wheel is built once per module from a copy of the source tree (so the checkout stays clean) and
installed with `--no-deps` into fresh virtual environments; nothing is downloaded:

- `wheel_env` borrows every dependency of this interpreter (torch, transformers, ...) through a `.pth`
  file, to run models from the installed wheel;
- `core_env` gets only the distributions genrun's core requirements (its `Requires-Dist` without an
  extra, followed transitively) name, as symlinks to this interpreter's installed copies in one
  directory a `.pth` file adds. Building wheels of them would need the network (`pip download`) or
  minutes of `pip wheel`; symlinking the installed files takes milliseconds and installs exactly the
  closure the metadata declares: a core requirement that is missing from `pyproject.toml` fails the
  tests, and torch, which no core requirement names, cannot be imported there;
- `engine_env` is `core_env` plus numpy and onnxruntime (and what they require) and the test plugin backend installed
  as a distribution: there the loop examples and the plugin plan, execute, seal, verify and report without torch.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from importlib.metadata import distribution
from pathlib import Path

import orjson
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import EXAMPLES, REPO, TINY_LM, run_cli, tiny_request, write_request

FORMAT_1 = REPO / "tests" / "fixtures" / "format-1"
SOURCES = ("pyproject.toml", "README.md", "genrun", "runner", "analysis", "schemas")
BACKEND_MODULES = ("torch", "transformers", "diffusers", "safetensors", "soundfile", "soxr", "PIL", "numpy")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """genrun's wheel, built offline from a copy of the source tree."""
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
    (built_wheel,) = (work / "dist").glob("genrun-*.whl")
    return built_wheel


def _venv_with_wheel(env_dir: Path, wheel: Path, deps_dir: Path) -> Path:
    """A fresh venv (no system site-packages) that sees `deps_dir` after its own site-packages; genrun installed."""
    venv.create(env_dir, with_pip=False)
    # A .pth entry adds the directory to sys.path after the venv's own site-packages, where the wheel goes.
    (_site_packages(env_dir) / "zz-test-deps.pth").write_text(f"{deps_dir}\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return env_dir


@pytest.fixture(scope="module")
def wheel_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with genrun installed from its wheel, borrowing this interpreter's dependencies."""
    return _venv_with_wheel(tmp_path_factory.mktemp("full") / "venv", wheel, Path(sysconfig.get_paths()["purelib"]))


@pytest.fixture(scope="module")
def core_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with genrun's wheel and only its core requirements (see the module docstring)."""
    work = tmp_path_factory.mktemp("core")
    return _venv_with_wheel(work / "venv", wheel, _linked_deps(work / "core-deps", _closure(_core_requirements(wheel))))


@pytest.fixture(scope="module")
def engine_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`core_env` plus numpy and onnxruntime (the loop examples' engine) and the example plugin backend genrun ships, registered as a
    distribution registers it (a dist-info with its entry point): no torch (see the module docstring)."""
    work = tmp_path_factory.mktemp("engine")
    deps = _linked_deps(work / "deps", _closure([*_core_requirements(wheel), "numpy", "onnxruntime"]))
    dist = deps / "genrun_counter_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: genrun-counter-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[genrun.backends]\ncounter = genrun.examples.counter_backend:create_backend\n")
    return _venv_with_wheel(work / "venv", wheel, deps)


def _linked_deps(deps: Path, names: set[str]) -> Path:
    """One directory holding each named distribution's installed files (and its dist-info) as symlinks."""
    deps.mkdir()
    for name in names:
        dist = distribution(name)
        site = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}:
            if not (deps / top).exists() and not top.endswith(".pth") and top != "__pycache__":
                (deps / top).symlink_to(site / top)
    return deps


def _core_requirements(wheel: Path) -> list[str]:
    """The `Requires-Dist` lines of genrun's wheel (every extra's too: `_closure` keeps the core's)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]


def _closure(requirements: list[str]) -> set[str]:
    """Names of the distributions `requirements` need outside any extra, transitively (with the extras a requirement
    asks of its own dependency, e.g. `httpx[http2]`)."""
    pending = [(line, "") for line in requirements]
    closure: set[tuple[str, str]] = set()
    while pending:
        line, extra = pending.pop()
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue  # another extra's requirement, or not for this platform
        name = canonicalize_name(requirement.name)
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) not in closure:
                closure.add((name, wanted))
                pending.extend((dependency, wanted) for dependency in distribution(name).requires or ())
    return {name for name, _ in closure}


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
    # Nor of `genrun` itself: the example backend the plugin docs point to ships in the wheel.
    for path in (REPO / "genrun").rglob("*.py"):
        assert path.relative_to(REPO).as_posix() in entries, f"{path} is missing from the wheel"
    assert "genrun/examples/counter_backend.py" in entries
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


def _core(env_dir: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(env_dir / "bin" / "genrun"), *map(str, args)], cwd=cwd, capture_output=True, text=True, env=_env())


@pytest.fixture(scope="module")
def sealed_tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot this checkout's genrun planned, executed and sealed (the bundled model, in this process)."""
    work = tmp_path_factory.mktemp("sealed")
    done = run_cli("run", write_request(work, tiny_request(TINY_LM, name="core")), "--store", work / "store", "--json", cwd=work)
    assert done.returncode == 0, done.stderr
    return Path(orjson.loads(done.stdout)["snapshot"])


def test_the_core_install_has_no_backend_libraries(core_env: Path) -> None:
    python = str(core_env / "bin" / "python")
    for module in BACKEND_MODULES:
        found = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, env=_env())
        assert found.returncode != 0 and "ModuleNotFoundError" in found.stderr, (module, found.stderr)


def test_the_core_install_verifies_reports_and_signs_off_a_sealed_snapshot(core_env: Path, sealed_tiny_run: Path,
                                                                          tmp_path: Path) -> None:
    snapshot = tmp_path / sealed_tiny_run.name  # a copy: the sign-off is written into it
    shutil.copytree(sealed_tiny_run, snapshot)
    verified = _core(core_env, "verify", snapshot, "--json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    findings = orjson.loads(verified.stdout)
    assert findings["summary"]["failed"] == 0
    # The token/text check decodes with the checkpoint's tokenizer.json: the core's `tokenizers` does it.
    statuses = {f["name"]: f["status"] for f in findings["findings"]}
    assert statuses["saved_text"] == "PASS", statuses
    reported = _core(core_env, "report", snapshot, cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert "eos" in reported.stdout
    page = tmp_path / "review.html"
    assert _core(core_env, "report", snapshot, "--html", page, cwd=tmp_path).returncode == 0 and page.is_file()
    signed = _core(core_env, "signoff", snapshot, "--decision", "approve", "--by", "owner@example.org", cwd=tmp_path)
    assert signed.returncode == 0, signed.stderr
    listed = _core(core_env, "ls", "--store", tmp_path, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "owner@example.org" in listed.stdout
    again = orjson.loads(_core(core_env, "verify", snapshot, "--json", cwd=tmp_path).stdout)
    assert {f["name"]: f["status"] for f in again["findings"]}["signoffs"] == "PASS"


def test_a_request_without_its_backends_extra_is_refused_with_the_install_line(core_env: Path, tmp_path: Path) -> None:
    planned = _core(core_env, "plan", REPO / "examples" / "tiny.toml", "--store", tmp_path / "store", cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr
    assert "[model] backend = 'transformers' needs" in planned.stderr and "torch" in planned.stderr
    assert "pip install 'genrun[transformers]'" in planned.stderr
    assert "Traceback" not in planned.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


@pytest.mark.parametrize("example", ["tiny-onnx-loop.toml", "tiny-song-loop.toml"])
def test_the_loop_examples_run_seal_verify_and_report_without_torch(engine_env: Path, example: str, tmp_path: Path) -> None:
    """A core install plus the loop's own engine: plan -> execute -> seal -> verify -> report, torch absent (not importable)."""
    python = str(engine_env / "bin" / "python")
    assert subprocess.run([python, "-c", "import torch"], capture_output=True, env=_env()).returncode != 0
    store = tmp_path / "store"
    planned = _core(engine_env, "plan", EXAMPLES / example, "--store", store, "--json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    snapshot = Path(orjson.loads(planned.stdout)["snapshot"])
    executed = _core(engine_env, "execute", snapshot, "--json", cwd=tmp_path)
    assert executed.returncode == 0, executed.stderr
    assert orjson.loads(executed.stdout)["status"] == "succeeded"
    _verified_and_reported(engine_env, snapshot, tmp_path)
    determinism = orjson.loads((snapshot / "determinism.json").read_bytes())
    assert determinism["torch_threads"] is None and determinism["deterministic_algorithms"] is None  # no torch claims
    assert "torch" not in orjson.loads((snapshot / "environment.json").read_bytes())["packages"]


def test_a_plugin_backend_runs_seals_verifies_and_reports_without_torch(engine_env: Path, tmp_path: Path) -> None:
    from _plugin_helpers import counter_request

    request = write_request(tmp_path, counter_request(tmp_path))
    done = _core(engine_env, "run", request, "--store", tmp_path / "store", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ran = orjson.loads(done.stdout)
    assert ran["result"]["status"] == "succeeded"
    _verified_and_reported(engine_env, Path(ran["snapshot"]), tmp_path)


def _verified_and_reported(env_dir: Path, snapshot: Path, cwd: Path) -> None:
    """verify passes (nothing failed) and report reads the run, in the same torch-free environment."""
    verified = _core(env_dir, "verify", snapshot, "--json", cwd=cwd)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert orjson.loads(verified.stdout)["summary"]["failed"] == 0
    reported = _core(env_dir, "report", snapshot, cwd=cwd)
    assert reported.returncode == 0, reported.stderr
    assert "succeeded" in reported.stdout and "torch" not in reported.stdout
