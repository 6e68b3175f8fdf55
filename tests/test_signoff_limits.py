"""Sign-off signatures at their limits: a key outside its allowed-signers time window, a `.sig` no signature could be.

Real keys made by ssh-keygen, real records made by `make_signoff`, judged by the real `evaluate_signoffs` (which runs
ssh-keygen) and, for the oversized signature, by `genrun ls` and `report --html` as the user runs them.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _snapshot_factory import make_sealed_snapshot
from conftest import run_cli

from genrun.analysis.signoffs import evaluate_signoffs
from genrun.analysis.ssh_signatures import MAX_SIGNATURE_BYTES
from genrun.runner.signoff import make_signoff

SSH_KEYGEN = shutil.which("ssh-keygen")
ALICE = "alice@example.com"
pytestmark = pytest.mark.skipif(SSH_KEYGEN is None, reason="ssh-keygen is needed (apt-get install openssh-client)")


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(private key, `ssh-ed25519 AAAA…` public half)."""
    root = tmp_path_factory.mktemp("key")
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(root / "alice")], check=True)
    kind, blob, *_ = (root / "alice.pub").read_text().split()
    return root / "alice", f"{kind} {blob}"


@pytest.fixture(autouse=True)
def no_git_signers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gitconfig").write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.mark.parametrize("window, words", [('valid-before="20200101"', "has expired"),
                                           ('valid-after="20990101"', "is not yet valid")])
def test_a_key_outside_its_time_window_is_named_so(window: str, words: str, key: tuple[Path, str], tmp_path: Path) -> None:
    private, public = key
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"{ALICE} {window} {public}\n")
    snapshot = make_sealed_snapshot(tmp_path / "store")
    make_signoff(snapshot, "accept", ALICE, private, None, [])
    (status,) = evaluate_signoffs(snapshot, allowed)
    assert status.state == "invalid"
    assert status.reason.startswith(f"signer {ALICE}'s key {words} in allowed signers {allowed} (verify time "), status.reason


def test_a_signature_file_larger_than_any_signature_is_never_handed_to_ssh_keygen(key: tuple[Path, str], tmp_path: Path) -> None:
    """A sparse 20 GB `.sig` (no disk used): ssh-keygen would read it for minutes; it is refused by its size at once."""
    private, public = key
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"{ALICE} {public}\n")
    snapshot = make_sealed_snapshot(tmp_path / "store")
    record = make_signoff(snapshot, "accept", ALICE, private, None, [])
    sig = record.with_name(record.name + ".sig")
    os.chmod(sig, 0o644)
    os.truncate(sig, 20 << 30)

    (status,) = evaluate_signoffs(snapshot, allowed)
    assert (status.state, status.reason) == ("invalid", f"bad signature: {sig.name} is {20 << 30:,} bytes, more than the "
                                                       f"{MAX_SIGNATURE_BYTES:,} any SSH signature takes")
    for args in (("ls", "--store", snapshot.parent), ("report", snapshot, "--html", tmp_path / "page.html")):
        done = run_cli(*args, env={"GENRUN_ALLOWED_SIGNERS": str(allowed)})
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr[-2000:]
