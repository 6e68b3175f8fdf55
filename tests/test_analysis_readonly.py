"""Analysis never changes what it reads and runs where torch and transformers are absent.

- torch, transformers and diffusers are made unimportable in a subprocess by a `sys.meta_path`
  finder that raises ImportError, then verify, report and diff run through the real CLI;
- a copy of a snapshot owned by `nobody`, with every write bit removed, is analysed by a process
  running as `nobody` (the test runs as root, and root ignores permission bits, so the process
  drops to uid/gid 65534 with setgid/setuid after importing its modules: the interpreter lives under
  /root, which `nobody` cannot enter); it first proves it cannot write there, and afterwards every
  byte, mode and mtime of the copy is unchanged.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from _analysis_helpers import REPO, copy_snapshot, snapshots, tree_state  # noqa: F401
from conftest import PROCESS_TIMEOUT_S

BLOCKED = ("torch", "transformers", "diffusers")

# Runs CLI commands given as JSON and reports their exit codes on the last stderr line.
CLI_RUNNER = r'''
import contextlib, io, json, os, sys

BLOCKED = {blocked!r}

class BlockHeavyImports:
    """Stands in for a laptop without torch/transformers/diffusers."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"import of {{name}} blocked: analysis must not need it")
        return None

if {block!r}:
    sys.meta_path.insert(0, BlockHeavyImports())

from genrun.runner.cli import main

def run_all(commands):
    codes = []
    for argv in commands:
        with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO(), write_through=True)):
            codes.append(main(argv))
    return codes

commands = json.loads(sys.argv[1])
warmup = json.loads(sys.argv[2])
if warmup:  # load every lazily imported module before dropping privileges (the interpreter lives under /root)
    run_all(warmup)
drop_to = {drop_to!r}
if drop_to is not None:
    os.setgroups([])
    os.setgid(drop_to)
    os.setuid(drop_to)
    probe = os.path.join(commands[0][1], "probe-write")
    try:
        open(probe, "x").close()
        sys.exit(f"as uid {{os.getuid()}} the snapshot copy is writable: the read-only condition is not real")
    except PermissionError:
        pass
codes = run_all(commands)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print("RESULT " + json.dumps({{"codes": codes, "uid": os.getuid(), "heavy_modules": loaded}}), file=sys.stderr)
'''


def run_cli_commands(commands: list[list[str]], *, block: bool, drop_to: int | None = None,
                     warmup: list[list[str]] | None = None) -> dict:
    """Run `commands` through `genrun.runner.cli.main` in one subprocess and return its RESULT line."""
    script = CLI_RUNNER.format(blocked=BLOCKED, block=block, drop_to=drop_to)
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(commands), json.dumps(warmup or [])], cwd=REPO,
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, env={**os.environ, "COLUMNS": "120"})
    result_lines = [line for line in proc.stderr.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and result_lines, proc.stderr[-3000:]
    return json.loads(result_lines[-1].removeprefix("RESULT "))


def test_verify_report_and_diff_run_without_torch_transformers_or_diffusers(snapshots) -> None:
    eos, budget, killed = (str(snapshots.get("eos")), str(snapshots.get("budget")), str(snapshots.killed()))
    commands = [["verify", eos], ["verify", eos, "--json"], ["verify", killed], ["report", eos], ["report", budget, "--json"],
                ["report", killed], ["diff", eos, budget], ["diff", eos, budget, "--json"]]
    result = run_cli_commands(commands, block=True)
    assert result["codes"] == [0, 0, 1, 0, 0, 0, 0, 0]
    assert result["heavy_modules"] == []


def test_the_block_is_real(snapshots) -> None:
    """The same runner without the block does load torch when asked to plan: so an empty list above means something."""
    script = CLI_RUNNER.format(blocked=BLOCKED, block=True, drop_to=None) + "\nimport torch\n"
    proc = subprocess.run([sys.executable, "-c", script, "[]", "[]"], cwd=REPO, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode != 0 and "import of torch blocked" in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the copy to 'nobody' and to switch user")
def test_read_only_copy_owned_by_nobody_is_analysed_and_left_untouched(snapshots) -> None:
    nobody = 65534
    owned = Path(tempfile.mkdtemp(prefix="genrun-nobody-", dir="/tmp"))  # pytest's tmp dirs are 0700: nobody could not enter
    owned.chmod(0o755)
    copies = [copy_snapshot(snapshots.get("eos"), owned), copy_snapshot(snapshots.killed(), owned)]
    for root in copies:
        for path in [root, *root.rglob("*")]:
            os.chown(path, nobody, nobody, follow_symlinks=False)
            path.chmod(path.stat().st_mode & ~0o222)  # a-w everywhere, directories included
    before = {str(c): tree_state(c) for c in copies}
    eos, killed = map(str, copies)
    commands = [["verify", eos], ["verify", eos, "--json"], ["verify", killed], ["report", eos], ["report", killed, "--json"],
                ["diff", eos, killed]]
    warmup = [["verify", str(snapshots.get("eos"))], ["report", str(snapshots.get("eos"))],
              ["report", str(snapshots.get("eos")), "--json"], ["diff", str(snapshots.get("eos")), str(snapshots.get("budget"))]]
    try:
        result = run_cli_commands(commands, block=False, drop_to=nobody, warmup=warmup)
        assert result["uid"] == nobody
        assert result["codes"] == [0, 0, 1, 0, 0, 0]
        assert {str(c): tree_state(c) for c in copies} == before
    finally:
        shutil.rmtree(owned, ignore_errors=True)


def test_verify_report_and_diff_leave_the_snapshot_byte_for_byte_unchanged(snapshots) -> None:
    """As root (who could write anything): bytes, modes and mtimes of every file and directory stay the same."""
    paths = [snapshots.get("eos"), snapshots.killed()]
    before = [tree_state(p) for p in paths]
    result = run_cli_commands([["verify", str(paths[0])], ["report", str(paths[0])], ["verify", str(paths[1])],
                               ["report", str(paths[1])], ["diff", str(paths[0]), str(paths[1])]], block=True)
    assert result["codes"] == [0, 0, 1, 0, 0]
    assert [tree_state(p) for p in paths] == before
