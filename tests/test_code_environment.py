"""Code identity (`code.json`) and environment capture (`environment.json`) on real files and real git."""

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import copy_of_genrun
from genrun.runner.code_identity import code_refs, code_set, genrun_code_set, identify_code
from genrun.runner.backends.diffusers.budget import DIFFUSERS_RUNTIME
from genrun.runner.environment import GENRUN_PACKAGES, capture_environment, git_state, is_credential_name, relevant_env_vars
from genrun.runner.runtime import Runtime
from genrun.runner.errors import RequestError
from genrun.runner.frozen_plan import describe_differences
from genrun.schemas import CodeIdentity, CodeSet, Environment
from genrun.schemas.digests import render_sha256sum, sha256_bytes, sha256_file

# --- genrun's own code ----------------------------------------------------------------------------


def test_genrun_code_set_covers_its_packages_and_is_stable() -> None:
    first, second = genrun_code_set(), genrun_code_set()
    assert first == second
    root = Path(first.root)
    paths = [f.path for f in first.files]
    assert paths == sorted(paths)
    assert "runner/code_identity.py" in paths and "schemas/identity.py" in paths
    assert {p for p in paths if p.startswith("schemas/json/")} == {
        f"schemas/json/{p.name}" for p in (root / "schemas" / "json").glob("*.json")
    }
    assert not any("__pycache__" in p for p in paths)
    assert all(f.sha256 == sha256_file(root / f.path) for f in first.files)
    assert first.digest == sha256_bytes(render_sha256sum((f.path, f.sha256) for f in first.files))


def test_code_set_memo_never_answers_for_content_rewritten_in_place(tmp_path: Path) -> None:
    """The per-process memo (one hash per file state) sees a same-size rewrite whose mtime was put back."""
    source = tmp_path / "mod.py"
    source.write_text("A = 1\n")
    first = code_set(tmp_path, [source])
    before = os.stat(source)
    source.write_text("A = 2\n")  # same size
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime restored
    while os.stat(source).st_ctime_ns == before.st_ctime_ns:  # the kernel's clock is coarse: wait for a new ctime
        time.sleep(0.01)
        os.chmod(source, 0o644)
    second = code_set(tmp_path, [source])
    assert second.files[0].sha256 == sha256_file(source) != first.files[0].sha256


_IDENTIFY_AND_EDIT = """
import json, sys
import genrun.runner.execute
from genrun.runner.code_identity import genrun_code_set
assert "genrun.runner.live_progress" in sys.modules and "genrun.runner.gc" not in sys.modules
first = genrun_code_set()
with open("runner/live_progress.py", "a") as f:
    f.write("# an edit to a module this process runs as imported\\n")
after_imported_edit = genrun_code_set()
with open("runner/gc.py", "a") as f:
    f.write("# an edit to a module not imported yet\\n")
after_other_edit = genrun_code_set()
print(json.dumps([first.model_dump(mode="json"), after_imported_edit == first, after_other_edit.model_dump(mode="json")]))
"""


