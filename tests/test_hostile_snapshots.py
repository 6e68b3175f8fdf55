"""Hostile snapshots: `verify`, `report`, `ls` and `diff` finish, bounded in memory and CPU, with a finding naming the file.

Each case damages a copy of a real sealed snapshot, then runs the real CLI as its own process (forked
from the suite's warm server, `tests/_forked.py`) under `resource.setrlimit` (CPU seconds, and 2 GiB of
address space beyond what the imports hold: a read of `/dev/zero` or a file read whole dies there
instead of taking the machine), with the suite's process timeout as the hang bound.
"""

import json
import os
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from _forked import run_cli_forked
from conftest import PROCESS_TIMEOUT_S

from _analysis_helpers import copy_snapshot, make_writable, run_genrun, snapshots  # noqa: F401
from genrun.schemas import layout

LIMITS = {
    "address_space_headroom": 2 << 30,  # bytes beyond the imports (a fresh interpreter had 3 GiB, ~1 GiB of it imports)
    "cpu_seconds": 120,
}


def _bounded(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_cli_forked(*args, timeout=PROCESS_TIMEOUT_S, limits=LIMITS)


def _replace_with_fifo(snapshot: Path, rel: str) -> None:
    (snapshot / rel).unlink()
    os.mkfifo(snapshot / rel)


def _replace_with_link(target: str) -> Callable[[Path, str], None]:
    def change(snapshot: Path, rel: str) -> None:
        (snapshot / rel).unlink()
        os.symlink(target, snapshot / rel)
    return change


def _link_to_outside_copy(snapshot: Path, rel: str) -> None:
    outside = snapshot.parent / f"outside-{rel.replace('/', '_')}"
    outside.write_bytes((snapshot / rel).read_bytes())
    (snapshot / rel).unlink()
    os.symlink(outside, snapshot / rel)


def _sparse(size: int) -> Callable[[Path, str], None]:
    def change(snapshot: Path, rel: str) -> None:
        make_writable(snapshot / rel)
        os.truncate(snapshot / rel, size)
    return change


def _newlines(count: int) -> Callable[[Path, str], None]:
    def change(snapshot: Path, rel: str) -> None:
        make_writable(snapshot / rel)
        (snapshot / rel).write_bytes(b"\n" * count)
    return change


def _json_list(snapshot: Path, rel: str) -> None:
    make_writable(snapshot / rel)
    (snapshot / rel).write_text("[1, 2, 3]\n")


def _added_fifo(snapshot: Path, rel: str) -> None:
    os.mkfifo(snapshot / rel)


def _added_dangling_link(snapshot: Path, rel: str) -> None:
    os.symlink("/nonexistent/genrun-target", snapshot / rel)


CASES: dict[str, tuple[str, Callable[[Path, str], None]]] = {
    "fifo-result": (layout.RESULT, _replace_with_fifo),
    "dev-zero-result": (layout.RESULT, _replace_with_link("/dev/zero")),
    "fifo-progress": (layout.PROGRESS, _replace_with_fifo),
    "dev-zero-token-ids": (layout.TOKEN_IDS, _replace_with_link("/dev/zero")),
    "link-to-identical-copy": (layout.STOP, _link_to_outside_copy),
    "sparse-1gib-progress": (layout.PROGRESS, _sparse(1 << 30)),
    "sparse-1gib-token-ids": (layout.TOKEN_IDS, _sparse(1 << 30)),
    "progress-of-newlines": (layout.PROGRESS, _newlines(2_000_000)),
    "result-is-a-list": (layout.RESULT, _json_list),
    "added-fifo": ("extra.fifo", _added_fifo),
    "added-dangling-link": ("outputs/dangling", _added_dangling_link),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_file_is_a_finding_never_a_hang_or_a_crash(case: str, snapshots, tmp_path: Path) -> None:  # noqa: F811
    rel, damage = CASES[case]
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    damage(snapshot, rel)

    verified = _bounded("verify", snapshot, "--json")
    assert verified.returncode == 1 and "Traceback" not in verified.stderr, verified.stderr[-2000:]
    failed = [f for f in json.loads(verified.stdout)["findings"] if f["status"] == "FAIL"]
    assert any(rel in f["message"] or rel in json.dumps(f.get("evidence")) for f in failed), failed

    reported = _bounded("report", snapshot, "--json")
    assert reported.returncode in (0, 1) and "Traceback" not in reported.stderr, reported.stderr[-2000:]
    json.loads(reported.stdout)

    listed = _bounded("ls", "--store", snapshot.parent, "--json")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr[-2000:]
    (row,) = json.loads(listed.stdout)["snapshots"]
    assert row["id"] == snapshot.name


def test_diff_with_a_hostile_snapshot_finishes(snapshots, tmp_path: Path) -> None:  # noqa: F811
    pristine = snapshots.get("eos")
    snapshot = copy_snapshot(pristine, tmp_path / "store")
    _replace_with_fifo(snapshot, layout.RESULT)
    _replace_with_link("/dev/zero")(snapshot, layout.TOKEN_IDS)
    diffed = _bounded("diff", pristine, snapshot, "--json")
    assert diffed.returncode in (0, 1) and "Traceback" not in diffed.stderr, diffed.stderr[-2000:]
    assert layout.RESULT in diffed.stdout


def _safetensors(header: bytes | dict, data: bytes = b"") -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _int64_row(name: str, ids: list[int]) -> bytes:
    data = struct.pack(f"<{len(ids)}q", *ids)
    return _safetensors({name: {"dtype": "I64", "shape": [len(ids)], "data_offsets": [0, len(data)]}}, data)


TOKEN_ID_CASES = {
    "id-2**63-1": _int64_row("sequence_0", [5, 2**63 - 1]),
    "negative-id": _int64_row("sequence_0", [5, -3]),
    "huge-row-index": _int64_row("sequence_99999999999999999999", [5]),
    "header-nested-100k-deep": _safetensors(b"[" * 100_000 + b"]" * 100_000),
}


@pytest.mark.parametrize("case", sorted(TOKEN_ID_CASES))
def test_damaged_token_ids_are_findings(case: str, snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    make_writable(snapshot / layout.TOKEN_IDS)
    (snapshot / layout.TOKEN_IDS).write_bytes(TOKEN_ID_CASES[case])
    verified = run_genrun("verify", snapshot, "--json")
    assert verified.returncode == 1, verified.stderr
    failed = {f["name"]: f["message"] for f in json.loads(verified.stdout)["findings"] if f["status"] == "FAIL"}
    assert any(layout.TOKEN_IDS in message for message in failed.values()), failed
    reported = run_genrun("report", snapshot, "--json")
    assert reported.returncode in (0, 1), reported.stderr
    json.loads(reported.stdout)


def test_unreadable_result_is_named_never_a_run_without_result(snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    _replace_with_fifo(snapshot, layout.RESULT)
    verified = run_genrun("verify", snapshot, "--json")
    completeness = next(f for f in json.loads(verified.stdout)["findings"] if f["name"] == "completeness")
    assert completeness["status"] == "FAIL" and completeness["message"].startswith(f"{layout.RESULT} is present but is a FIFO"), completeness


@pytest.fixture(scope="module")
def private_model_run(tmp_path_factory: pytest.TempPathFactory, tiny_lm: Path) -> tuple[Path, Path]:
    """A sealed snapshot of a private copy of the tiny model (its tokenizer can be damaged without touching the original)."""
    import shutil

    from conftest import run_cli, tiny_request

    work = tmp_path_factory.mktemp("private-model")
    model = work / "model"
    shutil.copytree(tiny_lm, model)
    (work / "request.toml").write_text(tiny_request(model, generation="max_new_tokens = 4"))
    done = run_cli("run", work / "request.toml", "--store", work / "store", "--quiet", "--json")
    assert done.returncode == 0, done.stderr
    return Path(json.loads(done.stdout)["snapshot"]), model


@pytest.mark.parametrize("damage", ["fifo", "link-to-dev-zero"])
def test_hostile_tokenizer_of_the_model_is_a_fail_naming_it(damage: str, private_model_run: tuple[Path, Path]) -> None:
    """The tokenizer model.json names lies outside the snapshot: a FIFO there must not hang verify/report, nor
    `/dev/zero` exhaust memory; verify FAILs naming it (a skip would pass the snapshot), report names it in a note."""
    snapshot, model = private_model_run
    tokenizer = model / "tokenizer.json"
    original = tokenizer.read_bytes()
    tokenizer.unlink()
    if damage == "fifo":
        os.mkfifo(tokenizer)
    else:
        os.symlink("/dev/zero", tokenizer)
    try:
        verified = _bounded("verify", snapshot, "--json")
        assert verified.returncode == 1 and "Traceback" not in verified.stderr, verified.stderr[-2000:]
        failed = [f for f in json.loads(verified.stdout)["findings"] if f["status"] == "FAIL"]
        kind = "a FIFO" if damage == "fifo" else "a character device"
        assert [(f["name"], f"{tokenizer} is {kind}, not a regular file" in f["message"]) for f in failed] == [("saved_text", True)], failed
        reported = _bounded("report", snapshot, "--json")
        assert reported.returncode in (0, 1) and "Traceback" not in reported.stderr, reported.stderr[-2000:]
        assert any(f"{tokenizer} is {kind}" in note for note in json.loads(reported.stdout)["notes"]), reported.stdout[-2000:]
    finally:
        tokenizer.unlink()
        tokenizer.write_bytes(original)
