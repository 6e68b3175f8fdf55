"""A backend whose extra is not installed is refused at plan time (exit 2) with the `pip install` line.

An entry point names the extras its backend needs (`NAME = "module:factory [extra]"`, as genrun's own
`transformers` and `diffusers` do); genrun reads that extra's requirements from the distribution's
metadata. Here a third-party distribution is installed as a bare `*.dist-info` on the `PYTHONPATH` of
a real `genrun` subprocess (entry points are read from the metadata a process starts with). The core
install without torch is tested end to end in test_packaging.py.
"""

import os
import subprocess
import sys
from pathlib import Path


def install_plugin(site: Path, target: str, requires: str) -> dict[str, str]:
    """A distribution `genrun-extra-plugin` whose `gpu` extra requires `requires`; the environment that sees it."""
    dist = site / "genrun_extra_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: genrun-extra-plugin\nVersion: 0.1\nProvides-Extra: gpu\n"
                                   f'Requires-Dist: {requires}; extra == "gpu"\n')
    (dist / "entry_points.txt").write_text(f"[genrun.backends]\nplugged = {target} [gpu]\n")
    return {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}


def plan(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    model = tmp_path / "model"
    model.mkdir()
    request = tmp_path / "request.toml"
    request.write_text(f'name = "p"\nseed = 0\n[model]\npath = "{model}"\nbackend = "plugged"\ndevice = "cpu"\n[input]\nprompt = "x"\n')
    return subprocess.run([sys.executable, "-m", "genrun.runner.cli", "plan", str(request), "--store", str(tmp_path / "store")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_a_missing_requirement_of_the_backends_extra_is_named_with_the_install_line(tmp_path: Path) -> None:
    env = install_plugin(tmp_path / "site", "plugged_backend:create_backend", requires="no-such-distribution-for-genrun>=1")
    planned = plan(tmp_path, env)
    assert planned.returncode == 2, planned.stderr
    assert "[model] backend = 'plugged' needs no-such-distribution-for-genrun, which is not installed" in planned.stderr
    assert "pip install 'genrun-extra-plugin[gpu]'" in planned.stderr
    assert "Traceback" not in planned.stderr
    assert not (tmp_path / "store").exists()


def test_a_module_missing_although_the_extra_is_installed_still_gets_the_install_line(tmp_path: Path) -> None:
    # orjson is installed (a core requirement), so the extra looks complete; the module itself is not importable.
    env = install_plugin(tmp_path / "site", "no_such_plugged_module:create_backend", requires="orjson")
    planned = plan(tmp_path, env)
    assert planned.returncode == 2, planned.stderr
    assert "[model] backend = 'plugged' cannot be loaded (No module named 'no_such_plugged_module')" in planned.stderr
    assert "pip install 'genrun-extra-plugin[gpu]'" in planned.stderr
    assert "Traceback" not in planned.stderr
