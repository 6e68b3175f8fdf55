"""Changes to a sealed snapshot that leave every listed file's bytes alone are still named by `verify`.

Each case changes a copy of a real sealed snapshot the way a person (or a script) could, then runs the real
`verify --json`: it must exit 1 with a FAIL that names what changed, and print one JSON document.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from _analysis_helpers import as_another_user, copy_snapshot, make_writable, run_genrun, snapshots  # noqa: F401
from genrun.schemas import layout


def _failed(snapshot: Path) -> list[dict]:
    verified = run_genrun("verify", snapshot, "--json")
    assert verified.returncode == 1, verified.stderr[-2000:]
    return [f for f in json.loads(verified.stdout)["findings"] if f["status"] == "FAIL"]


def _empty_dir(rel: str) -> Callable[[Path], None]:
    def change(snapshot: Path) -> None:
        make_writable(snapshot / Path(rel).parent)
        (snapshot / rel).mkdir()
    return change


def _signoffs_replaced(by: Callable[[Path], None]) -> Callable[[Path], None]:
    def change(snapshot: Path) -> None:
        make_writable(snapshot)
        (snapshot / layout.SIGNOFFS_DIR).rmdir()
        by(snapshot / layout.SIGNOFFS_DIR)
    return change


CASES: dict[str, tuple[Callable[[Path], None], str, str]] = {  # change, check that FAILs, words its message holds
    "empty-dir-top": (_empty_dir("added"), "manifest_integrity", "added/ is an empty directory"),
    "empty-dir-in-outputs": (_empty_dir(f"{layout.OUTPUTS_DIR}/added"), "manifest_integrity", "outputs/added/ is an empty directory"),
    "junk-in-signoffs": (lambda s: (s / layout.SIGNOFFS_DIR / "junk").write_text("x"), "signoffs", "'junk' (not a record or a signature)"),
    "orphan-signature": (lambda s: (s / layout.SIGNOFFS_DIR / "a.json.sig").write_text("x"), "signoffs", "'a.json.sig' (a signature without its record)"),
    "fifo-in-signoffs": (lambda s: os.mkfifo(s / layout.SIGNOFFS_DIR / "r.json"), "signoffs", "'r.json' (a FIFO)"),
    "signoffs-is-a-file": (_signoffs_replaced(lambda p: p.write_text("x")), "signoffs", "signoffs itself is a regular file"),
    "signoffs-links-to-etc": (_signoffs_replaced(lambda p: p.symlink_to("/etc")), "signoffs", "signoffs itself is a symbolic link to '/etc'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_change_beside_the_listed_files_is_named(case: str, snapshots, tmp_path: Path) -> None:  # noqa: F811
    change, check, words = CASES[case]
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    change(snapshot)
    failed = {f["name"]: f["message"] for f in _failed(snapshot)}
    assert words in failed.get(check, ""), failed


def test_sign_off_leftovers_of_an_interrupted_sign_off_are_not_damage(snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    (snapshot / layout.SIGNOFFS_DIR / ".staging-0123abcd.json").write_text("{}")
    (snapshot / layout.SIGNOFFS_DIR / ".r.json.0a1b2c3d.tmp").write_text("{")
    verified = run_genrun("verify", snapshot, "--json")
    assert verified.returncode == 0, verified.stdout[-3000:]


def test_a_sealed_snapshot_without_its_frozen_manifest_is_verified_as_damaged(snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    make_writable(snapshot)
    (snapshot / layout.FROZEN_MANIFEST).unlink()
    failed = {f["name"]: f["message"] for f in _failed(snapshot)}
    assert f"{layout.FROZEN_MANIFEST} cannot be used" in failed["plan_digest_chain"], failed
    assert layout.FROZEN_MANIFEST in failed["manifest_integrity"], failed


def test_an_unreadable_outputs_folder_is_named_not_taken_for_a_plan(snapshots) -> None:  # noqa: F811
    """Read as another user (root reads every folder): the rest of the snapshot is still checked, and outputs/ is named."""
    as_other_user = as_another_user()
    store = Path(tempfile.mkdtemp(prefix="genrun-unreadable-"))  # pytest's tmp_path is private to its owner
    try:
        store.chmod(0o755)
        snapshot = copy_snapshot(snapshots.get("eos"), store)
        for folder in (snapshot, snapshot / layout.SIGNOFFS_DIR):
            folder.chmod(0o755)
        (snapshot / layout.OUTPUTS_DIR).chmod(0)
        done = subprocess.run([*as_other_user, sys.executable, "-m", "genrun", "verify", str(snapshot), "--json"],
                              capture_output=True, text=True, timeout=300, cwd=store)
        assert done.returncode == 1, done.stderr[-2000:]
        findings = {f["name"]: f for f in json.loads(done.stdout)["findings"]}
        assert findings["completeness"]["status"] == "PASS", findings["completeness"]
        assert "outputs/ cannot be listed" in findings["manifest_integrity"]["message"], findings["manifest_integrity"]
        assert findings["outputs_listed"]["message"] == "outputs/ cannot be listed, so its files cannot be compared"
    finally:
        (store / snapshots.get("eos").name / layout.OUTPUTS_DIR).chmod(0o755)
        shutil.rmtree(store)
