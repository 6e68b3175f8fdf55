"""`SnapshotDir`, the one reader and writer of snapshot artifacts: every artifact of real (format-2) snapshots reads into
its model; damaged, newer, linked, FIFO and oversized files are refused with a typed error naming the file and why;
a write is atomic (old or new content, never half, never through a link); the state follows the format's rule."""

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from pydantic import BaseModel

from genrun.schemas import (
    CodeIdentity,
    Determinism,
    Environment,
    GeneratedTokenIds,
    GenerationCalls,
    GenerationConfigBeforeGenerate,
    GenerationStop,
    InputPreparation,
    ModelIdentity,
    Request,
    Result,
    Signoff,
    TokenBudget,
    layout,
)
from genrun.schemas.digests import plan_digest, snapshot_digest
from genrun.runner.backends.diffusers.evidence import PipelineCallBeforeCall
from genrun.schemas.sweep import SweepPlan, SweepResult, WorkerModel
from genrun.snapshot_dir import (
    ArtifactDamaged,
    ArtifactError,
    ArtifactMissing,
    ArtifactNewer,
    ArtifactUnreadable,
    ManifestDamaged,
    SnapshotDir,
)

FIXTURES = Path(__file__).parent / "fixtures" / "format-2"
LM = FIXTURES / "20261201T150421Z-tiny-fd0549"
DIFFUSION = FIXTURES / "20261201T150426Z-tiny-diffusion-13bd79"
SWEEP_STORE = FIXTURES / "sweep-store"

LM_ARTIFACTS: dict[str, type[BaseModel]] = {
    layout.REQUEST: Request, layout.ENVIRONMENT: Environment, layout.CODE: CodeIdentity, layout.MODEL: ModelIdentity,
    layout.TOKEN_BUDGET: TokenBudget, layout.GENERATION_CONFIG: GenerationConfigBeforeGenerate,
    layout.GENERATION_CALLS: GenerationCalls, layout.INPUT_PREPARATION: InputPreparation,
    layout.TOKEN_IDS_SUMMARY: GeneratedTokenIds, layout.STOP: GenerationStop, layout.RESULT: Result,
    layout.DETERMINISM: Determinism,
}


def writable_copy(source: Path, tmp_path: Path) -> Path:
    """A copy of a sealed fixture whose files may be changed (sealed files are read-only)."""
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return copy


# -- basics ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(LM_ARTIFACTS))
def test_reads_each_artifact_of_a_language_model_run_into_its_model(name: str) -> None:
    loaded = SnapshotDir(LM).read(name, LM_ARTIFACTS[name])
    assert isinstance(loaded, LM_ARTIFACTS[name]) and loaded == LM_ARTIFACTS[name].model_validate_json((LM / name).read_bytes())


def test_reads_the_diffusion_call_the_sweep_records_and_a_signoff() -> None:
    assert SnapshotDir(DIFFUSION).read(layout.PIPELINE_CALL, PipelineCallBeforeCall).timesteps_planned > 0
    sweep = next(p for p in SWEEP_STORE.iterdir() if (p / layout.SWEEP_PLAN).exists())
    plan = SnapshotDir(sweep).read(layout.SWEEP_PLAN, SweepPlan)
    assert len(SnapshotDir(sweep).read(layout.SWEEP_RESULT, SweepResult).items) == len(plan.items) == 6
    item = next(p for p in SWEEP_STORE.iterdir() if (p / layout.WORKER_MODEL).exists())
    assert SnapshotDir(item).read(layout.WORKER_MODEL, WorkerModel)
    (record,) = (LM / layout.SIGNOFFS_DIR).glob("*.json")
    assert SnapshotDir(LM).read(f"{layout.SIGNOFFS_DIR}/{record.name}", Signoff).decision == "accept"


def test_manifests_read_with_their_digests() -> None:
    frozen = SnapshotDir(LM).read_manifest(layout.FROZEN_MANIFEST)
    sealed = SnapshotDir(LM).read_manifest(layout.MANIFEST)
    assert frozen.digest == plan_digest(LM) and sealed.digest == snapshot_digest(LM)
    assert layout.REQUEST in frozen.entries and layout.RESULT in sealed.entries


def test_a_manifest_that_is_not_sha256sum_text_is_damaged_and_keeps_its_digest(tmp_path: Path) -> None:
    copy = writable_copy(LM, tmp_path)
    (copy / layout.MANIFEST).write_bytes(b"not a manifest\n")
    with pytest.raises(ManifestDamaged, match="not sha256sum format: line 1") as caught:
        SnapshotDir(copy).read_manifest(layout.MANIFEST)
    assert caught.value.digest == snapshot_digest(copy) and isinstance(caught.value, ArtifactDamaged)


