"""Owner sign-offs: records bound to digests, SSH signatures as git makes them, the approval gate.

Every key is a real ed25519 key made by `ssh-keygen` in a temporary directory; every signature
is made and checked by the real `ssh-keygen -Y`. git's configuration is isolated per test
(GIT_CONFIG_GLOBAL points at a file in tmp_path, GIT_CONFIG_NOSYSTEM=1), so the machine's own
user.email or signing key never leaks in. Snapshots come from the real store functions
(tests/_snapshot_factory.py). Tampering is done the way an attacker would: edit a file (root
ignores the 0o444 bits), replace a file, or re-run the real sealing code.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import orjson
import pytest
from _snapshot_factory import make_planned_snapshot, make_sealed_snapshot
from conftest import PROCESS_TIMEOUT_S, CliRun, run_cli

from genrun.analysis.signoffs import UNVERIFIED, SignoffStatus, default_allowed_signers, evaluate_signoffs, summarize_signoffs
from genrun.analysis.ssh_signatures import NO_ALLOWED_SIGNERS, SSH_KEYGEN_MISSING, read_sshsig
from genrun.runner import __version__
from genrun.runner.errors import ApprovalRequired, SignoffError
from genrun.runner.signoff import _place_exclusive, check_approval, describe_approval, make_signoff
from genrun.runner.store import seal_snapshot, write_frozen_manifest
from genrun.schemas import Signoff, layout
from genrun.schemas.digests import plan_digest, snapshot_digest
from genrun.snapshot_dir import SnapshotDir

SSH_KEYGEN = shutil.which("ssh-keygen")
REPO = Path(__file__).resolve().parent.parent
ALICE = "alice@example.com"
BOB = "bob@example.com"


class Keys(NamedTuple):
    alice: Path
    bob: Path
    allowed: Path
    """Lists alice only."""
    allowed_both: Path
    """Lists alice, and bob restricted to namespaces="accept@genrun"."""


def _public(key: Path) -> str:
    kind, blob, *_ = key.with_suffix(".pub").read_text().split()
    return f"{kind} {blob}"


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    assert SSH_KEYGEN, "ssh-keygen is needed for these tests (apt-get install openssh-client)"
    root = tmp_path_factory.mktemp("keys")
    for name in ("alice", "bob"):
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(root / name)], check=True)
    allowed = root / "allowed_signers"
    allowed.write_text(f"{ALICE} {_public(root / 'alice')}\n")
    both = root / "allowed_signers_both"
    both.write_text(f'{ALICE} {_public(root / "alice")}\n{BOB} namespaces="accept@genrun" {_public(root / "bob")}\n')
    return Keys(alice=root / "alice", bob=root / "bob", allowed=allowed, allowed_both=both)


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty global git config of our own; tests that need git settings write into it."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.chdir(tmp_path)  # no repository-local config applies
    # Subprocesses run from tmp_path: let them import genrun from this checkout even when it is not installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return config


def git_set(key: str, value: str) -> None:
    subprocess.run(["git", "config", "--global", key, value], check=True)


def genrun(*args: str, env: dict[str, str] | None = None) -> CliRun:
    """The real CLI, in-process (`env` overrides os.environ for the call)."""
    return run_cli(*args, env=env)


def genrun_without_a_terminal(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess in a new session: no controlling terminal, so ssh-keygen cannot prompt."""
    return subprocess.run([sys.executable, "-m", "genrun.runner.cli", *args], capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, start_new_session=True)


def only(statuses: list[SignoffStatus]) -> SignoffStatus:
    assert len(statuses) == 1, statuses
    return statuses[0]


def record_of(path: Path) -> Signoff:
    return Signoff.model_validate_json(path.read_bytes())


def sig_of(path: Path) -> Path:
    return path.with_name(path.name + ".sig")


def tamper(path: Path, data: bytes) -> None:
    """Overwrite a (read-only) file in place: root ignores 0o444, so make it writable like an owner could."""
    os.chmod(path, 0o644)
    path.write_bytes(data)


