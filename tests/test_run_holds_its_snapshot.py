"""A run holds one `SnapshotDir` from its first execution file to the seal: what it writes lands in the directory it
opened, even when user code renames the snapshot's path away mid-run and puts a link or another directory there.

The loop (run by the real CLI, in-process) moves its own snapshot while generating; the run must seal the moved
directory, complete and verifiable, and leave the replacement exactly as the loop made it.
"""

import os
from pathlib import Path

import pytest

from _loop_helpers import read, run, verify, write_loop
from genrun.schemas import layout

SWAP_BODY = """\
import os
from pathlib import Path


def generate(model_dir, inputs, generation, rec, moved, decoy, replace_with, **kwargs):
    snapshot = Path(os.readlink(rec.outputs_dir)).parent  # /proc/self/fd/N -> <snapshot>/outputs
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6])
        os.rename(snapshot, moved)
        if replace_with == "link":
            os.symlink(decoy, snapshot)
        else:
            os.mkdir(snapshot)
        lm.emit(0, [7])
        lm.stop(0, "max_new_tokens", limit=3)
"""


@pytest.mark.parametrize("replace_with", ["link", "directory"])
def test_a_snapshot_path_replaced_mid_run_receives_nothing_and_the_moved_directory_is_sealed(tmp_path: Path, replace_with: str) -> None:
    store, elsewhere, decoy = tmp_path / "store", tmp_path / "elsewhere", tmp_path / "decoy"
    elsewhere.mkdir()
    decoy.mkdir()
    kwargs = f'{{moved = "{elsewhere / "moved"}", decoy = "{decoy}", replace_with = "{replace_with}"}}'
    request = write_loop(tmp_path, SWAP_BODY, kwargs=kwargs)
    (tmp_path / "myloop.py").rename(tmp_path / "swaploop.py")  # a name no other test's module had in this process
    request.write_text(request.read_text().replace("myloop:generate", "swaploop:generate"))
    done, snapshot = run(request, store)
    assert done.returncode == 0 and snapshot is not None, done.stderr
    moved = elsewhere / "moved"
    replacement = decoy if replace_with == "link" else snapshot
    assert sorted(os.listdir(replacement)) == [], "the run wrote through the replaced path"
    assert (moved / layout.MANIFEST).is_file(), sorted(os.listdir(moved))
    assert read(moved, layout.RESULT)["status"] == "succeeded"
    assert read(moved, "stage-ids.json")["ids"] == {"lm": [[5, 6, 7]]}
    code, findings = verify(moved)
    assert code == 0 and not [f for f in findings.values() if f["status"] == "FAIL"], findings