def test_absent_file_is_missing_or_none() -> None:
    snapshot = SnapshotDir(DIFFUSION)
    assert snapshot.read_optional(layout.TOKEN_IDS_SUMMARY, GeneratedTokenIds) is None and not snapshot.has(layout.TOKEN_IDS_SUMMARY)
    with pytest.raises(ArtifactMissing) as caught:
        snapshot.read(layout.TOKEN_IDS_SUMMARY, GeneratedTokenIds)
    assert caught.value.name == layout.TOKEN_IDS_SUMMARY and str(DIFFUSION / layout.TOKEN_IDS_SUMMARY) in str(caught.value)


def test_listing_and_state_follow_the_format_rule(tmp_path: Path) -> None:
    sealed = SnapshotDir(LM)
    assert sealed.state() is layout.SnapshotState.SEALED
    assert layout.RESULT in sealed.names() and not any(n.startswith(layout.SIGNOFFS_DIR + "/") for n in sealed.names())
    assert any(rel.startswith(layout.SIGNOFFS_DIR + "/") for rel, _ in sealed.entries())
    copy = writable_copy(LM, tmp_path)
    (copy / layout.MANIFEST).unlink()
    assert SnapshotDir(copy).state() is layout.SnapshotState.INCOMPLETE
    (copy / layout.RESULT).unlink()
    assert SnapshotDir(copy).state() is layout.SnapshotState.RUNNING
    shutil.rmtree(copy / layout.OUTPUTS_DIR)
    for name in [*layout.EXECUTION_FILES, layout.GENERATION_CALLS, layout.INPUT_PREPARATION, layout.PROMPT_TOKEN_IDS, layout.DETERMINISM]:
        (copy / name).unlink(missing_ok=True)
    assert SnapshotDir(copy).state() is layout.SnapshotState.PLANNED
    (copy / layout.FROZEN_MANIFEST).unlink()
    assert SnapshotDir(copy).state() is layout.SnapshotState.PLANNING


# -- refusals: each a typed error naming the file and the reason ---------------------------------------------------
def test_invalid_json_and_schema_damage_are_damaged(tmp_path: Path) -> None:
    copy = writable_copy(LM, tmp_path)
    (copy / layout.RESULT).write_bytes(b'{"status": "succ')
    with pytest.raises(ArtifactDamaged, match="not valid JSON") as caught:
        SnapshotDir(copy).read(layout.RESULT, Result)
    assert caught.value.name == layout.RESULT and caught.value.reason.startswith("not valid JSON")
    data = orjson.loads((copy / layout.STOP).read_bytes())
    data["sequences"][0]["reason"] = "tired"
    (copy / layout.STOP).write_bytes(orjson.dumps(data))
    with pytest.raises(ArtifactDamaged, match=r"does not match its schema: sequences\.0") as caught:
        SnapshotDir(copy).read(layout.STOP, GenerationStop)
    assert str(copy / layout.STOP) in str(caught.value)


def test_newer_format_is_refused_naming_the_genrun_that_wrote_it(tmp_path: Path) -> None:
    copy = writable_copy(LM, tmp_path)
    for name in (layout.STOP, layout.ENVIRONMENT):
        data = orjson.loads((copy / name).read_bytes())
        data["schema_version"] = layout.FORMAT_VERSION + 7
        if name == layout.ENVIRONMENT:
            data["genrun_version"] = "9.1.0"
        (copy / name).write_bytes(orjson.dumps(data))
    with pytest.raises(ArtifactNewer) as caught:
        SnapshotDir(copy).read(layout.STOP, GenerationStop)
    expected = f"written by genrun 9.1.0 (format {layout.FORMAT_VERSION + 7}); this genrun reads up to {layout.FORMAT_VERSION}: upgrade"
    assert caught.value.reason == expected and (caught.value.version, caught.value.written_by) == (layout.FORMAT_VERSION + 7, "9.1.0")


def test_a_newer_signoff_is_not_attributed_to_the_genrun_that_ran_the_snapshot(tmp_path: Path) -> None:
    """environment.json names the genrun that planned the run; a sign-off may come from any later genrun."""
    copy = writable_copy(LM, tmp_path)
    (copy / layout.SIGNOFFS_DIR / "late.json").write_bytes(orjson.dumps({"schema_version": layout.FORMAT_VERSION + 1}))
    with pytest.raises(ArtifactNewer, match=r"^.*: written by a newer genrun \(format \d+\); this genrun reads up to \d+: upgrade$"):
        SnapshotDir(copy).read(f"{layout.SIGNOFFS_DIR}/late.json", Signoff)


