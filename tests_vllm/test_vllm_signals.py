"""A real SIGINT to `genrun run` while the engine generates: the loop stops between steps, aborts the requests, keeps every
id produced so far and the snapshot seals `interrupted` and verifies. The engine starts in the child process (the
signal reaching a real run is the point)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from _snapshot import ids, problems, stops
from conftest import write_request

PROGRESS_EVERY_TOKEN = "\n[progress]\nevery_units = 1\nevery_seconds = 0.5\n"


def _generated(progress: Path) -> int:
    """Tokens of the longest row in the latest progress record (0 before the first)."""
    lines = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()] if progress.exists() else []
    return max((r.get("generated", 0) for r in lines), default=0)


def test_sigint_seals_interrupted_with_the_ids_so_far(tmp_path: Path) -> None:
    store = tmp_path / "store"
    request = write_request(tmp_path, prompts=["Count: 0", "Count: 5"], generation={"max_tokens": 1000, "temperature": 0},
                            extra=PROGRESS_EVERY_TOKEN)
    child = subprocess.Popen([sys.executable, "-m", "genrun", "run", str(request), "--store", str(store), "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    deadline = time.monotonic() + 600
    seen = 0
    while time.monotonic() < deadline and child.poll() is None:
        progress = list(store.glob("*/progress.ndjson"))
        if progress and (seen := _generated(progress[0])) >= 3:
            break
        time.sleep(0.2)
    assert child.poll() is None, f"the run ended before the signal: {child.communicate()[1][-2000:]}"
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=300)
    assert child.returncode == 130, stderr[-2000:]
    (snapshot,) = [p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")]
    result = json.loads((snapshot / "result.json").read_text())
    assert (result["status"], result["signal"]) == ("interrupted", "SIGINT")
    rows = stops(snapshot)
    saved = ids(snapshot)
    assert [r["reason"] for r in rows] == ["interrupted", "interrupted"]
    assert all(0 < len(saved[r["index"]]) < 1000 and r["generated"] == len(saved[r["index"]]) for r in rows)
    # what progress showed before the signal is kept (it counts the longest row; the second prompt starts a step later, so
    # its row may have one id fewer: how many each row has depends on when the signal lands)
    assert max(r["generated"] for r in rows) >= seen >= 3

