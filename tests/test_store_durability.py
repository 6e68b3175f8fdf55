"""The snapshot store under failure: injected exceptions, full and read-only filesystems, sealing.

Full and read-only filesystems are real: a tiny tmpfs mounted for the test (tests run as root
here and in CI; where mounting is not permitted the test is skipped with that reason).
"""

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_cli, tiny_request, write_request
from genrun.runner._io import write_bytes_atomic
from genrun.runner.errors import StoreError
from genrun.runner.plan import plan_request
from genrun.runner.store import create_snapshot, seal_snapshot
from genrun.schemas import layout
from genrun.schemas.digests import parse_sha256sum
from genrun.snapshot_dir import SnapshotDir


@pytest.fixture
def mount_point(tmp_path: Path) -> Iterator[Path]:
    point = tmp_path / "mnt"
    point.mkdir()
    yield point
    subprocess.run(["umount", str(point)], capture_output=True)


def _mount_tmpfs(point: Path, options: str) -> None:
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN): {proc.stderr.strip()}")


def test_exception_during_freeze_leaves_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"

    def freeze(directory: SnapshotDir) -> None:
        directory.write_bytes("request.json", b"{}")
        raise RuntimeError("injected during freeze")

    with pytest.raises(RuntimeError, match="injected"):
        create_snapshot(store, "boom", freeze)
    assert list(store.iterdir()) == []  # no snapshot and no temporary directory left behind


def test_failed_atomic_write_keeps_old_file(mount_point: Path) -> None:
    _mount_tmpfs(mount_point, "size=64k")
    target = mount_point / "result.json"
    target.write_bytes(b'{"old": true}\n')
    with pytest.raises(OSError) as caught:
        write_bytes_atomic(target, b"x" * (1 << 20))  # 1 MiB into a 64 KiB filesystem: ENOSPC
    assert caught.value.errno == 28
    assert target.read_bytes() == b'{"old": true}\n'
    assert sorted(p.name for p in mount_point.iterdir()) == ["result.json"]  # the temporary file is gone


def test_full_filesystem_gives_clear_error_and_no_snapshot(mount_point: Path, tmp_path: Path, tiny_lm: Path) -> None:
    # 8 KiB of tmpfs: the snapshot directory and its first small file fit, code.json (~9 KiB) does not.
    _mount_tmpfs(mount_point, "size=8k")
    request = write_request(tmp_path, tiny_request(tiny_lm))
    proc = run_cli("plan", request, "--store", mount_point)
    assert proc.returncode == 1, proc.stderr
    assert "filesystem is full" in proc.stderr
    assert list(mount_point.iterdir()) == []


def test_read_only_filesystem_gives_clear_error(mount_point: Path, tmp_path: Path, tiny_lm: Path) -> None:
    _mount_tmpfs(mount_point, "ro,size=64k")
    request = write_request(tmp_path, tiny_request(tiny_lm))
    proc = run_cli("plan", request, "--store", mount_point / "snapshots")
    assert proc.returncode == 1, proc.stderr
    assert "read-only" in proc.stderr
    assert list(mount_point.iterdir()) == []


def test_plan_freezes_every_file_and_seal_is_checkable(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = plan_request(write_request(tmp_path, tiny_request(tiny_lm)), store=tmp_path / "store")
    frozen = parse_sha256sum((snapshot / layout.FROZEN_MANIFEST).read_bytes())
    assert set(frozen) == {"request.source.toml", *layout.FROZEN_FILES, layout.BACKEND}  # the backend's evidence declaration too
    assert (snapshot / "request.source.toml").read_bytes() == (tmp_path / "request.toml").read_bytes()
    seal_snapshot(snapshot)
    check = subprocess.run(["sha256sum", "-c", layout.MANIFEST], cwd=snapshot, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK") == len(frozen) + 1  # + frozen-sha256.txt itself
    for path in snapshot.iterdir():
        if path.is_file():
            # Mode bits, not a write attempt: tests run as root, which ignores them.
            assert stat.S_IMODE(path.stat().st_mode) & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) == 0, path


def test_store_errors_are_store_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store should be")
    with pytest.raises(StoreError, match="cannot write the snapshot store"):
        create_snapshot(blocker / "store", "x", lambda d: None)


def test_store_from_environment(tmp_path: Path, tiny_lm: Path) -> None:
    request = write_request(tmp_path, tiny_request(tiny_lm))
    proc = run_cli("plan", request, "--json", env={"GENRUN_STORE": str(tmp_path / "env-store")})
    assert proc.returncode == 0, proc.stderr
    snapshots = [p for p in (tmp_path / "env-store").iterdir()]
    assert len(snapshots) == 1 and snapshots[0].name.endswith(tuple("0123456789abcdef"))
    assert os.path.basename(snapshots[0]).split("-")[1] == "t"