def test_link_fifo_and_oversized_files_are_refused_without_reading(tmp_path: Path) -> None:
    copy = writable_copy(LM, tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_bytes((copy / layout.RESULT).read_bytes())
    (copy / layout.RESULT).unlink()
    os.symlink(outside, copy / layout.RESULT)
    (copy / layout.STOP).unlink()
    os.mkfifo(copy / layout.STOP)  # opening it for reading would block forever
    with open(copy / layout.TOKEN_BUDGET, "r+b") as f:
        f.truncate(65 << 20)  # sparse: over the JSON bound without writing 65 MB
    os.symlink("/dev/zero", copy / "zero.json")
    snapshot = SnapshotDir(copy)
    for reading in (contextlib.nullcontext(), snapshot.held_open()):  # each file opened beneath the path, or at the open folder
        with reading:
            with pytest.raises(ArtifactUnreadable, match="is a symbolic link .*a snapshot holds regular files only"):
                snapshot.read(layout.RESULT, Result)
            with pytest.raises(ArtifactUnreadable, match="is a FIFO, not a regular file"):
                snapshot.read(layout.STOP, GenerationStop)
            with pytest.raises(ArtifactUnreadable, match="68,157,440 bytes, more than the 67,108,864"):
                snapshot.read(layout.TOKEN_BUDGET, TokenBudget)
            with pytest.raises(ArtifactUnreadable, match="symbolic link"):
                snapshot.read_bytes("zero.json")
            with pytest.raises(ArtifactMissing):
                snapshot.read_bytes("absent.json")
            assert snapshot.read_json(layout.REQUEST) == orjson.loads((copy / layout.REQUEST).read_bytes())
    assert issubclass(ArtifactUnreadable, ArtifactError)


def test_a_held_folder_reads_the_folder_it_opened_and_refuses_a_missing_one(tmp_path: Path) -> None:
    copy = writable_copy(LM, tmp_path)
    request = (copy / layout.REQUEST).read_bytes()
    snapshot = SnapshotDir(copy)
    with snapshot.held_open():
        copy.rename(tmp_path / "moved")  # renamed while held: the open folder is still the one read
        assert snapshot.read_bytes(layout.REQUEST) == request
    with pytest.raises(FileNotFoundError):
        with snapshot.held_open():
            pass
    with pytest.raises(ArtifactMissing):  # released: read by its path again, which is gone
        snapshot.read_bytes(layout.REQUEST)


def test_appended_bytes_are_read_from_an_offset() -> None:
    whole = SnapshotDir(LM).read_bytes(layout.PROGRESS)
    assert SnapshotDir(LM).read_bytes(layout.PROGRESS, offset=10) == whole[10:]
    assert SnapshotDir(LM).read_bytes(layout.PROGRESS, offset=len(whole)) == b""


# -- writing ---------------------------------------------------------------------------------------------------------
def test_write_round_trips_and_replaces_a_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    copy = writable_copy(LM, tmp_path)
    result = SnapshotDir(LM).read(layout.RESULT, Result)
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"not yours")
    (copy / layout.RESULT).unlink()
    os.symlink(outside, copy / layout.RESULT)
    written = SnapshotDir(copy, writable=True).write(layout.RESULT, result)
    assert written == copy / layout.RESULT and not written.is_symlink() and outside.read_bytes() == b"not yours"
    assert SnapshotDir(copy).read(layout.RESULT, Result) == result
    assert oct(written.stat().st_mode & 0o777) != oct(0o600)  # a shared snapshot's files, not mkstemp's private mode


