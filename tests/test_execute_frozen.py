"""Frozen means frozen: `execute` refuses, before loading anything, a plan whose files, genrun code,
entry-point code or model files changed, a snapshot that already ran, and a missing approval."""

import os
import shutil
from pathlib import Path

import orjson
import pytest

from conftest import copy_of_genrun, run_cli, run_cli_subprocess

from _lm_helpers import plan, request_text, tiny_lm_variant, write_entry_module
from genrun.runner.errors import ApprovalRequired, FrozenMismatch, SnapshotError
from genrun.runner.execute import FrozenPlan, execute_snapshot, load_frozen, verify_model
from genrun.runner.frozen_plan import verify_before_loading
from genrun.runner.store import is_sealed
from genrun.schemas import layout
from genrun.snapshot_dir import SnapshotDir


def _nothing_written(snapshot: Path) -> None:
    for name in (layout.PROGRESS, layout.RESULT, layout.MANIFEST, layout.GENERATION_CONFIG):
        assert not (snapshot / name).exists(), name


def test_a_changed_frozen_file_is_refused_through_the_cli(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = plan(tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}))
    (snapshot / layout.REQUEST).write_bytes((snapshot / layout.REQUEST).read_bytes() + b"\n")  # still valid JSON
    proc = run_cli("execute", snapshot)
    assert proc.returncode == 1
    assert "frozen file request.json changed since planning" in proc.stderr and "plan the request again" in proc.stderr
    _nothing_written(snapshot)


def test_an_edited_code_json_changes_the_plan_digest(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = plan(tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}))
    code = orjson.loads((snapshot / layout.CODE).read_bytes())
    code["genrun"]["digest"] = "0" * 64
    (snapshot / layout.CODE).write_bytes(orjson.dumps(code))
    with pytest.raises(FrozenMismatch, match="frozen file code.json changed since planning"):
        execute_snapshot(snapshot, live=False)
    _nothing_written(snapshot)


def test_changed_genrun_code_is_refused_naming_the_file(tmp_path: Path, tiny_lm: Path) -> None:
    """A copy of genrun plans, then one of its source files changes; the copy's execute refuses."""
    source = copy_of_genrun(tmp_path / "genrun-copy")
    request = tmp_path / "r.toml"
    request.write_text(request_text(tiny_lm, generation={"max_new_tokens": 8}))
    # A process is the point: it must import genrun from the copy (cwd=source), not from this checkout.
    planned = run_cli_subprocess("plan", request, "--store", tmp_path / "store", "--json", cwd=source)
    assert planned.returncode == 0, planned.stderr
    snapshot = Path(orjson.loads(planned.stdout)["snapshot"])
    code = orjson.loads((snapshot / layout.CODE).read_bytes())
    assert code["genrun"]["root"] == str(source)  # the copy planned it
    with open(source / "runner" / "live_progress.py", "a") as f:
        f.write("# an edit after planning\n")
    proc = run_cli_subprocess("execute", snapshot, cwd=source)
    assert proc.returncode == 1
    assert "genrun's own code changed since planning" in proc.stderr and "runner/live_progress.py" in proc.stderr
    _nothing_written(snapshot)


def test_changed_model_files_are_refused(tmp_path: Path) -> None:
    model = tiny_lm_variant(tmp_path / "model", {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0})
    snapshot = plan(tmp_path, request_text(model, generation={"max_new_tokens": 8}))
    (model / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "max_length": 5}')
    with pytest.raises(FrozenMismatch, match=r"model files .* changed since planning \(changed: generation_config.json\)"):
        execute_snapshot(snapshot, live=False)
    _nothing_written(snapshot)


