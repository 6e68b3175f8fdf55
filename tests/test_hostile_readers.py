"""Readers on hostile snapshots: names no JSON can carry, a tokenizer whose decoder panics, 300,000 empty rows, and a
store where one snapshot is hostile: every reader finishes, bounded, and names what is wrong; the others stay listed.

Each reader is the real CLI in its own process (forked from the suite's warm server, `tests/_forked.py`) with a
timeout and an address-space limit, so a hang or a runaway read fails the test instead of the machine.
"""

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pytest

from _forked import run_cli_forked
from _analysis_helpers import as_another_user, copy_snapshot, edit_json, make_writable, snapshots  # noqa: F401
from genrun.schemas import layout

LIMITS = {"address_space_headroom": 2 << 30, "cpu_seconds": 300}
TIMEOUT_S = 300  # a loaded 2-core machine; each call takes seconds


def _bounded(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_cli_forked(*args, timeout=TIMEOUT_S, limits=LIMITS)


def _findings(done: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return {f["name"]: f for f in json.loads(done.stdout)["findings"]}


def _add_non_utf8_output(snapshot: Path) -> None:
    make_writable(snapshot / layout.OUTPUTS_DIR)
    with open(os.path.join(os.fsencode(snapshot / layout.OUTPUTS_DIR), b"bad\xff\xfe.txt"), "wb") as f:
        f.write(b"x")


def test_a_file_name_that_is_not_utf8_is_named_escaped(snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    _add_non_utf8_output(snapshot)
    verified = _bounded("verify", snapshot, "--json")
    assert verified.returncode == 1
    assert "outputs/bad\\xff\\xfe.txt: has a name that is not valid UTF-8" in _findings(verified)["artifacts_valid"]["message"]
    page = tmp_path / "page.html"
    reported = _bounded("report", snapshot, "--html", page)
    assert reported.returncode == 0 and "Traceback" not in reported.stderr, reported.stderr[-3000:]
    assert "bad\\xff\\xfe.txt" in page.read_text()


PANICKING_DECODER = {"type": "Replace", "pattern": {"Regex": "(.|.|.|.)*[^\\s\\S]"}, "content": "y"}
"""Four-way alternation under a star, then a class nothing matches: onig's backtracking exceeds its retry limit on any text
of a dozen characters, and tokenizers panics (`pyo3_runtime.PanicException`, a BaseException)."""


def test_a_tokenizer_whose_decoder_panics_is_a_fail_naming_it(snapshots, tiny_lm: Path, tmp_path: Path) -> None:  # noqa: F811
    model = tmp_path / "model"
    shutil.copytree(tiny_lm, model)
    tokenizer = orjson.loads((model / "tokenizer.json").read_bytes())
    tokenizer["decoder"] = {"type": "Sequence", "decoders": [tokenizer["decoder"], {"type": "Fuse"}, PANICKING_DECODER]}
    data = orjson.dumps(tokenizer)
    (model / "tokenizer.json").write_bytes(data)
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")

    def point_at_the_copy(identity: dict) -> None:  # model.json names the copy and its tokenizer's digest
        identity["resolved_path"] = str(model)
        for entry in identity["files"]:
            if entry["path"] == "tokenizer.json":
                entry["sha256"] = hashlib.sha256(data).hexdigest()

    edit_json(snapshot, layout.MODEL, point_at_the_copy)
    verified = _bounded("verify", snapshot, "--json")
    saved_text = _findings(verified)["saved_text"]
    assert saved_text["status"] == "FAIL" and f"{model / 'tokenizer.json'} fails to decode" in saved_text["message"], saved_text
    reported = _bounded("report", snapshot, "--json")
    assert "Traceback" not in reported.stderr, reported.stderr[-3000:]
    assert any(f"{model / 'tokenizer.json'} fails to decode" in note for note in json.loads(reported.stdout)["notes"])
    page = _bounded("report", snapshot, "--html", tmp_path / "page.html")
    assert page.returncode == 0 and "Traceback" not in page.stderr, page.stderr[-3000:]


def _empty_rows(count: int) -> bytes:
    header = orjson.dumps({layout.sequence_name(i): {"dtype": "I64", "shape": [0], "data_offsets": [0, 0]} for i in range(count)})
    return struct.pack("<Q", len(header)) + header


def test_300000_empty_rows_give_bounded_findings_and_diff(snapshots, tmp_path: Path) -> None:  # noqa: F811
    """Each row disagrees with the summary: the finding says so for the first rows and how much more there is; the table
    verify and diff print a bounded amount (before: a 23.9 MB message, 53 MB of table, a diff of every row)."""
    pristine = snapshots.get("eos")
    snapshot = copy_snapshot(pristine, tmp_path / "store")
    make_writable(snapshot / layout.TOKEN_IDS)
    (snapshot / layout.TOKEN_IDS).write_bytes(_empty_rows(300_000))

    verified = _bounded("verify", snapshot, "--json")
    assert verified.returncode == 1 and len(verified.stdout) < 2_000_000, len(verified.stdout)
    counts = _findings(verified)["token_counts"]
    assert counts["status"] == "FAIL" and "more characters not shown" in counts["message"] and len(counts["message"]) < 5000
    table = _bounded("verify", snapshot)
    assert table.returncode == 1 and "token_counts" in table.stdout and len(table.stdout) < 200_000, len(table.stdout)
    diffed = _bounded("diff", pristine, snapshot, "--json")
    assert "Traceback" not in diffed.stderr and len(diffed.stdout) < 2_000_000, (diffed.stderr[-2000:], len(diffed.stdout))
    document = json.loads(diffed.stdout)
    assert len(document["sequences"]) == 1000 and document["sequences_not_listed"] == 300_000 - 1000
    assert document["sequences"][0]["index"] == 0 and not document["sequences"][0]["identical"]


def _nested_1500_deep(snapshot: Path) -> None:
    make_writable(snapshot / layout.OUTPUTS_DIR)
    here = os.open(snapshot / layout.OUTPUTS_DIR, os.O_RDONLY)
    for _ in range(1500):  # by descriptor: the path grows past PATH_MAX
        os.mkdir("d", dir_fd=here)
        inner = os.open("d", os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = inner
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=here))
    os.close(here)


def _remove_nested(snapshot: Path) -> None:
    """Undo `_nested_1500_deep` (shutil.rmtree, as pytest's clean-up uses it, recurses once per level and fails)."""
    folders = [os.open(snapshot / layout.OUTPUTS_DIR, os.O_RDONLY)]
    while "d" in os.listdir(folders[-1]):
        folders.append(os.open("d", os.O_RDONLY, dir_fd=folders[-1]))
    os.unlink("f", dir_fd=folders[-1])
    while len(folders) > 1:
        os.close(folders.pop())
        os.rmdir("d", dir_fd=folders[-1])
    os.close(folders[0])


def _manifest_fifo(snapshot: Path) -> None:
    make_writable(snapshot)
    (snapshot / layout.MANIFEST).unlink()
    os.mkfifo(snapshot / layout.MANIFEST)


def _empty_rows_ids(snapshot: Path) -> None:
    make_writable(snapshot / layout.TOKEN_IDS)
    (snapshot / layout.TOKEN_IDS).write_bytes(_empty_rows(300_000))


def _signoffs_to_etc(snapshot: Path) -> None:
    make_writable(snapshot)
    (snapshot / layout.SIGNOFFS_DIR).rmdir()
    (snapshot / layout.SIGNOFFS_DIR).symlink_to("/etc")


HOSTILE = {"deep01": _nested_1500_deep, "utf801": _add_non_utf8_output, "fifo01": _manifest_fifo, "rows01": _empty_rows_ids,
           "etc001": _signoffs_to_etc}


def _store_of_one_good_and_hostile_ones(store: Path, good: Path) -> list[str]:
    """The good snapshot, then one copy per hostile change (ids `<good id minus its hex>-<case>`)."""
    copy_snapshot(good, store)
    ids = [good.name]
    for case, change in HOSTILE.items():
        snapshot = store / f"{good.name[:-6]}{case}"
        shutil.copytree(good, snapshot, symlinks=True)
        change(snapshot)
        ids.append(snapshot.name)
    return ids


def test_hostile_snapshots_never_hide_the_others_from_ls_or_the_store_page(snapshots, tmp_path: Path) -> None:  # noqa: F811
    store = tmp_path / "store"
    ids = _store_of_one_good_and_hostile_ones(store, snapshots.get("eos"))
    try:
        _list_and_page(store, ids, tmp_path / "index.html")
    finally:
        _remove_nested(store / f"{snapshots.get('eos').name[:-6]}deep01")


def _list_and_page(store: Path, ids: list[str], page: Path) -> None:
    for attempt in ("files", "index"):  # first from the files, then from the index the first call wrote
        listed = _bounded("ls", "--store", store, "--json")
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, (attempt, listed.stderr[-3000:])
        assert sorted(row["id"] for row in json.loads(listed.stdout)["snapshots"]) == sorted(ids), attempt
    written = _bounded("report", "--store", store, "--html", page, "--pages")
    assert written.returncode == 0 and "Traceback" not in written.stderr, written.stderr[-3000:]
    assert all(snapshot_id in page.read_text() for snapshot_id in ids)


def test_an_unreadable_snapshot_is_listed_as_such_and_the_rest_still_are(snapshots) -> None:  # noqa: F811
    """As another user (root reads every folder): a snapshot folder of mode 000 is a row `unreadable`, not a crash of `ls`."""
    as_other_user = as_another_user()
    good = snapshots.get("eos")
    store = Path(tempfile.mkdtemp(prefix="genrun-unreadable-store-"))  # pytest's tmp_path is private to its owner
    hidden = store / f"{good.name[:-6]}hidden"
    try:
        store.chmod(0o755)
        for copy in (store / good.name, hidden):
            shutil.copytree(good, copy, symlinks=True)
            copy.chmod(0o755)
        hidden.chmod(0)
        done = subprocess.run([*as_other_user, sys.executable, "-m", "genrun", "ls", "--store", str(store), "--json"],
                              capture_output=True, text=True, timeout=TIMEOUT_S, cwd=store)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = {row["id"]: row for row in json.loads(done.stdout)["snapshots"]}
        assert rows[good.name]["state"] == "succeeded"
        assert rows[hidden.name]["state"] == "unreadable" and "Permission denied" in rows[hidden.name]["problem"], rows[hidden.name]
    finally:
        hidden.chmod(0o755)
        shutil.rmtree(store)