def test_failed_write_leaves_the_old_content_and_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = writable_copy(LM, tmp_path)
    before = (copy / layout.RESULT).read_bytes()
    result = SnapshotDir(copy).read(layout.RESULT, Result).model_copy(update={"generated": 999})

    def disk_fails(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", disk_fails)
    with pytest.raises(OSError, match="Input/output error"):
        SnapshotDir(copy, writable=True).write(layout.RESULT, result)
    monkeypatch.undo()
    assert (copy / layout.RESULT).read_bytes() == before
    assert sorted(p.name for p in copy.iterdir() if p.name.startswith(".")) == []
    SnapshotDir(copy, writable=True).write(layout.RESULT, result)
    assert SnapshotDir(copy).read(layout.RESULT, Result).generated == 999


def test_writes_need_a_writable_object_and_a_name_inside_the_snapshot(tmp_path: Path) -> None:
    copy = writable_copy(LM, tmp_path)
    result = SnapshotDir(LM).read(layout.RESULT, Result)
    with pytest.raises(PermissionError, match="read-only: open it with SnapshotDir"):
        SnapshotDir(copy).write(layout.RESULT, result)
    for bad in ("../escape.json", "/abs.json", "outputs//x.json", "./result.json"):
        with pytest.raises(ValueError, match="not a file name inside a snapshot"):
            SnapshotDir(copy, writable=True).write(bad, result)
    shutil.rmtree(copy / layout.OUTPUTS_DIR)
    os.symlink(tmp_path, copy / layout.OUTPUTS_DIR)
    with pytest.raises(ArtifactUnreadable, match="outputs/ is not a directory of the snapshot"):
        SnapshotDir(copy, writable=True).write_bytes(f"{layout.OUTPUTS_DIR}/sequence_0.txt", b"x")
    assert not (tmp_path / "sequence_0.txt").exists()


def test_a_folder_swapped_for_a_link_after_the_check_is_never_written_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the folder check cannot close: `outputs/` becomes a link between the check and the write (simulated by
    letting the check see the folder it saw before). The write opens folders from the snapshot without following a
    link, so it is refused and nothing lands outside."""
    import genrun.snapshot_dir as snapshot_dir_module

    copy = writable_copy(LM, tmp_path)
    folder_stat = os.lstat(copy / layout.OUTPUTS_DIR)
    shutil.rmtree(copy / layout.OUTPUTS_DIR)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, copy / layout.OUTPUTS_DIR)
    real_lstat = os.lstat
    monkeypatch.setattr(snapshot_dir_module.os, "lstat",
                        lambda p, *a, **k: folder_stat if Path(p) == copy / layout.OUTPUTS_DIR else real_lstat(p, *a, **k))
    with pytest.raises(ArtifactUnreadable, match="cannot be written: .*outputs/, a symbolic link"):
        SnapshotDir(copy, writable=True).write_bytes(f"{layout.OUTPUTS_DIR}/sequence_0.txt", b"x")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("replace_with", ["link", "directory"])
def test_a_held_snapshot_writes_lists_appends_and_seals_in_the_directory_it_opened(tmp_path: Path, replace_with: str) -> None:
    """Held open (as a run holds its snapshot), every operation is relative to the directory's descriptor: the path renamed
    away and replaced by a link or an empty directory receives nothing, and the seal lists the files where they are."""
    from genrun.runner.store import seal_snapshot

    path, moved, decoy = tmp_path / "snap", tmp_path / "moved", tmp_path / "decoy"
    (path / layout.OUTPUTS_DIR).mkdir(parents=True)
    decoy.mkdir()
    snapshot = SnapshotDir(path, writable=True)
    with snapshot.held_open():
        path.rename(moved)
        if replace_with == "link":
            path.symlink_to(decoy)
        else:
            path.mkdir()
        snapshot.write_bytes(layout.RESULT, b"{}\n")
        snapshot.write_bytes(f"{layout.OUTPUTS_DIR}/sequence_0.txt", b"text")
        stream = snapshot.open_stream(layout.PROGRESS)
        stream.write(b"{}\n")
        stream.close()
        assert snapshot.has(layout.RESULT) and snapshot.read_bytes(f"{layout.OUTPUTS_DIR}/sequence_0.txt") == b"text"
        assert sorted(rel for rel, _ in snapshot.entries()) == [f"{layout.OUTPUTS_DIR}/sequence_0.txt", layout.PROGRESS, layout.RESULT]
        digest = seal_snapshot(snapshot)
    assert os.listdir(decoy if replace_with == "link" else path) == []
    assert sorted(os.listdir(moved)) == sorted([layout.MANIFEST, layout.OUTPUTS_DIR, layout.PROGRESS, layout.RESULT, layout.SIGNOFFS_DIR])
    assert digest == snapshot_digest(moved)
    assert stat.S_IMODE(os.stat(moved / layout.RESULT).st_mode) == 0o444


def test_reading_imports_neither_torch_nor_the_writer() -> None:
    """Analysis reads through `SnapshotDir` on a machine without torch, and never loads the atomic writer."""
    probe = ("import sys; from genrun.snapshot_dir import SnapshotDir; from genrun.schemas import Result, layout; "
             f"SnapshotDir({str(LM)!r}).read(layout.RESULT, Result); "
             "loaded = [m for m in ('torch', 'transformers', 'genrun.runner._io') if m in sys.modules]; assert not loaded, loaded")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
