"""`code_identity`'s listing of a code tree, remembered per process: a tree is listed again only when a folder changed."""

import time
from pathlib import Path

from genrun.runner.code_identity import _python_file_paths, code_set


def test_a_file_added_or_removed_is_listed_after_the_tree_was_remembered(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    first = _python_file_paths(str(tmp_path / "pkg"))
    assert first == [str(tmp_path / "pkg" / "a.py")]
    time.sleep(0.05)  # past the filesystem's timestamp granularity: the folder's new mtime differs from the one remembered
    (tmp_path / "pkg" / "sub" / "b.py").write_text("B = 2\n")
    assert _python_file_paths(str(tmp_path / "pkg")) == [str(tmp_path / "pkg" / "a.py"), str(tmp_path / "pkg" / "sub" / "b.py")]
    time.sleep(0.05)
    (tmp_path / "pkg" / "a.py").unlink()
    assert _python_file_paths(str(tmp_path / "pkg")) == [str(tmp_path / "pkg" / "sub" / "b.py")]


def test_a_file_changed_in_place_changes_the_code_set_of_a_remembered_tree(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "a.py"
    module.write_text("A = 1\n")
    before = code_set(tmp_path, _python_file_paths(str(tmp_path / "pkg")))
    time.sleep(0.05)
    module.write_text("A = 22\n")  # in place: the folder does not change, the listing is the remembered one
    after = code_set(tmp_path, _python_file_paths(str(tmp_path / "pkg")))
    assert before.digest != after.digest and [f.path for f in after.files] == ["pkg/a.py"]