def test_a_process_identifies_the_modules_it_imported_once_and_sees_an_edit_to_one_it_has_not(tmp_path: Path) -> None:
    """What the check guards is the code that runs: an imported module runs as imported, so an edit to its file changes
    nothing in that process (`code.json` stays true; a sweep's later items still run); a module not imported yet would be
    read as edited, so that edit changes the set, naming the file. A fresh process (the next `execute`) sees both."""
    source = copy_of_genrun(tmp_path / "genrun-copy")
    ran = subprocess.run([sys.executable, "-c", _IDENTIFY_AND_EDIT], cwd=source, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    first, unchanged, after = (CodeSet.model_validate(v) if isinstance(v, dict) else v for v in json.loads(ran.stdout))
    assert first.root == str(source)  # the copy's code was identified, not this checkout's
    assert unchanged is True
    gc, live_progress = (next(f.path for f in first.files if f.path.endswith(name)) for name in ("runner/gc.py", "runner/live_progress.py"))
    assert describe_differences(first.files, after.files) == f"changed: {gc}"
    fresh = subprocess.run([sys.executable, "-c", "from genrun.runner.code_identity import genrun_code_set; "
                            "print(genrun_code_set().model_dump_json())"], cwd=source, capture_output=True, text=True, timeout=300)
    assert fresh.returncode == 0, fresh.stderr
    assert describe_differences(first.files, CodeSet.model_validate_json(fresh.stdout).files) == f"changed: {gc}, {live_progress}"


# --- user entry points ----------------------------------------------------------------------------


def test_entrypoint_module_identity_is_stable_and_follows_edits(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    module = user / "my_entry.py"
    module.write_text("def run(model, tok, inputs, generation):\n    return 1\n")

    first = identify_code(["my_entry:run"], [user], None)
    assert first == identify_code(["my_entry:run"], [user], None)
    assert first.entrypoint is not None
    assert first.entrypoint.root == str(user)
    assert [(f.path, f.sha256) for f in first.entrypoint.files] == [("my_entry.py", sha256_file(module))]
    assert first.remote_code is None

    module.write_text("def run(model, tok, inputs, generation):\n    return 2\n")
    edited = identify_code(["my_entry:run"], [user], None)
    assert edited.entrypoint is not None and edited.entrypoint.digest != first.entrypoint.digest
    assert edited.genrun == first.genrun
    CodeIdentity.model_validate_json(edited.model_dump_json())  # what code.json will hold round-trips


def test_package_entrypoint_is_hashed_whole_and_never_imported(tmp_path: Path) -> None:
    pkg = tmp_path / "user" / "gen_pkg_never_imported"
    (pkg / "inner").mkdir(parents=True)
    marker = tmp_path / "imported.marker"
    # If planning imported the package, this would leave the marker file behind.
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "inner" / "loader.py").write_text("def load(path, dtype, device):\n    pass\n")
    (pkg / "helpers.py").write_text("X = 1\n")

    refs = code_refs(None, "gen_pkg_never_imported.inner.loader:load")
    identity = identify_code(refs, [tmp_path / "user"], None)
    assert identity.entrypoint is not None
    assert [f.path for f in identity.entrypoint.files] == [
        "gen_pkg_never_imported/__init__.py",
        "gen_pkg_never_imported/helpers.py",
        "gen_pkg_never_imported/inner/__init__.py",
        "gen_pkg_never_imported/inner/loader.py",
    ]
    assert not marker.exists()
    assert "gen_pkg_never_imported" not in sys.modules


def test_entrypoint_and_loader_from_two_places(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "entry_a.py").write_text("def run(*a): pass\n")
    (tmp_path / "b" / "loader_b.py").write_text("def load(*a): pass\n")
    identity = identify_code(code_refs("entry_a:run", "loader_b:load"), [tmp_path / "a", tmp_path / "b"], None)
    assert identity.entrypoint is not None
    assert identity.entrypoint.root == str(tmp_path)
    assert [f.path for f in identity.entrypoint.files] == ["a/entry_a.py", "b/loader_b.py"]


def test_unknown_entrypoint_module_names_the_field_value_and_fix(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as entry:
        identify_code(["no_such_module_xyz.sub:run"], [tmp_path], None)
    assert entry.value.exit_code == 2
    assert str(entry.value) == (
        f"[entrypoint] callable 'no_such_module_xyz.sub:run': module 'no_such_module_xyz.sub' cannot be found "
        f"(searched {tmp_path} and sys.path); put the module beside the request file, install it, "
        "or correct the module name"
    )
    (tmp_path / "real_pkg_for_test").mkdir()
    (tmp_path / "real_pkg_for_test" / "__init__.py").write_text("")
    with pytest.raises(RequestError, match=r"^\[model\] loader 'real_pkg_for_test.missing:load': module 'real_pkg_for_test.missing'"):
        identify_code(code_refs(None, "real_pkg_for_test.missing:load"), [tmp_path], None)


def test_remote_code_is_recorded_whenever_the_model_dir_has_python(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert identify_code([], [], model).remote_code is None

    (model / "modeling_custom.py").write_text("class Custom: pass\n")
    # identify_code takes no trust_remote_code: the files are hashed whatever the request says (part of the checkpoint)
    remote = identify_code([], [], model).remote_code
    assert remote is not None
    assert [(f.path, f.sha256) for f in remote.files] == [("modeling_custom.py", sha256_file(model / "modeling_custom.py"))]


# --- environment ----------------------------------------------------------------------------------


def test_capture_environment_records_packages_host_and_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # tmp_path is outside any repository
    env = capture_environment(DIFFUSERS_RUNTIME, cwd=tmp_path)  # the packages and CUDA as the diffusers backend sees them
    assert (env.git.commit, env.git.dirty, env.git.diff_sha256) == (None, None, None)
    assert Environment.model_validate_json(env.model_dump_json()) == env
    assert env.packages["torch"] == importlib.metadata.version("torch")
    assert env.packages["transformers"] == importlib.metadata.version("transformers")
    assert set(env.packages) >= {"torch", "transformers", "diffusers", "tokenizers", "safetensors", "numpy", "accelerate", "pydantic"}
    assert env.cpu.logical_cores is not None and env.cpu.logical_cores >= 1
    assert env.cpu.memory_total_bytes is not None and env.cpu.memory_total_bytes > 1 << 28
    assert env.python == sys.version
    assert env.env_vars["HF_HUB_OFFLINE"] == "1"
    assert "HF_TOKEN" not in env.env_vars and "hf_secret_value" not in env.model_dump_json()

    import torch  # compared with torch's own view, whatever machine the test runs on

    assert env.cuda is not None
    assert env.cuda.available == torch.cuda.is_available()
    assert env.cuda.version == torch.version.cuda
    assert len(env.cuda.devices) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_a_backend_without_a_runtime_records_only_genruns_packages_and_no_cuda(tmp_path: Path) -> None:
    """The neutral runtime (a loop, a plugin without `runtime`) names no library and claims no CUDA view: nothing of torch."""
    env = capture_environment(cwd=tmp_path)
    assert set(env.packages) == set(GENRUN_PACKAGES) and env.cuda is None
    with_engine = capture_environment(Runtime(packages=("onnxruntime", "numpy")), cwd=tmp_path)
    assert list(with_engine.packages)[:2] == ["onnxruntime", "numpy"]
    assert with_engine.packages["onnxruntime"] == importlib.metadata.version("onnxruntime")


def test_env_vars_keep_behaviour_and_drop_credentials() -> None:
    environ = {
        "CUDA_VISIBLE_DEVICES": "0", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "2",
        "GENRUN_STORE": "/s", "HF_TOKEN": "x", "HF_API_KEY": "x", "GENRUN_SECRET": "x", "TOKENIZERS_TOKEN": "x",
        "PATH": "/bin", "HOME": "/root",
    }
    assert relevant_env_vars(environ) == {
        "CUDA_VISIBLE_DEVICES": "0", "GENRUN_STORE": "/s", "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false",
    }
    assert is_credential_name("HUGGING_FACE_HUB_TOKEN") and not is_credential_name("TOKENIZERS_PARALLELISM")


def run_git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *identity, *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed here; the no-git path is tested below")
def test_git_state_of_a_real_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    run_git(repo, "init", "-q")
    (repo / "f.txt").write_text("one\n")
    run_git(repo, "add", "f.txt")
    run_git(repo, "commit", "-q", "-m", "first")
    head = run_git(repo, "rev-parse", "HEAD").strip()

    clean = git_state(repo)
    assert (clean.commit, clean.dirty) == (head, False)
    assert clean.diff_sha256 == sha256_bytes(b"")

    (repo / "f.txt").write_text("two\n")
    dirty = git_state(repo)
    assert (dirty.commit, dirty.dirty) == (head, True)
    assert dirty.diff_sha256 not in (None, clean.diff_sha256)


def test_git_state_is_none_outside_a_repository_or_without_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git must not find a repo above tmp
    state = git_state(outside)
    assert (state.commit, state.dirty, state.diff_sha256) == (None, None, None)

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no git executable can be found
    state = git_state(outside)
    assert (state.commit, state.dirty, state.diff_sha256) == (None, None, None)
