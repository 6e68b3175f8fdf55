"""Group-commit fault runner: `python tests/_group_commit_child.py JOBS.json` -> one JSON result per job on stdout.

Imports genrun's runner once, then forks one real process per job. Each child becomes a sweep
worker (`start_worker`: its group commit) and runs the job's planned item snapshots at once, one thread each, through
the worker's `run_item` (the items' backend, `loop`, loads nothing that threads would share). A `sys.addaudithook` hook watches the group commit's steps
(`genrun.runner.group_commit.AUDIT_EVENT`) and, at step number `at`, either SIGKILLs the child or raises an `OSError`
inside the committer (a failed write-back), before the step happens. A job with `at = null` records the steps.

The groups are made the same in every run: the first item to ask for its seal is committed alone, and held at its first
step until every other item waits, so the second group has all of them (a group of several items, and a point between
two items' seals). Used only by tests.
"""

import errno
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path


def _child(job: dict) -> int:
    from genrun.runner import group_commit
    from genrun.runner.sweep import worker

    items = [Path(p) for p in job["snapshots"]]
    at, action = job.get("at"), job.get("action")
    worker.start_worker("faults")
    group = worker._group_commit  # the worker's own, made by start_worker (the test holds its first group)
    assert group is not None
    steps: list[list] = []
    first_queued: list[str] = []
    first_group = threading.Event()

    def hold_first_group() -> None:
        """The committer, at its first group (the first item alone): until every other item waits for its seal."""
        first_group.set()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and group.waiting() < len(items) - 1:
            time.sleep(0.02)

    def hook(event: str, args: tuple) -> None:
        if event != group_commit.AUDIT_EVENT:
            return
        step = args[0]
        if step == "queued":  # the first item to ask goes alone; the others ask once the committer has taken it
            if not first_queued:
                first_queued.append(args[1])
            elif args[1] not in first_queued:
                first_group.wait(300)
            return
        if step == "files-synced" and not first_group.is_set():
            hold_first_group()
        steps.append([step, [os.path.basename(p) for p in args[2]] if len(args) > 2 else [os.path.basename(args[1])]])
        if at is not None and len(steps) == at:
            if action == "SIGKILL":
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(60)
            raise OSError(errno.EIO, f"injected before group commit step {at} ({step})")

    sys.addaudithook(hook)
    reports: dict[str, dict] = {}

    def run(snapshot: Path) -> None:
        report = worker.run_item(snapshot, None, {}, "faults")
        reports[snapshot.name] = {"status": report.status, "message": report.message}

    threads = [threading.Thread(target=run, args=(s,)) for s in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    worker.release_kept_model()
    with open(job["out"], "w") as f:
        json.dump({"steps": steps, "reports": reports}, f)
    return 0


def run_job(job: dict) -> dict:
    """Fork; the child runs `_child` with its stderr in the job's file; its exit status."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        with open(job["stderr"], "w") as err:
            os.dup2(err.fileno(), 2)
            try:
                code = _child(job)
            except BaseException:  # the test asserts there is none: printed where it reads stderr
                traceback.print_exc()
                code = 1
            sys.stderr.flush()
        os._exit(code)
    return {"returncode": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}


def main() -> None:
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    import genrun.runner.execute  # noqa: F401  (imported once, before forking: each child starts warm)
    for job in jobs:
        print(json.dumps(run_job(job)), flush=True)


if __name__ == "__main__":
    main()
