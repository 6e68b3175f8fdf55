"""Model identity: resolving `[model] path` (local, HF cache, offline) and digesting every file, cheaply.

Real files throughout: a fake Hugging Face cache is built in tmp with the hub's real layout
(`models--org--name/refs/<rev>`, `snapshots/<commit>/<file>` as relative symlinks into
`blobs/<name>`), and the hash cache lives in a per-test GENRUN_CACHE_DIR.
"""

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PROCESS_TIMEOUT_S
from genrun.runner import _hash_cache
from genrun.runner.errors import RequestError
from genrun.runner.model_identity import hf_hub_cache_dir, identify_model, resolve_model_dir
from genrun.schemas import ModelSpec
from genrun.schemas.digests import render_sha256sum, sha256_bytes, sha256_file

COMMIT_MAIN = "a" * 40
COMMIT_V1 = "b" * 40
CONFIG = b'{"model_type": "llama"}\n'


@pytest.fixture(autouse=True)
def isolated_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own genrun hash cache and HF hub cache; ~/.cache is never touched."""
    monkeypatch.setenv("GENRUN_CACHE_DIR", str(tmp_path / "genrun-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(_hash_cache, "_warned", set())  # warnings are once per process; reset per test
    return tmp_path / "hub"


def git_blob_sha1(content: bytes) -> str:
    """The 40-hex name the hub gives a small non-LFS file (its git blob sha1)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def add_snapshot(hub: Path, hub_id: str, commit: str, files: dict[str, tuple[bytes, str]], refs: tuple[str, ...] = ()) -> Path:
    """Write `files` ({rel: (content, blob name)}) as blobs plus a snapshot of relative symlinks; point `refs` at it."""
    repo = hub / ("models--" + hub_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot = repo / "snapshots" / commit
    for rel, (content, blob_name) in files.items():
        (repo / "blobs" / blob_name).write_bytes(content)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        depth = len(Path(rel).parts) - 1
        link.symlink_to(Path(*([".."] * (2 + depth))) / "blobs" / blob_name)  # as huggingface_hub writes them
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def lfs(content: bytes) -> tuple[bytes, str]:
    """An LFS-like blob: named by the sha256 of its content."""
    return content, hashlib.sha256(content).hexdigest()


def small(content: bytes) -> tuple[bytes, str]:
    """A small non-LFS blob: named by its git sha1 (40 hex), which is not a sha256."""
    return content, git_blob_sha1(content)


def spec(path: str, revision: str | None = None) -> ModelSpec:
    return ModelSpec(path=path, revision=revision)


# --- Hugging Face cache -------------------------------------------------------------------------


def test_hf_blob_name_is_taken_without_reading_the_file(isolated_caches: Path, tmp_path: Path) -> None:
    # The trick: one blob's content does NOT match its 64-hex name. If identify_model read the
    # file it would report the content's sha256; it reports the name, so it never read it.
    real_weights = b"\x01" * 4096
    named_for = hashlib.sha256(b"other content the hub would have served").hexdigest()
    nested = b"tokenizer bytes"
    add_snapshot(
        isolated_caches, "org/name", COMMIT_MAIN,
        {
            "config.json": small(CONFIG),
            "model.safetensors": (real_weights, named_for),
            "sub/tokenizer.json": lfs(nested),
        },
        refs=("main",),
    )
    identity = identify_model(spec("org/name"), tmp_path)
    files = {f.path: f for f in identity.files}

    assert identity.source == "hf_cache"
    assert (identity.hub_id, identity.revision, identity.commit) == ("org/name", "main", COMMIT_MAIN)
    assert identity.resolved_path == str(isolated_caches / "models--org--name" / "snapshots" / COMMIT_MAIN)
    assert sorted(files) == ["config.json", "model.safetensors", "sub/tokenizer.json"]

    weights = files["model.safetensors"]
    assert weights.hash_source == "hf_blob_name"
    assert weights.sha256 == named_for != hashlib.sha256(real_weights).hexdigest()
    assert weights.size == len(real_weights)

    assert files["sub/tokenizer.json"].hash_source == "hf_blob_name"
    assert files["sub/tokenizer.json"].sha256 == hashlib.sha256(nested).hexdigest()

    # 40-hex blob names are git sha1s, not sha256: the small config is hashed for real.
    assert files["config.json"].hash_source == "computed"
    assert files["config.json"].sha256 == hashlib.sha256(CONFIG).hexdigest()

    assert identity.weight_bytes == len(real_weights)
    assert identity.digest == sha256_bytes(render_sha256sum((f.path, f.sha256) for f in identity.files))


def test_hf_revisions_branch_tag_and_commit(isolated_caches: Path, tmp_path: Path) -> None:
    add_snapshot(isolated_caches, "org/name", COMMIT_MAIN, {"config.json": small(CONFIG)}, refs=("main",))
    add_snapshot(isolated_caches, "org/name", COMMIT_V1, {"config.json": small(b"{}\n")}, refs=("v1", "refs/pr/3"))

    assert resolve_model_dir(spec("org/name"), tmp_path).commit == COMMIT_MAIN
    by_tag = resolve_model_dir(spec("org/name", "v1"), tmp_path)
    assert (by_tag.revision, by_tag.commit) == ("v1", COMMIT_V1)
    assert by_tag.path == isolated_caches / "models--org--name" / "snapshots" / COMMIT_V1
    assert resolve_model_dir(spec("org/name", "refs/pr/3"), tmp_path).commit == COMMIT_V1
    by_commit = resolve_model_dir(spec("org/name", COMMIT_V1), tmp_path)
    assert (by_commit.revision, by_commit.commit) == (COMMIT_V1, COMMIT_V1)

    with pytest.raises(RequestError) as missing_ref:
        resolve_model_dir(spec("org/name", "v2"), tmp_path)
    message = str(missing_ref.value)
    assert "[model] revision 'v2' of 'org/name' is not in the local Hugging Face cache" in message
    assert "cached revisions: main, refs/pr/3, v1" in message
    assert "`hf download org/name --revision v2`" in message

    with pytest.raises(RequestError, match=r"is commit c{40}, which is not in the local Hugging Face cache"):
        resolve_model_dir(spec("org/name", "c" * 40), tmp_path)
    with pytest.raises(RequestError, match="is not a branch, tag or commit"):
        resolve_model_dir(spec("org/name", "../../etc"), tmp_path)


def test_hub_id_absent_from_the_cache_is_refused_with_the_fetch_command(isolated_caches: Path, tmp_path: Path) -> None:
    with pytest.raises(RequestError) as info:
        identify_model(spec("foo/bar"), tmp_path)
    assert info.value.exit_code == 2
    assert str(info.value) == (
        f"[model] path 'foo/bar' is not a local directory (resolved to {tmp_path}/foo/bar; also looked in {Path.cwd()}/foo/bar) "
        f"nor in the local Hugging Face cache (looked in {isolated_caches}/models--foo--bar); genrun never downloads: "
        "if it is a hub id, fetch it first with `hf download foo/bar`, or give a local directory"
    )


def test_mistyped_relative_path_names_the_local_directory_and_suggests_no_download(isolated_caches: Path, tmp_path: Path) -> None:
    """`models/tiny-lm` beside a real `models/` folder is a typo of a local path, not a hub id to fetch."""
    (tmp_path / "models" / "tiny-llm").mkdir(parents=True)
    with pytest.raises(RequestError) as info:
        identify_model(spec("models/tiny-lm"), tmp_path)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert message.startswith(f"[model] path 'models/tiny-lm' does not exist (resolved to {tmp_path}/models/tiny-lm")
    assert f"{tmp_path}/models exists and holds: tiny-llm; check the spelling" in message
    assert "hf download" not in message and "Hugging Face cache" not in message


def test_hf_cache_location_follows_huggingface_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hf_hub_cache_dir() == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert hf_hub_cache_dir() == tmp_path / "hfhome" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "explicit"))
    assert hf_hub_cache_dir() == tmp_path / "explicit"