def test_a_process_that_verified_a_model_rechecks_it_by_state_and_sees_an_edit_the_hash_cache_would_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep worker verifies its model before every item: once the files matched, the next check is a stat per file (no
    hash cache entry read or written), and a file rewritten in place with its size and mtime restored, which the hash
    cache's key cannot tell from the original, is still refused (its ctime changed)."""
    monkeypatch.setenv("GENRUN_CACHE_DIR", str(tmp_path / "cache"))
    model = tiny_lm_variant(tmp_path / "model", {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0})
    snapshot = plan(tmp_path, request_text(model, generation={"max_new_tokens": 8}))
    frozen = load_frozen(SnapshotDir(snapshot)).model
    entries = tmp_path / "cache" / "hashes-v1"
    assert verify_model(frozen) == frozen.digest
    shutil.rmtree(entries)
    assert verify_model(frozen) == frozen.digest
    assert not entries.exists(), "the second check hashed the files again (it wrote hash cache entries)"

    config = model / "generation_config.json"
    st = config.stat()
    config.write_bytes(config.read_bytes().replace(b"0", b"3"))
    os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert config.stat().st_size == st.st_size
    with pytest.raises(FrozenMismatch, match=r"model files .* changed since planning \(changed: generation_config.json\)"):
        verify_model(frozen)


def test_the_plan_run_is_the_bytes_verified_and_a_parse_is_reused_only_for_the_same_bytes(tmp_path: Path, tiny_lm: Path) -> None:
    """`execute` parses the frozen files from the bytes it hashed; a process that parsed the same bytes before (a sweep's
    items share `code.json` and `model.json`) reuses that parse, and never for other bytes (another model's plan)."""
    model = tiny_lm_variant(tmp_path / "model", {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0})
    plan(tmp_path / "warm", request_text(tiny_lm, generation={"max_new_tokens": 8}))  # model.json says whether hashes were cached
    first = plan(tmp_path / "a", request_text(tiny_lm, generation={"max_new_tokens": 8}))
    same = plan(tmp_path / "b", request_text(tiny_lm, generation={"max_new_tokens": 9}))
    other = plan(tmp_path / "c", request_text(model, generation={"max_new_tokens": 8}))

    def verified(snapshot: Path) -> FrozenPlan:
        with SnapshotDir(snapshot).held_open() as held:
            return verify_before_loading(held)[0]

    plans = [verified(s) for s in (first, same, other)]
    assert [p.model for p in plans] == [load_frozen(SnapshotDir(s)).model for s in (first, same, other)]
    assert plans[1].model is plans[0].model and plans[1].code is plans[0].code  # the same bytes: parsed once
    assert plans[2].model.digest != plans[0].model.digest and plans[2].model is not plans[0].model
    assert verified(first).model is not plans[0].model  # the last bytes parsed were the other model's


def test_changed_entrypoint_code_is_refused(tmp_path: Path, tiny_lm: Path) -> None:
    module = write_entry_module(tmp_path, "entries_frozen")
    snapshot = plan(tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}, entrypoint=f"{module}:decode_only"))
    with open(tmp_path / f"{module}.py", "a") as f:
        f.write("\n# edited after planning\n")
    with pytest.raises(FrozenMismatch, match=rf"entry-point code changed since planning \(changed: {module}.py\)"):
        execute_snapshot(snapshot, live=False)


def test_a_snapshot_runs_once(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = plan(tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}))
    assert execute_snapshot(snapshot, live=False).status == "succeeded"
    with pytest.raises(SnapshotError, match="was already executed"):
        execute_snapshot(snapshot, live=False)


def test_approval_is_required_before_anything_runs(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = plan(tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}))
    with pytest.raises(ApprovalRequired):
        execute_snapshot(snapshot, require_approval=True, live=False)
    _nothing_written(snapshot)
    assert not is_sealed(snapshot)


def test_policy_requires_approval_too(tmp_path: Path, tiny_lm: Path) -> None:
    text = request_text(tiny_lm, generation={"max_new_tokens": 8}) + "[policy]\nrequire_approval = true\n"
    snapshot = plan(tmp_path, text)
    proc = run_cli("execute", snapshot)
    assert proc.returncode == ApprovalRequired.exit_code and "approv" in proc.stderr
    _nothing_written(snapshot)

