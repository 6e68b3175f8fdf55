"""The sign-off gate through the real CLI, on a machine with no git configuration at all.

Every test runs `genrun` with HOME an empty temporary directory, GIT_CONFIG_NOSYSTEM=1 and no
GIT_CONFIG_GLOBAL, GENRUN_ALLOWED_SIGNERS or SSH agent, from a directory outside any repository:
in-process (`run_cli`, the environment set for the call; genrun reads git's configuration through
real `git` and `ssh-keygen` processes, which inherit it), and the first test once more as a real
`genrun` process end to end. Keys are real ed25519 keys from `ssh-keygen -t ed25519 -N ''`.

The gate opens only on a signed `approve` for the current plan digest that verifies against the
allowed-signers file (`--allowed-signers`, then GENRUN_ALLOWED_SIGNERS); an unsigned approval
counts only with `[policy] require_approval = "any"`. `--by` defaults to the principal the file
lists for the key; `--revoke` supersedes a record.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import orjson
import pytest

from conftest import REPO, CliRun, run_cli, tiny_request, write_request
from genrun.runner.store import write_frozen_manifest
from genrun.schemas import Signoff, layout
from genrun.snapshot_dir import SnapshotDir

ALICE = "alice@example.com"
MALLORY = "mallory@example.com"


class Setup(NamedTuple):
    home: Path
    key: Path
    """alice's private key (listed in `allowed`)."""
    other_key: Path
    """A key listed nowhere."""
    allowed: Path
    env: dict[str, str | None]
    """What the tests change in the environment (None: unset)."""


def _keygen(path: Path) -> Path:
    ssh_keygen = shutil.which("ssh-keygen")
    assert ssh_keygen, "ssh-keygen is needed (apt-get install openssh-client)"
    subprocess.run([ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key, other = _keygen(home / ".ssh" / "id_ed25519"), _keygen(home / ".ssh" / "other")
    kind, blob, *_ = key.with_name(key.name + ".pub").read_text().split()
    allowed = home / "allowed_signers"
    allowed.write_text(f"{ALICE} {kind} {blob}\n")
    changes: dict[str, str | None] = dict.fromkeys(DROPPED_ENV)
    changes.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), GIT_CONFIG_NOSYSTEM="1")
    return Setup(home, key, other, allowed, changes)


DROPPED_ENV = ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GENRUN_ALLOWED_SIGNERS", "SSH_AUTH_SOCK", "GIT_DIR", "GIT_WORK_TREE")


def full_env(setup: Setup) -> dict[str, str]:
    """This process's environment with the setup's changes applied (for real child processes)."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update({k: v for k, v in setup.env.items() if v is not None})
    return env


def genrun(setup: Setup, *args: str | Path, extra_env: dict[str, str] | None = None) -> CliRun:
    """The real CLI, in this process, with no git configuration, outside any repository, without a terminal."""
    return run_cli(*args, cwd=setup.home, env={**setup.env, **(extra_env or {})})


def genrun_process(setup: Setup, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The same as a real `genrun` process."""
    return subprocess.run([sys.executable, "-m", "genrun.runner.cli", *map(str, args)], cwd=setup.home, env=full_env(setup),
                          capture_output=True, text=True, timeout=300, start_new_session=True)


def _plan(setup: Setup, tiny_lm: Path, tables: str = "") -> Path:
    request = write_request(setup.home, tiny_request(tiny_lm, generation="max_new_tokens = 4", tables=tables))
    proc = genrun(setup, "plan", request, "--store", setup.home / "store", "--json")
    assert proc.returncode == 0, proc.stderr
    return Path(orjson.loads(proc.stdout)["snapshot"])