def test_broken_snapshot_symlink_is_an_incomplete_download(isolated_caches: Path, tmp_path: Path) -> None:
    snapshot = add_snapshot(isolated_caches, "org/name", COMMIT_MAIN, {"config.json": small(CONFIG)}, refs=("main",))
    (snapshot / "model.safetensors").symlink_to(Path("..", "..", "blobs", "0" * 64))  # blob never arrived
    with pytest.raises(RequestError, match=r"file 'model.safetensors' in .* is a broken symlink .*fetch the model again"):
        identify_model(spec("org/name"), tmp_path)


# --- local directories ----------------------------------------------------------------------------


def make_local_model(directory: Path, weights: bytes = b"\x07" * 10_000) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_bytes(CONFIG)
    (directory / "model.safetensors").write_bytes(weights)
    return directory


def test_second_identify_reads_no_weights_until_mtime_changes(tmp_path: Path) -> None:
    model = make_local_model(tmp_path / "m")
    weights = model / "model.safetensors"
    old_sha = sha256_file(weights)

    first = identify_model(spec(str(model)), tmp_path)
    assert {f.path: f.hash_source for f in first.files} == {"config.json": "computed", "model.safetensors": "computed"}

    # Proof that the second identify does not read the weights: rewrite them in place (same inode,
    # same size) with other bytes and restore mtime_ns. Reading would give the new sha256.
    st = weights.stat()
    with open(weights, "r+b") as f:
        f.write(b"\x08" * st.st_size)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert sha256_file(weights) != old_sha

    second = identify_model(spec(str(model)), tmp_path)
    cached = {f.path: f for f in second.files}["model.safetensors"]
    assert (cached.sha256, cached.hash_source) == (old_sha, "hash_cache")
    assert second.digest == first.digest

    # A new mtime is a new key: the file is hashed again and the real content shows.
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    third = {f.path: f for f in identify_model(spec(str(model)), tmp_path).files}["model.safetensors"]
    assert (third.sha256, third.hash_source) == (sha256_file(weights), "computed")


