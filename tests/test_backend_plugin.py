"""A backend added without editing genrun: registered through the `genrun.backends` entry-point group.

The "counter" backend lives only in tests/test_backend_plugin/. Each test installs it the way a
distribution would, as a `*.dist-info` (METADATA + entry_points.txt) on the `PYTHONPATH` of a
real `genrun` subprocess: entry points are what is under test, so a subprocess (whose
`importlib.metadata` sees that path from the start) is the point here.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from genrun.analysis import read_snapshot, verify_snapshot
from genrun.schemas import GenerationStop, Result, layout

PLUGIN_DIR = Path(__file__).parent / "test_backend_plugin"


def install_counter(site: Path, target: str = "counter_backend:create_backend") -> dict[str, str]:
    """Write the counter's dist-info under `site`; the environment of a genrun process that sees it."""
    dist = site / "genrun_counter_backend-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: genrun-counter-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f'[genrun.backends]\ncounter = {target}\n')
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(PLUGIN_DIR)])}


def genrun(*args: str, env: dict[str, str] | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "genrun.runner.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def counter_request(tmp_path: Path, *, backend: str = "counter", generation: str = "steps = 4") -> Path:
    model = tmp_path / "counter-model"
    model.mkdir()
    (model / "config.json").write_text('{"start": 7}\n')
    request = tmp_path / "request.toml"
    request.write_text(
        f'name = "count"\nseed = 0\n[model]\npath = "{model}"\nbackend = "{backend}"\ndevice = "cpu"\n'
        f'[input]\nprompt = "from seven"\n[generation]\n{generation}\n'
    )
    return request


def test_a_backend_under_tests_plans_executes_seals_and_verifies(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site")
    request = counter_request(tmp_path)
    planned = genrun("plan", str(request), "--store", str(tmp_path / "store"), "--json", env=env, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    snapshot = Path(json.loads(planned.stdout)["snapshot"])
    assert json.loads(planned.stdout)["token_budget"]["units"] == "step"

    executed = genrun("execute", str(snapshot), "--json", env=env, cwd=tmp_path)
    assert executed.returncode == 0, executed.stderr
    result = Result.model_validate_json(executed.stdout)
    assert (result.status, result.unit, result.generated, result.outputs) == ("succeeded", "step", 4, ("count.txt",))
    assert (snapshot / layout.MANIFEST).is_file()  # sealed
    assert (snapshot / "outputs" / "count.txt").read_text() == "7 8 9 10\n"
    stop = GenerationStop.model_validate_json((snapshot / layout.STOP).read_bytes()).sequences
    assert [(s.reason, s.generated, s.steps_planned) for s in stop] == [("completed", 4, 4)]

    verified = genrun("verify", str(snapshot), "--json", env=env, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # Analysis never imports a backend: it decides from what was recorded, in this process too
    # (which has no counter installed).
    snap = read_snapshot(snapshot)
    assert (snap.counts_steps, snap.unit) == (True, "step")
    findings = {f.name: f for f in verify_snapshot(snapshot).findings}
    assert findings["diffusion_steps"].status == "PASS", findings["diffusion_steps"].message
    assert findings["limits_reached_config"].status == "PASS", findings["limits_reached_config"].message
    assert not [f for f in findings.values() if f.status == "FAIL"]


def test_the_plugin_backend_validates_its_own_generation_keys(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site")
    request = counter_request(tmp_path, generation="stpes = 4")
    planned = genrun("plan", str(request), "--store", str(tmp_path / "store"), env=env, cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr
    assert "stpes" in planned.stderr and "'steps'" in planned.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_an_unknown_backend_is_refused_at_plan_time_naming_the_installed_ones(tmp_path: Path) -> None:
    request = counter_request(tmp_path)  # no counter installed in this process's environment
    planned = genrun("plan", str(request), "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr
    assert "'counter' is not an installed backend" in planned.stderr
    assert "installed: diffusers, transformers" in planned.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_a_broken_backend_install_is_refused_naming_its_entry_point(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site", target="no_such_counter_module:create_backend")
    planned = genrun("plan", str(counter_request(tmp_path)), "--store", str(tmp_path / "store"), env=env, cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr
    assert "(entry point 'no_such_counter_module:create_backend') cannot be loaded" in planned.stderr
    assert "Traceback" not in planned.stderr
