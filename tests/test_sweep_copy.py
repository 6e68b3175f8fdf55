"""A retry's copy of an item's frozen files (`copy_plan`): through `SnapshotDir`, never through a link, each checked
against the frozen manifest; the original is never changed."""

import os
from pathlib import Path

import pytest

from _loop_helpers import write_loop
from genrun.runner.errors import SnapshotError
from genrun.runner.plan import plan_request
from genrun.runner.sweep.store import copy_plan
from genrun.schemas import layout
from genrun.snapshot_dir import ArtifactUnreadable, SnapshotDir

LOOP = """\
def generate(model_dir, inputs, generation, rec, **kwargs):
    pass
"""


@pytest.fixture
def planned(tmp_path: Path) -> Path:
    return plan_request(write_loop(tmp_path, LOOP), store=tmp_path / "store")


def test_the_copy_has_the_same_frozen_files(planned: Path) -> None:
    copy = copy_plan(planned.parent, planned)
    assert copy != planned
    original, copied = SnapshotDir(planned), SnapshotDir(copy)
    assert copied.read_manifest(layout.FROZEN_MANIFEST).digest == original.read_manifest(layout.FROZEN_MANIFEST).digest


def test_a_frozen_file_replaced_by_a_link_is_never_followed(planned: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes((planned / layout.MODEL).read_bytes())  # the same bytes: only the link is wrong
    os.unlink(planned / layout.MODEL)
    os.symlink(outside, planned / layout.MODEL)
    with pytest.raises(ArtifactUnreadable, match="link"):
        copy_plan(planned.parent, planned)


def test_a_frozen_file_altered_since_the_plan_is_refused(planned: Path) -> None:
    target = planned / layout.MODEL
    os.chmod(target, 0o644)
    target.write_bytes(target.read_bytes().replace(b"{", b"{ ", 1))
    with pytest.raises(SnapshotError, match="no longer matches"):
        copy_plan(planned.parent, planned)