def _sign(setup: Setup, snapshot: Path, *args: str | Path) -> Path:
    proc = genrun(setup, "signoff", snapshot, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return Path(orjson.loads(proc.stdout)["path"])


def _no_records(snapshot: Path) -> bool:
    return not list((snapshot / layout.SIGNOFFS_DIR).glob("*")) if (snapshot / layout.SIGNOFFS_DIR).is_dir() else True


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _not_executed(snapshot: Path) -> bool:
    return not (snapshot / layout.PROGRESS).exists() and not (snapshot / layout.RESULT).exists()


def test_git_really_has_no_configuration(setup: Setup) -> None:
    proc = subprocess.run(["git", "config", "--list"], cwd=setup.home, env=full_env(setup), capture_output=True, text=True)
    assert proc.stdout.strip() == ""


def test_signed_approval_opens_the_gate_and_by_defaults_to_the_listed_principal(setup: Setup, tiny_lm: Path) -> None:
    """End to end in real `genrun` processes (the other tests run the same CLI in-process)."""
    snapshot = _plan(setup, tiny_lm)
    signing = genrun_process(setup, "signoff", snapshot, "--decision", "approve", "--key", setup.key, "--allowed-signers", setup.allowed, "--json")
    assert signing.returncode == 0, signing.stderr
    signed = Signoff.model_validate_json(Path(orjson.loads(signing.stdout)["path"]).read_bytes())
    assert signed.by == ALICE and signed.signed  # no --by, no git user.email: the principal the file lists for the key

    proc = genrun_process(setup, "execute", snapshot.name[:20], "--store", setup.home / "store", "--require-approval",
                  "--allowed-signers", setup.allowed, "--json")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads(proc.stdout)
    assert result["status"] == "succeeded"
    assert result["notes"][0].startswith(f"plan approved: signed by {ALICE}")


def test_allowed_signers_from_the_environment(setup: Setup, tiny_lm: Path) -> None:
    env = {"GENRUN_ALLOWED_SIGNERS": str(setup.allowed)}
    snapshot = _plan(setup, tiny_lm)
    proc = genrun(setup, "signoff", snapshot, "--decision", "approve", "--key", setup.key, extra_env=env)
    assert proc.returncode == 0 and f"signed approve by {ALICE}" in proc.stderr, proc.stderr
    proc = genrun(setup, "execute", snapshot, "--require-approval", extra_env=env)
    assert proc.returncode == 0, proc.stderr
    assert "succeeded" in proc.stderr


def test_unsigned_approval_is_refused_unless_the_policy_says_any(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    _sign(setup, snapshot, "--decision", "approve", "--by", ALICE)
    proc = genrun(setup, "execute", snapshot, "--require-approval", "--allowed-signers", setup.allowed)
    assert proc.returncode == 1
    message = _one_line(proc.stderr)
    assert 'unsigned ones count only with [policy] require_approval = "any"' in message
    assert "unsigned, no signature" in message and "Traceback" not in proc.stderr
    assert _not_executed(snapshot)

    relaxed = _plan(setup, tiny_lm, tables='[policy]\nrequire_approval = "any"')
    _sign(setup, relaxed, "--decision", "approve", "--by", ALICE)
    proc = genrun(setup, "execute", relaxed, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "UNSIGNED, accepted by [policy] require_approval = \"any\"" in orjson.loads(proc.stdout)["notes"][0]


def test_policy_true_means_signed(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm, tables="[policy]\nrequire_approval = true")
    _sign(setup, snapshot, "--decision", "approve", "--by", ALICE)
    proc = genrun(setup, "execute", snapshot)  # no flag: the request's policy asks for it
    assert proc.returncode == 1 and "signed approve record whose signature verifies" in _one_line(proc.stderr)
    assert "no allowed-signers file" in _one_line(proc.stderr)
    assert _not_executed(snapshot)


def test_the_gates_refusal_names_the_readme_recipes_key(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    proc = genrun(setup, "execute", snapshot, "--require-approval", "--allowed-signers", setup.allowed)
    assert proc.returncode == 1
    assert f"run 'genrun signoff {snapshot} --decision approve --key ~/.ssh/genrun_ed25519'" in _one_line(proc.stderr)
    assert "ssh-keygen -t ed25519 -N '' -f ~/.ssh/genrun_ed25519" in (REPO / "README.md").read_text()
    assert _not_executed(snapshot)


def test_signature_by_an_unlisted_key_is_refused(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    _sign(setup, snapshot, "--decision", "approve", "--key", setup.other_key, "--by", MALLORY)
    proc = genrun(setup, "execute", snapshot, "--require-approval", "--allowed-signers", setup.allowed)
    assert proc.returncode == 1 and f"signer {MALLORY} not in allowed signers" in _one_line(proc.stderr)
    assert _not_executed(snapshot)


def test_plan_modified_after_approval_is_refused(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    _sign(setup, snapshot, "--decision", "approve", "--key", setup.key, "--allowed-signers", setup.allowed)
    request = snapshot / layout.REQUEST
    request.write_bytes(request.read_bytes().replace(b'"max_new_tokens": 4', b'"max_new_tokens": 60'))
    write_frozen_manifest(SnapshotDir(snapshot, writable=True))  # a consistent, re-frozen plan: only the approval can tell
    proc = genrun(setup, "execute", snapshot, "--require-approval", "--allowed-signers", setup.allowed)
    assert proc.returncode == 1
    assert "digest no longer matches" in _one_line(proc.stderr)
    assert _not_executed(snapshot)


def test_run_require_approval_refuses_a_fresh_plan_and_keeps_it(setup: Setup, tiny_lm: Path) -> None:
    request = write_request(setup.home, tiny_request(tiny_lm, generation="max_new_tokens = 4"))
    proc = genrun(setup, "run", request, "--store", setup.home / "store", "--require-approval", "--allowed-signers", setup.allowed)
    assert proc.returncode == 1 and "there is no approve record" in _one_line(proc.stderr)
    (snapshot,) = (setup.home / "store").iterdir()
    assert _not_executed(snapshot)
    assert "The plan is kept, not executed" in _one_line(proc.stderr)  # and what to run once approved:
    assert f"then 'genrun execute {snapshot} --require-approval'" in _one_line(proc.stderr)


def test_revoked_approval_no_longer_opens_the_gate_and_verify_shows_it(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    approve = _sign(setup, snapshot, "--decision", "approve", "--key", setup.key, "--allowed-signers", setup.allowed)
    revoke = _sign(setup, snapshot, "--revoke", approve.name, "--key", setup.key, "--allowed-signers", setup.allowed)
    revocation = Signoff.model_validate_json(revoke.read_bytes())
    assert (revocation.decision, revocation.revokes, revocation.by, revocation.signed) == ("revoke", approve.name, ALICE, True)

    proc = genrun(setup, "execute", snapshot, "--require-approval", "--allowed-signers", setup.allowed)
    assert proc.returncode == 1 and f"revoked by {ALICE} in {revoke.name}" in _one_line(proc.stderr)

    proc = genrun(setup, "verify", snapshot, "--allowed-signers", setup.allowed, "--json")
    assert proc.returncode == 0, proc.stdout
    finding = next(f for f in orjson.loads(proc.stdout)["findings"] if f["name"] == "signoffs")
    assert finding["status"] == "PASS" and "approve revoked" in finding["message"]
    states = {r["file"]: r["state"] for r in finding["evidence"]["records"]}
    assert states == {approve.name: "revoked", revoke.name: "valid"}


def test_revoking_an_unknown_record_writes_nothing(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    proc = genrun(setup, "signoff", snapshot, "--revoke", "nope.json", "--by", ALICE)
    assert proc.returncode == 2 and "--revoke 'nope.json': no such record" in _one_line(proc.stderr)
    assert _no_records(snapshot)


def test_by_that_does_not_match_the_key_is_refused(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    proc = genrun(setup, "signoff", snapshot, "--decision", "approve", "--key", setup.key, "--by", MALLORY,
                  "--allowed-signers", setup.allowed)
    assert proc.returncode == 2
    assert f"lists that key for {ALICE}; pass --by {ALICE}" in _one_line(proc.stderr)
    assert _no_records(snapshot)


def test_no_signer_at_all_says_how_to_name_one(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    proc = genrun(setup, "signoff", snapshot, "--decision", "approve")  # no --by, no key, no git user.email
    assert proc.returncode == 2 and "no signer: pass --by NAME" in _one_line(proc.stderr)


def test_plain_verify_warns_signed_not_verified(setup: Setup, tiny_lm: Path) -> None:
    snapshot = _plan(setup, tiny_lm)
    _sign(setup, snapshot, "--decision", "approve", "--key", setup.key, "--allowed-signers", setup.allowed)
    proc = genrun(setup, "verify", snapshot, "--json")
    assert proc.returncode == 0, proc.stdout
    finding = next(f for f in orjson.loads(proc.stdout)["findings"] if f["name"] == "signoffs")
    assert finding["status"] == "WARN" and "signed, not verified (no allowed-signers file" in finding["message"]
    assert genrun(setup, "verify", snapshot, "--strict").returncode == 1
    proc = genrun(setup, "verify", snapshot, "--allowed-signers", setup.allowed, "--strict")
    assert proc.returncode == 0, proc.stdout


def test_an_approval_signed_after_the_run_started_is_named_as_not_gating_it(setup: Setup, tiny_lm: Path) -> None:
    """Approving a plan that already ran records the approval, and says (signoff and verify) that it gated nothing."""
    before = _plan(setup, tiny_lm)
    _sign(setup, before, "--decision", "approve", "--key", setup.key, "--allowed-signers", setup.allowed)
    assert genrun(setup, "execute", before, "--require-approval", "--allowed-signers", setup.allowed).returncode == 0

    after = _plan(setup, tiny_lm)
    assert genrun(setup, "execute", after).returncode == 0
    late = genrun(setup, "signoff", after, "--decision", "approve", "--key", setup.key, "--allowed-signers", setup.allowed)
    assert late.returncode == 0, late.stderr
    assert "this plan already ran" in _one_line(late.stderr) and "did not gate that run" in _one_line(late.stderr)

    findings = {}
    for snapshot in (before, after):
        proc = genrun(setup, "verify", snapshot, "--allowed-signers", setup.allowed, "--json")
        assert proc.returncode == 0, proc.stdout
        findings[snapshot] = next(f for f in orjson.loads(proc.stdout)["findings"] if f["name"] == "signoffs")
    assert findings[after]["status"] == "PASS" and "after the run started: it did not gate the run" in findings[after]["message"]
    started = next(orjson.loads(line) for line in (after / layout.PROGRESS).read_bytes().splitlines())["wall_time"]
    assert findings[after]["evidence"]["run_started_at"] == started
    assert "did not gate" not in findings[before]["message"] and "run_started_at" not in findings[before]["evidence"]
