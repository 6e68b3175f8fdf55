"""The library API (`import genrun`): the README's example runs as written, refusals raise typed
errors with the CLI's exit codes and write nothing, and library calls never reach for the hub."""

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import genrun
from conftest import PROCESS_TIMEOUT_S, REPO, TINY_LM
from genrun.schemas import Request


def _readme_example() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Use from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(_readme_example(), "README.md", "exec"), {})
    assert printed.getvalue().splitlines() == ["succeeded [('eos', 13)]", "0"]
    (snapshot,) = (tmp_path / "snapshots").iterdir()
    assert (snapshot / "manifest-sha256.txt").is_file()


def test_the_readme_request_line_works_after_a_plain_import(tmp_path: Path) -> None:
    """`genrun.plan(genrun.schemas.Request.model_validate({...}))`, as the README writes it, in a fresh interpreter
    (here `genrun.schemas` is imported already): `import genrun` alone makes `genrun.schemas` reachable, and
    imports neither the models nor torch until they are used."""
    readme = (REPO / "README.md").read_text()
    line = re.search(r"`(genrun\.plan\(genrun\.schemas\.Request\.model_validate\(\{\.\.\.\}\)\))`", readme).group(1)
    body = {"name": "readme-line", "model": {"path": str(TINY_LM), "device": "cpu"}, "input": {"prompt": "count down from 3 :"}}
    call = line.replace("{...}", repr(body)).replace("))", f"), store={str(tmp_path / 'store')!r})", 1)
    code = ("import sys\nimport genrun\n"
            "assert not {'pydantic', 'torch', 'genrun.schemas'} & set(sys.modules), sorted({'pydantic', 'torch'} & set(sys.modules))\n"
            f"print({call})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=PROCESS_TIMEOUT_S,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    snapshot = Path(proc.stdout.strip())
    assert snapshot.parent == tmp_path / "store" and (snapshot / "frozen-sha256.txt").is_file()


def test_a_request_built_in_python_plans_and_runs(tmp_path: Path) -> None:
    request = Request.model_validate({
        "name": "from-python", "seed": 0,
        "model": {"path": str(TINY_LM), "dtype": "float32", "device": "cpu"},
        "input": {"prompt": "count down from 3 :"}, "generation": {"max_new_tokens": 8},
    })
    snapshot, result = genrun.run(request, store=tmp_path / "store")
    assert result.status == "succeeded" and result.exit_code == 0
    snap = genrun.open_snapshot(snapshot)
    assert snap.request == request
    assert [s.reason for s in snap.stop.sequences] == ["eos"]
    assert (snapshot / "request.source.json").is_file()


def test_a_refused_request_raises_with_the_cli_exit_code_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(f'name = "bad"\n[model]\npath = "{TINY_LM}"\n[input]\nprompt = "x"\n[generation]\nmax_new_token = 8\n')
    with pytest.raises(genrun.RequestError, match="did you mean 'max_new_tokens'") as refused:
        genrun.plan(bad, store=tmp_path / "store")
    assert refused.value.exit_code == 2
    assert not (tmp_path / "store").exists()


def test_verify_returns_typed_findings(tmp_path: Path) -> None:
    fixture = next(p for p in (REPO / "tests" / "fixtures" / "format-1").iterdir() if "-tiny-" in p.name)
    verification = genrun.verify(fixture)
    assert verification.exit_code() == 0
    assert {f.name for f in verification.findings} >= {"manifest_integrity", "stop_reasons"}


def test_library_calls_put_the_hub_offline() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_HUB")}
    probe = ("import os, genrun\n"
             "try:\n    genrun.plan('missing.toml')\nexcept genrun.GenrunError:\n    pass\n"
             "print(os.environ.get('HF_HUB_OFFLINE'))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.stdout.strip() == "1", done.stderr