def test_corrupt_cache_entry_is_ignored_with_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = make_local_model(tmp_path / "m")
    identify_model(spec(str(model)), tmp_path)
    entries = sorted((tmp_path / "genrun-cache" / "hashes-v1").iterdir())
    assert len(entries) == 2
    for entry in entries:
        entry.write_bytes(b"\x00garbage, half a line")

    again = identify_model(spec(str(model)), tmp_path)
    assert {f.hash_source for f in again.files} == {"computed"}
    assert {f.path: f.sha256 for f in again.files} == {p.name: sha256_file(p) for p in model.iterdir()}
    assert capsys.readouterr().err.count("genrun: warning: ignoring corrupt hash cache entry") == 2
    assert {f.hash_source for f in identify_model(spec(str(model)), tmp_path).files} == {"hash_cache"}  # rewritten


def test_unwritable_cache_dir_warns_once_and_still_hashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # We run as root, so mode bits would not stop a write: the cache dir is placed *under a regular
    # file*, which no user can create a directory in (mkdir fails with NotADirectoryError).
    (tmp_path / "a-file").write_text("not a directory")
    monkeypatch.setenv("GENRUN_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    model = make_local_model(tmp_path / "m")
    identity = identify_model(spec(str(model)), tmp_path)
    assert {f.path: f.sha256 for f in identity.files} == {p.name: sha256_file(p) for p in model.iterdir()}
    err = capsys.readouterr().err
    assert err.count("genrun: warning: cannot write the hash cache") == 1  # two files, one warning
    assert "GENRUN_CACHE_DIR" in err


def test_many_files_hashed_in_parallel_are_each_correct(tmp_path: Path) -> None:
    model = tmp_path / "sharded"
    model.mkdir()
    for i, size in enumerate([3 << 20, 1, 0, 700_000, 2 << 20, 5]):
        (model / f"model-{i:05d}-of-00006.safetensors").write_bytes(os.urandom(size))
    (model / ".git").mkdir()  # dot-directories are not model content
    (model / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (model / "nested" / "deeper").mkdir(parents=True)
    (model / "nested" / "deeper" / "tokenizer.model").write_bytes(b"spm")
    (model / ".gitattributes").write_text("*.safetensors filter=lfs\n")  # a dot-*file* is content

    identity = identify_model(spec(str(model)), tmp_path)
    expected = {
        p.relative_to(model).as_posix(): sha256_file(p)
        for p in model.rglob("*")
        if p.is_file() and not p.relative_to(model).as_posix().startswith(".git/")
    }
    assert ".gitattributes" in expected and "nested/deeper/tokenizer.model" in expected
    assert {f.path: f.sha256 for f in identity.files} == expected
    assert [f.path for f in identity.files] == sorted(expected)
    assert identity.weight_bytes == sum((model / p).stat().st_size for p in expected if p.endswith(".safetensors"))


def test_symlink_loop_in_a_local_model_dir_terminates(tmp_path: Path) -> None:
    model = make_local_model(tmp_path / "m")
    (model / "sub").mkdir()
    (model / "sub" / "back").symlink_to("..")  # sub/back -> m: walking it naively never ends
    paths = [f.path for f in identify_model(spec(str(model)), tmp_path).files]
    assert paths == ["config.json", "model.safetensors"]


def test_relative_path_resolves_against_the_request_dir_then_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request_dir = tmp_path / "requests"
    cwd = tmp_path / "cwd"
    make_local_model(request_dir / "models" / "m")
    make_local_model(cwd / "models" / "m")
    make_local_model(cwd / "only-here")
    monkeypatch.chdir(cwd)

    both = resolve_model_dir(spec("models/m"), request_dir)
    assert (both.path, both.source, both.hub_id) == ((request_dir / "models" / "m").resolve(), "local", None)
    assert resolve_model_dir(spec("only-here"), request_dir).path == (cwd / "only-here").resolve()

    with pytest.raises(RequestError) as info:
        resolve_model_dir(spec("./x"), request_dir)
    assert str(info.value) == (
        f"[model] path './x' does not exist (resolved to {request_dir / 'x'}; also looked in {cwd / 'x'}); "
        "give the directory that holds config.json"
    )
    with pytest.raises(RequestError, match=r"\[model\] path '.*config.json' is a file, not a directory"):
        resolve_model_dir(spec(str(request_dir / "models" / "m" / "config.json")), request_dir)
    with pytest.raises(RequestError, match=r"\[model\] revision 'v1' applies only to hub ids"):
        resolve_model_dir(spec("models/m", "v1"), request_dir)


def test_local_directory_wins_over_a_cached_hub_id(isolated_caches: Path, tmp_path: Path) -> None:
    add_snapshot(isolated_caches, "org/name", COMMIT_MAIN, {"config.json": small(CONFIG)}, refs=("main",))
    make_local_model(tmp_path / "org" / "name")
    assert resolve_model_dir(spec("org/name"), tmp_path).source == "local"


def test_four_concurrent_processes_share_one_cache(tmp_path: Path) -> None:
    model = make_local_model(tmp_path / "m", weights=os.urandom(4 << 20))
    for i in range(8):
        (model / f"extra-{i}.bin").write_bytes(os.urandom(100_000 + i))
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from genrun.runner.model_identity import identify_model
        from genrun.schemas import ModelSpec
        print(identify_model(ModelSpec(path={str(model)!r}), Path({str(tmp_path)!r})).digest)
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=PROCESS_TIMEOUT_S) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in outputs]
    assert all(err == "" for _, err in outputs)  # no corrupt-entry warnings
    digests = {out.strip() for out, _ in outputs}
    assert len(digests) == 1
    again = identify_model(spec(str(model)), tmp_path)
    assert {f.hash_source for f in again.files} == {"hash_cache"}
    assert again.digest in digests