# --- basics -------------------------------------------------------------------------------------


def test_signed_approve_verifies(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    path = make_signoff(snapshot, "approve", ALICE, keys.alice, "looks right", ["no CUDA numbers"])

    record = record_of(path)
    assert path.parent == snapshot / layout.SIGNOFFS_DIR
    assert path.name.split("-")[1] == "approve" and path.name.endswith(".json")
    assert (record.decision, record.digest_kind, record.digest) == ("approve", "plan", plan_digest(snapshot))
    assert (record.by, record.note, record.accepted_gaps, record.signed) == (ALICE, "looks right", ("no CUDA numbers",), True)
    assert record.snapshot_id == snapshot.name and record.at.endswith("Z")
    assert sig_of(path).is_file()
    assert path.stat().st_mode & 0o777 == 0o444 and sig_of(path).stat().st_mode & 0o777 == 0o444
    assert not list((snapshot / layout.SIGNOFFS_DIR).glob(".*")), "staging files must be cleaned up"

    status = only(evaluate_signoffs(snapshot, keys.allowed))
    assert status.state == "valid", status
    assert status.reason.startswith(f"signed by {ALICE} (ED25519 key SHA256:")
    assert (status.file, status.decision, status.by, status.digest) == (path.name, "approve", ALICE, record.digest)
    assert check_approval(snapshot, keys.allowed) == status
    assert describe_approval(status).startswith(f"plan approved: signed by {ALICE}")

    # The signature is exactly what git's scheme produces: ssh-keygen itself accepts it.
    with open(path, "rb") as data:
        verify = subprocess.run(
            [SSH_KEYGEN, "-Y", "verify", "-f", str(keys.allowed), "-I", ALICE, "-n", "approve@genrun", "-s", str(sig_of(path))],
            stdin=data, capture_output=True, text=True,
        )
    assert verify.returncode == 0, verify.stderr
    assert read_sshsig(sig_of(path).read_bytes()) == ("ssh-ed25519", "approve@genrun")


def test_cli_signs_accept_and_prints_json(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    done = genrun("signoff", str(snapshot), "--decision", "accept", "--by", ALICE, "--key", str(keys.alice),
                  "--accept-gap", "a", "--accept-gap", "b", "--json")
    assert done.returncode == 0, done.stderr
    document = orjson.loads(done.stdout)  # stdout holds the JSON document and nothing else
    path = Path(document["path"])
    assert document["signature"] == str(sig_of(path)) and sig_of(path).is_file()
    assert document["record"] == record_of(path).model_dump(mode="json")
    assert document["record"]["digest"] == snapshot_digest(snapshot)
    assert document["record"]["accepted_gaps"] == ["a", "b"]
    assert only(evaluate_signoffs(snapshot, keys.allowed)).state == "valid"


def test_cli_human_output_names_the_record(tmp_path: Path) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    done = genrun("signoff", str(snapshot), "--decision", "reject", "--by", ALICE, "--note", "wrong length")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    [path] = (snapshot / layout.SIGNOFFS_DIR).glob("*-reject-*.json")
    assert "unsigned reject by alice@example.com, snapshot digest" in done.stderr
    assert str(path) in done.stderr.replace("\n", "")


def test_signoffs_never_change_the_snapshot_digest_or_earlier_records(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    digest, manifest = snapshot_digest(snapshot), (snapshot / layout.MANIFEST).read_bytes()
    first = make_signoff(snapshot, "accept", ALICE, keys.alice, None, [])
    first_bytes, first_sig = first.read_bytes(), sig_of(first).read_bytes()
    second = make_signoff(snapshot, "accept", ALICE, keys.alice, "again", [])

    assert second != first
    assert (first.read_bytes(), sig_of(first).read_bytes()) == (first_bytes, first_sig)
    assert snapshot_digest(snapshot) == digest and (snapshot / layout.MANIFEST).read_bytes() == manifest
    assert [s.state for s in evaluate_signoffs(snapshot, keys.allowed)] == ["valid", "valid"]


def test_exclusive_placement_refuses_an_existing_name(tmp_path: Path) -> None:
    existing, staged = tmp_path / "existing.json", tmp_path / "staged.json"
    existing.write_bytes(b"first")
    staged.write_bytes(b"second")
    assert _place_exclusive(staged, existing) is False
    assert existing.read_bytes() == b"first"
    assert _place_exclusive(staged, tmp_path / "new.json") is True
    assert (tmp_path / "new.json").read_bytes() == b"second"


# --- invalidation -------------------------------------------------------------------------------


def _reseal_after_edit(snapshot: Path) -> None:
    """Change one byte of a sealed file and re-run the real sealing code, as someone covering tracks would."""
    result = snapshot / layout.RESULT
    data = bytearray(result.read_bytes())
    data[-2] ^= 0x01
    tamper(result, bytes(data))
    seal_snapshot(snapshot)


def _edit_manifest(snapshot: Path) -> None:
    manifest = snapshot / layout.MANIFEST
    tamper(manifest, manifest.read_bytes() + b"0" * 64 + b"  extra.txt\n")


@pytest.mark.parametrize("change", [_reseal_after_edit, _edit_manifest], ids=["byte-changed-and-resealed", "manifest-edited"])
def test_changed_sealed_snapshot_invalidates_earlier_accept(tmp_path: Path, keys: Keys, change) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    make_signoff(snapshot, "accept", ALICE, keys.alice, None, [])
    before = snapshot_digest(snapshot)
    assert only(evaluate_signoffs(snapshot, keys.allowed)).state == "valid"

    change(snapshot)

    status = only(evaluate_signoffs(snapshot, keys.allowed))
    after = snapshot_digest(snapshot)
    assert after != before
    assert status.state == "invalid"
    # Only the binding is wrong: the record and its signature are intact.
    assert status.reason == f"digest no longer matches: record binds snapshot digest {before[:12]}…, current is {after[:12]}…"
    assert summarize_signoffs([status]) == "accept invalid: digest no longer matches"


def test_plan_modified_after_approval_is_refused(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    make_signoff(snapshot, "approve", ALICE, keys.alice, None, [])
    approved = plan_digest(snapshot)
    assert check_approval(snapshot, keys.allowed).state == "valid"

    # Change the request and regenerate frozen-sha256.txt with the real store code.
    (snapshot / layout.REQUEST).write_bytes(b'{"name": "factory", "max_new_tokens": 65536}')
    write_frozen_manifest(SnapshotDir(snapshot, writable=True))

    with pytest.raises(ApprovalRequired) as refused:
        check_approval(snapshot, keys.allowed)
    message = str(refused.value)
    assert f"current plan digest {plan_digest(snapshot)[:12]}…" in message
    assert f"digest no longer matches: record binds plan digest {approved[:12]}…" in message
    assert f"genrun signoff {snapshot} --decision approve" in message
    assert refused.value.exit_code == 1


def test_appended_frozen_manifest_is_refused(tmp_path: Path) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    make_signoff(snapshot, "approve", ALICE, None, None, [])
    assert check_approval(snapshot, allow_unsigned=True).state == "unsigned"
    frozen = snapshot / layout.FROZEN_MANIFEST
    frozen.write_bytes(frozen.read_bytes() + b"0" * 64 + b"  model.json\n")
    with pytest.raises(ApprovalRequired, match="digest no longer matches"):
        check_approval(snapshot, allow_unsigned=True)


def test_no_approve_record_is_refused(tmp_path: Path) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    make_signoff(snapshot, "accept", ALICE, None, None, [])  # an accept is not an approval
    with pytest.raises(ApprovalRequired, match=r"there is no approve record in .*signoffs"):
        check_approval(snapshot)


def test_signer_missing_from_allowed_signers_is_reported(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    make_signoff(snapshot, "approve", BOB, keys.bob, None, [])
    status = only(evaluate_signoffs(snapshot, keys.allowed))
    assert status.state == "invalid"
    assert status.reason == f"signer {BOB} not in allowed signers {keys.allowed}"
    with pytest.raises(ApprovalRequired, match=f"signer {BOB} not in allowed signers"):
        check_approval(snapshot, keys.allowed)


def test_signing_with_a_key_the_allowed_signers_file_does_not_list_is_refused_with_the_line_to_add(tmp_path: Path, keys: Keys) -> None:
    """It used to succeed silently, and `verify` then failed until the record was revoked (issue 41, item 9)."""
    snapshot = make_sealed_snapshot(tmp_path / "store")
    allowed = tmp_path / "allowed_signers"
    allowed.write_bytes(keys.allowed.read_bytes())  # lists alice only
    refused = genrun("signoff", str(snapshot), "--decision", "accept", "--by", BOB, "--key", str(keys.bob), "--allowed-signers", str(allowed))
    assert refused.returncode == 2
    message = " ".join(refused.stderr.split())
    assert f"{allowed} does not list the signing key for accept@genrun ({_public(keys.bob)})" in message
    assert not (snapshot / layout.SIGNOFFS_DIR).exists() or not list((snapshot / layout.SIGNOFFS_DIR).iterdir())
    fix = message.partition("List the key, then sign again: ")[2]
    assert fix == f"echo '{BOB} {_public(keys.bob)}' >> {allowed}"
    subprocess.run(["bash", "-c", fix], check=True)  # the line, as printed, is the fix
    signed = genrun("signoff", str(snapshot), "--decision", "accept", "--by", BOB, "--key", str(keys.bob), "--allowed-signers", str(allowed))
    assert signed.returncode == 0, signed.stderr
    assert only(evaluate_signoffs(snapshot, allowed)).state == "valid"


def test_a_key_listed_for_other_decisions_only_is_refused_too(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")  # bob may sign accept@genrun only
    with pytest.raises(SignoffError, match="does not list the signing key for approve@genrun"):
        make_signoff(snapshot, "approve", BOB, keys.bob, None, [], allowed_signers=keys.allowed_both)
    assert not (snapshot / layout.SIGNOFFS_DIR).exists() or not list((snapshot / layout.SIGNOFFS_DIR).iterdir())


def test_record_claiming_another_signer_is_reported(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    make_signoff(snapshot, "accept", ALICE, keys.bob, None, [])  # says alice, signed with bob's key
    status = only(evaluate_signoffs(snapshot, keys.allowed_both))
    assert status.state == "invalid"
    assert status.reason == f"signer {ALICE} not in allowed signers {keys.allowed_both} (the signing key is listed for {BOB})"


def test_signer_restricted_to_other_namespaces_is_reported(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    make_signoff(snapshot, "approve", BOB, keys.bob, None, [])  # bob may only sign accept@genrun
    status = only(evaluate_signoffs(snapshot, keys.allowed_both))
    assert status.state == "invalid"
    assert status.reason.startswith(f"signer {BOB} not allowed for approve@genrun in allowed signers {keys.allowed_both} (")


def test_accept_signature_does_not_pass_as_approve(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    record = make_signoff(snapshot, "approve", ALICE, keys.alice, None, [])
    assert check_approval(snapshot, keys.allowed).state == "valid"

    # The same bytes signed by the same allowed key, but for the accept@genrun namespace,
    # put in place of the approve signature.
    scratch = tmp_path / "scratch.json"
    scratch.write_bytes(record.read_bytes())
    subprocess.run([SSH_KEYGEN, "-Y", "sign", "-f", str(keys.alice), "-n", "accept@genrun", str(scratch)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    with open(record, "rb") as data:  # a genuine, valid signature in its own namespace
        assert subprocess.run([SSH_KEYGEN, "-Y", "verify", "-f", str(keys.allowed), "-I", ALICE, "-n", "accept@genrun",
                               "-s", str(sig_of(scratch))], stdin=data, capture_output=True).returncode == 0
    os.replace(sig_of(scratch), sig_of(record))

    status = only(evaluate_signoffs(snapshot, keys.allowed))
    assert status.state == "invalid"
    assert status.reason == "signature namespace is not approve@genrun (the signature was made for accept@genrun)"
    with pytest.raises(ApprovalRequired, match="signature namespace is not approve@genrun"):
        check_approval(snapshot, keys.allowed)


def test_edited_signed_record_has_a_bad_signature(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    path = make_signoff(snapshot, "accept", ALICE, keys.alice, "fine", [])
    tamper(path, path.read_bytes().replace(b'"fine"', b'"good"'))
    status = only(evaluate_signoffs(snapshot, keys.allowed))
    assert status.state == "invalid"
    assert status.reason.startswith("bad signature: the record does not match its signature")
    assert summarize_signoffs([status]) == "accept invalid: bad signature"


def test_garbage_signature_file_is_a_bad_signature(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    path = make_signoff(snapshot, "accept", ALICE, keys.alice, None, [])
    tamper(sig_of(path), b"not a signature\n")
    status = only(evaluate_signoffs(snapshot, keys.allowed))
    assert status.state == "invalid"
    assert status.reason.startswith(f"bad signature: {path.name}.sig is not an SSH signature")


def test_signed_record_without_its_signature_is_invalid(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    path = make_signoff(snapshot, "accept", ALICE, keys.alice, None, [])
    sig_of(path).unlink()
    status = only(evaluate_signoffs(snapshot, keys.allowed))
    assert (status.state, status.reason) == ("invalid", f"record says signed but {path.name}.sig is missing")


def test_unsigned_record_is_shown_as_unsigned(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    make_signoff(snapshot, "approve", ALICE, None, None, [])
    status = only(evaluate_signoffs(snapshot, keys.allowed))
    assert (status.state, status.reason, status.by) == ("unsigned", "no signature", ALICE)
    assert summarize_signoffs([status]) == f"approve unsigned ({ALICE})"
    # The gate refuses an unsigned approval unless the policy says "any"; then it says so.
    with pytest.raises(ApprovalRequired, match='unsigned ones count only with \\[policy\\] require_approval = "any"'):
        check_approval(snapshot, keys.allowed)
    assert check_approval(snapshot, keys.allowed, allow_unsigned=True) == status
    assert "UNSIGNED" in describe_approval(status)


def test_unsigned_record_with_changed_digest_is_invalid(tmp_path: Path) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    make_signoff(snapshot, "accept", ALICE, None, None, [])
    _reseal_after_edit(snapshot)
    status = only(evaluate_signoffs(snapshot, None))
    assert status.state == "invalid" and status.reason.startswith("digest no longer matches")


def test_summary_of_several_records(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    make_signoff(snapshot, "approve", ALICE, keys.alice, None, [])
    (snapshot / layout.RESULT).write_bytes(b'{"status": "succeeded"}')
    seal_snapshot(snapshot)
    make_signoff(snapshot, "accept", ALICE, keys.alice, None, [])
    _edit_manifest(snapshot)
    assert summarize_signoffs(evaluate_signoffs(snapshot, keys.allowed)) == (
        f"approve valid ({ALICE}), accept invalid: digest no longer matches"
    )
    assert summarize_signoffs([]) == "no sign-offs"


def test_unparseable_and_foreign_records_are_invalid(tmp_path: Path) -> None:
    store = tmp_path / "store"
    snapshot, other = make_sealed_snapshot(store, "one"), make_sealed_snapshot(store, "two")
    (snapshot / layout.SIGNOFFS_DIR / "20260101T000000Z-accept-00000000.json").write_bytes(b'{"decision": "accept"}')
    copied = make_signoff(other, "accept", ALICE, None, None, [])
    shutil.copy(copied, snapshot / layout.SIGNOFFS_DIR / copied.name)

    broken, foreign = evaluate_signoffs(snapshot, None)
    assert broken.state == "invalid" and broken.reason.startswith("record does not parse as a Signoff (")
    assert broken.decision is None and summarize_signoffs([broken]).startswith(f"{broken.file} invalid: record does not parse")
    assert foreign.state == "invalid"
    assert f"record is for snapshot {other.name}, not {snapshot.name}" in foreign.reason
    assert "digest no longer matches" in foreign.reason


def test_allowed_signers_default_comes_from_git(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    make_signoff(snapshot, "approve", ALICE, keys.alice, None, [])
    assert default_allowed_signers() is None
    status = only(evaluate_signoffs(snapshot, None))
    assert (status.state, status.reason) == ("unverified", UNVERIFIED)
    with pytest.raises(ApprovalRequired, match="no allowed-signers file"):
        check_approval(snapshot)
    assert NO_ALLOWED_SIGNERS in str(pytest.raises(ApprovalRequired, check_approval, snapshot).value)

    git_set("gpg.ssh.allowedSignersFile", str(keys.allowed))
    assert default_allowed_signers() == keys.allowed
    assert only(evaluate_signoffs(snapshot, None)).state == "valid"
    assert check_approval(snapshot).state == "valid"


def test_by_and_key_default_to_git_config(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    git_set("user.email", ALICE)
    git_set("gpg.format", "ssh")
    git_set("user.signingkey", str(keys.alice))
    done = genrun("signoff", str(snapshot), "--decision", "accept", "--json")
    assert done.returncode == 0, done.stderr
    record = orjson.loads(done.stdout)["record"]
    assert (record["by"], record["signed"]) == (ALICE, True)
    assert only(evaluate_signoffs(snapshot, keys.allowed)).state == "valid"


def test_literal_signing_key_in_git_config_uses_ssh_agent(tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    git_set("gpg.format", "ssh")
    git_set("user.signingkey", _public(keys.alice))
    with pytest.raises(SignoffError, match="ssh-agent.*SSH_AUTH_SOCK is not set"):
        make_signoff(snapshot, "approve", ALICE, None, None, [])

    socket_dir = Path(tempfile.mkdtemp(prefix="agent-", dir="/tmp"))  # unix socket paths are short
    socket = socket_dir / "s"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if socket.exists():
                break
            subprocess.run(["sleep", "0.05"])
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket))
        subprocess.run(["ssh-add", "-q", str(keys.alice)], check=True, capture_output=True)
        path = make_signoff(snapshot, "approve", ALICE, None, None, [])
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
        shutil.rmtree(socket_dir, ignore_errors=True)
    assert record_of(path).signed
    assert only(evaluate_signoffs(snapshot, keys.allowed)).state == "valid"


# --- concurrency --------------------------------------------------------------------------------


def test_concurrent_signoffs_both_survive(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    command = [sys.executable, "-m", "genrun.runner.cli", "signoff", str(snapshot), "--decision", "accept", "--key", str(keys.alice)]
    runs = [subprocess.Popen([*command, "--by", ALICE, "--note", f"run {i}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i in range(2)]
    outcomes = [run.communicate(timeout=PROCESS_TIMEOUT_S) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outcomes

    records = sorted((snapshot / layout.SIGNOFFS_DIR).glob("*.json"))
    assert sorted(record_of(path).note for path in records) == ["run 0", "run 1"]
    assert [s.state for s in evaluate_signoffs(snapshot, keys.allowed)] == ["valid", "valid"]
    assert sorted(p.name for p in (snapshot / layout.SIGNOFFS_DIR).iterdir()) == sorted(
        [p.name for p in records] + [p.name + ".sig" for p in records]
    )


# --- errors -------------------------------------------------------------------------------------


def _no_record_written(snapshot: Path) -> bool:
    directory = snapshot / layout.SIGNOFFS_DIR
    return not directory.exists() or not any(directory.iterdir())


def test_unknown_decision_exits_2(tmp_path: Path) -> None:
    snapshot = make_sealed_snapshot(tmp_path / "store")
    done = genrun("signoff", str(snapshot), "--decision", "aprove", "--by", ALICE)
    assert done.returncode == 2
    assert "argument --decision: invalid choice: 'aprove'" in done.stderr
    assert "'approve', 'accept', 'reject'" in done.stderr
    with pytest.raises(SignoffError, match="unknown decision 'aprove': choose one of approve, accept, reject"):
        make_signoff(snapshot, "aprove", ALICE, None, None, [])
    assert _no_record_written(snapshot)


def test_accept_on_unsealed_snapshot_exits_2(tmp_path: Path) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    done = genrun("signoff", str(snapshot), "--decision", "accept", "--by", ALICE)
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert f"accept needs a sealed snapshot: {snapshot} has no manifest-sha256.txt" in message
    assert "run 'genrun execute' or 'genrun verify' first" in message
    assert _no_record_written(snapshot)


def test_missing_key_file_exits_2(tmp_path: Path) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    missing = tmp_path / "no-such-key"
    done = genrun("signoff", str(snapshot), "--decision", "approve", "--by", ALICE, "--key", str(missing))
    assert done.returncode == 2
    assert f"key file {missing} does not exist (--key)" in " ".join(done.stderr.split())
    assert _no_record_written(snapshot)

    git_set("gpg.format", "ssh")
    git_set("user.signingkey", str(missing))
    with pytest.raises(SignoffError, match=r"does not exist \(git's user.signingkey\)"):
        make_signoff(snapshot, "approve", ALICE, None, None, [])


def test_ssh_keygen_not_installed_exits_2(tmp_path: Path, keys: Keys) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()  # PATH holds only this directory: there really is no ssh-keygen to run
    env = {**os.environ, "PATH": str(empty_bin)}
    done = genrun("signoff", str(snapshot), "--decision", "approve", "--by", ALICE, "--key", str(keys.alice), env=env)
    assert done.returncode == 2
    assert SSH_KEYGEN_MISSING in " ".join(done.stderr.split())
    assert _no_record_written(snapshot)


def test_key_that_cannot_sign_exits_2_and_leaves_nothing(tmp_path: Path) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    protected = tmp_path / "protected"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "secret", "-f", str(protected)], check=True)
    # The CLI runs without a terminal (new session), so ssh-keygen cannot ask for the passphrase.
    done = genrun_without_a_terminal("signoff", str(snapshot), "--decision", "approve", "--by", ALICE, "--key", str(protected))
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert f"ssh-keygen could not sign with {protected} (--key)" in message and "ssh-agent" in message
    assert _no_record_written(snapshot)


def test_verification_without_ssh_keygen_is_invalid_not_a_crash(tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    make_signoff(snapshot, "approve", ALICE, keys.alice, None, [])
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))
    status = only(evaluate_signoffs(snapshot, keys.allowed))
    assert status.state == "invalid" and status.reason.startswith(SSH_KEYGEN_MISSING)


def test_missing_signer_name_is_an_error(tmp_path: Path) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    done = genrun("signoff", str(snapshot), "--decision", "approve")
    assert done.returncode == 2
    assert "pass --by NAME" in done.stderr and "user.email" in done.stderr
    assert _no_record_written(snapshot)


def test_not_a_snapshot_is_an_error(tmp_path: Path) -> None:
    done = genrun("signoff", str(tmp_path), "--decision", "approve", "--by", ALICE)
    assert done.returncode == 1
    assert "is not a genrun snapshot" in " ".join(done.stderr.split())


# --- boundaries ---------------------------------------------------------------------------------


def test_analysis_module_imports_no_heavy_or_runner_code() -> None:
    probe = ("import sys, genrun.analysis.signoffs; "
             "print(sorted({m for m in sys.modules} & {'torch', 'transformers', 'diffusers', 'genrun.runner.execute'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_record_file_is_the_schema_model(tmp_path: Path) -> None:
    snapshot = make_planned_snapshot(tmp_path / "store")
    path = make_signoff(snapshot, "approve", ALICE, None, "n", ["g"])
    raw = orjson.loads(path.read_bytes())
    assert Signoff.model_validate(raw).model_dump(mode="json") == raw
    assert (raw["note"], raw["accepted_gaps"], raw["genrun_version"]) == ("n", ["g"], __version__)
