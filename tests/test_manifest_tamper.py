"""A byte flipped in `manifest-sha256.txt` is blamed on the manifest, never on the file its line names.

Each case flips one byte of the second line of a real sealed snapshot's manifest (in the digest, in
the two-space separator, in the file name, in the newline) and runs the real `genrun verify`: the
manifest_integrity FAIL names manifest-sha256.txt and does not say the file changed or was added.
"""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from _analysis_helpers import copy_snapshot, edit_bytes, run_genrun, snapshots  # noqa: F401
from genrun.schemas import layout


def _flip(offset: int, new: Callable[[int], int]) -> Callable[[bytes], bytes]:
    """Change the byte `offset` bytes into the manifest's second line."""
    def change(data: bytes) -> bytes:
        at = data.index(b"\n") + 1 + offset
        return data[:at] + bytes([new(data[at])]) + data[at + 1:]
    return change


def _other_hex(byte: int) -> int:
    return ord("0") if byte != ord("0") else ord("1")


# id -> (the change, what the manifest_integrity FAIL says)
CASES = {
    "digest-hex-to-hex": (_flip(5, _other_hex), "its sha256 for {name} differs from the file's in 1 of 64 hex digits"),
    "digest-hex-to-non-hex": (_flip(5, lambda _: ord("g")), "is not '<64 hex digits>  <path>'"),
    "digest-to-space": (_flip(5, lambda _: ord(" ")), "is not '<64 hex digits>  <path>'"),
    "separator-first-space": (_flip(64, lambda _: ord("x")), "is not '<64 hex digits>  <path>'"),
    "separator-second-space": (_flip(65, lambda _: ord("x")), "is not '<64 hex digits>  <path>'"),
    "name-letter": (_flip(67, lambda b: b ^ 1), "which is not in the snapshot, with the sha256 of {name}, which it does not list"),
    "name-to-nul": (_flip(67, lambda _: 0), "which cannot be a file of the snapshot"),
    "newline": (_flip(-1, lambda _: ord("x")), "run together (the newline between them was overwritten)"),
    "name-to-invalid-utf8": (_flip(67, lambda _: 0xFF), "not sha256sum format"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_flipped_manifest_byte_is_blamed_on_the_manifest(case: str, snapshots, tmp_path: Path) -> None:  # noqa: F811
    change, expected = CASES[case]
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    name = (snapshot / layout.MANIFEST).read_text().splitlines()[1].split("  ", 1)[1]  # the file the second line names
    edit_bytes(snapshot, layout.MANIFEST, change)
    verified = run_genrun("verify", snapshot, "--json")
    assert verified.returncode == 1, verified.stderr
    integrity = next(f for f in json.loads(verified.stdout)["findings"] if f["name"] == "manifest_integrity")
    assert integrity["status"] == "FAIL" and layout.MANIFEST in integrity["message"], integrity
    assert expected.format(name=name) in integrity["message"], integrity["message"]
    assert "changed since sealing" not in integrity["message"] and "added after sealing" not in integrity["message"], integrity


def test_a_changed_file_is_still_blamed_on_the_file(snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    edit_bytes(snapshot, layout.DETERMINISM, lambda data: data.replace(b"}", b' }', 1))
    verified = run_genrun("verify", snapshot, "--json")
    integrity = next(f for f in json.loads(verified.stdout)["findings"] if f["name"] == "manifest_integrity")
    assert integrity["status"] == "FAIL" and integrity["message"] == f"1 file(s) changed since sealing: {layout.DETERMINISM}", integrity


def _replace_first_newline(by: bytes) -> Callable[[bytes], bytes]:
    return lambda data: data.replace(b"\n", by, 1)


def _reorder(data: bytes) -> bytes:
    first, second, rest = data.split(b"\n", 2)
    return second + b"\n" + first + b"\n" + rest


# Rewrites of the manifest that `str.splitlines` read as the same entries: each changes the snapshot digest.
REWRITES = {
    "newline-to-vt": _replace_first_newline(b"\x0b"),
    "newline-to-ff": _replace_first_newline(b"\x0c"),
    "newline-to-fs": _replace_first_newline(b"\x1c"),
    "newline-to-cr": _replace_first_newline(b"\r"),
    "newline-to-u2028": _replace_first_newline("\u2028".encode()),
    "newline-to-nel": _replace_first_newline("\x85".encode()),
    "crlf-throughout": lambda data: data.replace(b"\n", b"\r\n"),
    "no-final-newline": lambda data: data[:-1],
    "lines-reordered": _reorder,
}


@pytest.mark.parametrize("case", sorted(REWRITES))
def test_a_manifest_rewritten_in_other_bytes_fails_verify(case: str, snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    edit_bytes(snapshot, layout.MANIFEST, REWRITES[case])
    verified = run_genrun("verify", snapshot, "--json")
    assert verified.returncode == 1, verified.stdout
    integrity = next(f for f in json.loads(verified.stdout)["findings"] if f["name"] == "manifest_integrity")
    assert integrity["status"] == "FAIL" and layout.MANIFEST in integrity["message"], integrity


def test_a_frozen_manifest_with_reordered_lines_fails_the_plan_chain(snapshots, tmp_path: Path) -> None:  # noqa: F811
    snapshot = copy_snapshot(snapshots.planned_only(), tmp_path / "store")
    edit_bytes(snapshot, layout.FROZEN_MANIFEST, _reorder)
    verified = run_genrun("verify", snapshot, "--json")
    chain = next(f for f in json.loads(verified.stdout)["findings"] if f["name"] == "plan_digest_chain")
    assert chain["status"] == "FAIL" and f"{layout.FROZEN_MANIFEST} was altered" in chain["message"], chain


def test_many_edited_manifest_lines_are_one_problem_naming_the_manifest_once(snapshots, tmp_path: Path) -> None:  # noqa: F811
    """Every listed digest edited in one hex digit: one problem counting the lines, not the manifest named once per line."""
    snapshot = copy_snapshot(snapshots.get("eos"), tmp_path / "store")
    lines = (snapshot / layout.MANIFEST).read_bytes().splitlines(keepends=True)
    edit_bytes(snapshot, layout.MANIFEST, lambda _: b"".join(bytes([_other_hex(line[5])]).join((line[:5], line[6:])) for line in lines))
    verified = run_genrun("verify", snapshot, "--json")
    integrity = next(f for f in json.loads(verified.stdout)["findings"] if f["name"] == "manifest_integrity")
    message = integrity["message"]
    assert integrity["status"] == "FAIL" and message.startswith(f"{layout.MANIFEST} was altered in {len(lines)} lines: its sha256 for "), message
    assert message.count("was altered") == 1 and message.count("differs from the file's in 1 of 64 hex digits") == 5, message
    assert f"; and {len(lines) - 5} more" in message and "changed since sealing" not in message, message
