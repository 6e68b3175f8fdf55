"""`genrun execute --require-approval` through the real CLI: an approved plan runs, and a plan
modified after its approval (request edited, frozen manifest regenerated as an attacker would)
is refused before anything is loaded."""

from pathlib import Path

import orjson

from conftest import run_cli, tiny_request, write_request
from genrun.runner.store import write_frozen_manifest
from genrun.schemas import layout


def _plan(tmp_path: Path, tiny_lm: Path) -> Path:
    request = write_request(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 8"))
    proc = run_cli("plan", request, "--store", tmp_path / "store", "--json")
    assert proc.returncode == 0, proc.stderr
    return Path(orjson.loads(proc.stdout)["snapshot"])


def _approve(snapshot: Path) -> None:
    proc = run_cli("signoff", snapshot, "--decision", "approve", "--by", "owner@example.org", "--note", "budget checked")
    assert proc.returncode == 0, proc.stderr


def test_approved_plan_runs(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = _plan(tmp_path, tiny_lm)
    _approve(snapshot)
    proc = run_cli("execute", snapshot, "--require-approval", "--json")
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["status"] == "succeeded"


def test_plan_modified_after_approval_is_refused(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = _plan(tmp_path, tiny_lm)
    _approve(snapshot)
    request = snapshot / layout.REQUEST
    request.write_bytes(request.read_bytes().replace(b'"max_new_tokens": 8', b'"max_new_tokens": 60'))
    write_frozen_manifest(snapshot)  # a consistent, re-frozen plan: only the approval can tell
    proc = run_cli("execute", snapshot, "--require-approval")
    assert proc.returncode == 1, proc.stderr
    message = " ".join(proc.stderr.split())
    assert "approve" in message and "digest no longer matches" in message
    assert not (snapshot / layout.PROGRESS).exists() and not (snapshot / layout.RESULT).exists()


def test_unapproved_plan_is_refused(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = _plan(tmp_path, tiny_lm)
    proc = run_cli("execute", snapshot, "--require-approval")
    assert proc.returncode == 1 and "approve" in proc.stderr
    assert not (snapshot / layout.PROGRESS).exists()
