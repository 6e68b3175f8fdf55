"""`genrun diff` compares every file's bytes and each side against its own manifest (a tampered copy is not identical)."""

import os
import shutil
from pathlib import Path

import orjson
import pytest

from genrun.analysis._diff_files import PROVENANCE_REASON, VOLATILE_REASON
from genrun.schemas import layout

from _cli_helpers import cli, run_json, run_request, sealed_run
from _lm_helpers import request_text


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory, tiny_lm: Path) -> Path:
    return sealed_run(tmp_path_factory.mktemp("diff-files"), request_text(tiny_lm, generation={"max_new_tokens": 8}))


def writable_copy(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    for root, _, files in os.walk(dest):
        for name in files:
            os.chmod(Path(root) / name, 0o644)
    return dest


def test_exact_copy_is_identical(capsys, tmp_path: Path, sealed: Path) -> None:
    copy = writable_copy(sealed, tmp_path / "copy")
    code, out, _ = cli(capsys, "diff", sealed, copy, "--json")
    document = orjson.loads(out)
    assert code == 0 and document["identical"] is True and document["files"] is None and document["unverified"] == {}
    code, out, _ = cli(capsys, "diff", sealed, copy)
    assert "identical (timings aside)" in out


def test_copy_with_a_changed_output_and_an_added_file_is_not_identical(capsys, tmp_path: Path, sealed: Path) -> None:
    copy = writable_copy(sealed, tmp_path / "copy")
    text_output = next(p for p in (copy / layout.OUTPUTS_DIR).iterdir() if p.suffix == ".txt")
    text_output.write_text(text_output.read_text() + " tampered")
    (copy / "notes.txt").write_text("added later")
    changed = f"{layout.OUTPUTS_DIR}/{text_output.name}"

    document = orjson.loads(cli(capsys, "diff", sealed, copy, "--json")[1])
    assert document["identical"] is False
    assert document["files"]["changed"] == [changed] and document["files"]["added"] == ["notes.txt"]
    assert document["unverified"] == {"b": [f"{changed} (changed)", "notes.txt (not in the manifest)"]}

    out = " ".join(cli(capsys, "diff", sealed, copy)[1].split())
    assert "the snapshots differ" in out and "identical (timings aside)" not in out
    assert f"changed: {changed}" in out and "only in B: notes.txt" in out
    assert f"B does not match its own manifest: {changed} (changed), notes.txt (not in the manifest)" in out


def test_copy_with_a_file_removed_names_it(capsys, tmp_path: Path, sealed: Path) -> None:
    copy = writable_copy(sealed, tmp_path / "copy")
    (copy / layout.TOKEN_IDS_SUMMARY).unlink()
    document = orjson.loads(cli(capsys, "diff", copy, sealed, "--json")[1])
    assert document["identical"] is False
    assert document["files"]["added"] == [layout.TOKEN_IDS_SUMMARY]
    assert document["unverified"] == {"a": [f"{layout.TOKEN_IDS_SUMMARY} (missing)"]}


def test_two_runs_of_one_request_are_identical_timings_aside(capsys, tmp_path: Path, sealed: Path, tiny_lm: Path) -> None:
    again = run_request(capsys, tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}), "r.toml")
    document = orjson.loads(cli(capsys, "diff", sealed, again, "--json")[1])
    assert document["identical"] is True, document
    assert {layout.PROGRESS, layout.RESULT} <= set(document["files"]["changed"])  # clock readings differ, and are named
    assert document["lineage"] is None


# -- what a rerun necessarily writes differently ----------------------------------------------------------------------


def test_faithful_rerun_is_identical_and_shows_its_lineage_and_request_source_as_provenance(capsys, tmp_path: Path, sealed: Path) -> None:
    """The child holds a lineage and a JSON request source where the parent holds the user's TOML: how each was made, not what ran."""
    child = Path(run_json(capsys, "rerun", sealed, "--store", tmp_path / "store")["child"])
    code, out, _ = cli(capsys, "diff", sealed, child, "--json")
    document = orjson.loads(out)
    assert code == 0 and document["identical"] is True, document
    source_toml, source_json = layout.request_source_name("toml"), layout.request_source_name("json")
    assert document["files"]["added"] == sorted([layout.LINEAGE, source_json]) and document["files"]["removed"] == [source_toml]
    assert {rel: document["files_set_aside"][rel] for rel in (layout.LINEAGE, source_json, source_toml)} == dict.fromkeys(
        (layout.LINEAGE, source_json, source_toml), PROVENANCE_REASON)
    assert document["files_set_aside"][layout.PROGRESS] == VOLATILE_REASON

    code, out, _ = cli(capsys, "diff", sealed, child)
    out = " ".join(out.split())
    assert code == 0 and out.endswith("identical (timings aside)") and "Files (bytes on disk) differ" not in out
    assert (f"Files {PROVENANCE_REASON}: {layout.LINEAGE} (only in B), {source_json} (only in B), {source_toml} (only in A)") in out
    assert f"Files {VOLATILE_REASON}: " in out and "Verdict: reproduced" in out


def test_rerun_with_a_change_differs(capsys, tmp_path: Path, sealed: Path) -> None:
    child = Path(run_json(capsys, "rerun", sealed, "--set", "generation.max_new_tokens=4", "--store", tmp_path / "store")["child"])
    document = orjson.loads(cli(capsys, "diff", sealed, child, "--json")[1])
    assert document["identical"] is False
    assert [c["path"] for c in document["request"]] == ["generation.max_new_tokens"]
    assert layout.LINEAGE in document["files_set_aside"]  # still provenance: the change itself is what differs
    shown = cli(capsys, "diff", sealed, child)[1]
    assert shown.rstrip().endswith("the snapshots differ")
    assert "Files (bytes on disk) differ:" in shown and "Files (bytes on disk) differs" not in shown, shown  # plural titles, plural verb


def test_requests_differing_only_in_their_source_text_are_identical(capsys, tmp_path: Path, sealed: Path, tiny_lm: Path) -> None:
    """The source is the bytes as given (here a comment); what ran is the normalized `request.json`, compared key by key."""
    text = "# the same request, annotated\n" + request_text(tiny_lm, generation={"max_new_tokens": 8})
    again = run_request(capsys, tmp_path, text, "r.toml")
    document = orjson.loads(cli(capsys, "diff", sealed, again, "--json")[1])
    source = layout.request_source_name("toml")
    assert source in document["files"]["changed"] and document["files_set_aside"][source] == PROVENANCE_REASON
    assert document["identical"] is True, document
