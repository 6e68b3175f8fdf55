"""Sweep files, datasets and entry points for the sweep tests (tiny-lm, a few tokens per item)."""

import json
import os
import time
from pathlib import Path
from typing import Any

import orjson

from _forked import ForkedProcess, spawn_cli
from conftest import TINY_LM

ENTRIES = '''
"""Entry points for sweep tests: block the first time (so a test can kill mid-item), fail, or load slowly."""
import os
import time
from pathlib import Path


def _generate(model, tok, inputs, generation):
    enc = tok(inputs["prompt"], return_tensors="pt")
    return model.generate(**enc, tokenizer=tok, **generation)


def block_once(model, tok, inputs, generation, marker):
    """First call: write this pid to `marker` and wait to be killed or interrupted; later calls generate."""
    marker = Path(marker)
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        for _ in range(6000):
            time.sleep(0.1)
    return _generate(model, tok, inputs, generation)


def raise_now(model, tok, inputs, generation):
    raise RuntimeError("planted failure in item code")


def load_after_interrupt(path, dtype, device, marker):
    """A `[model] loader` that writes this pid to `marker`, waits until the sweep worker has noted a SIGINT, then loads."""
    from genrun.runner.sweep.worker import interrupt_requested
    from transformers import AutoModelForCausalLM, AutoTokenizer

    Path(marker).write_text(str(os.getpid()))
    for _ in range(6000):
        if interrupt_requested():
            break
        time.sleep(0.1)
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
'''


def write_sweep(directory: Path, *, name: str = "sw", rows: list[dict[str, Any]] | None = None, grid: dict[str, list] | None = None,
                kind: str = "local", workers: int = 1, retries: int | None = None, max_new_tokens: int = 32,
                address: str | None = None) -> Path:
    """A base request for tiny-lm, an entry-point module beside it, a dataset and the sweep file; returns the sweep file."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sweep_entries.py").write_text(ENTRIES)
    (directory / "base.toml").write_text(
        f'name = "base"\nseed = 0\n[model]\npath = "{TINY_LM}"\ndtype = "float32"\ndevice = "cpu"\n'
        f'[input]\nprompt = "count down from 5 :"\n[generation]\nmax_new_tokens = {max_new_tokens}\ndo_sample = false\n'
        "[progress]\nevery_units = 2\n"
    )
    lines = [f'[sweep]\nname = "{name}"\nrequest = "base.toml"']
    if retries is not None:
        lines.append(f"retries = {retries}")
    if grid:
        lines.append("[sweep.grid]")
        lines += [f'"{k}" = {json.dumps(v)}' for k, v in grid.items()]
    if rows is not None:
        (directory / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        lines.append('[sweep.dataset]\npath = "items.jsonl"')
    lines.append(f'[sweep.executor]\nkind = "{kind}"\nworkers = {workers}')
    if address is not None:
        lines.append(f'address = "{address}"')
    path = directory / "sweep.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start_cli(*args: str | Path, start_new_session: bool = False, env: dict[str, str] | None = None) -> ForkedProcess:
    """The real CLI in its own process (tests signal or kill it); `start_new_session`: its own process group too; `env`:
    variables set in its `os.environ` (what the processes it starts inherit)."""
    return spawn_cli(*args, start_new_session=start_new_session, env=env)


def wait_for(path: Path, timeout: float = 600) -> str:
    """The content of `path` once it exists (a marker an entry point writes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.2)
    raise AssertionError(f"{path} never appeared")


def only_sweep(store: Path) -> Path:
    """The one sweep snapshot in a store."""
    sweeps = [p for p in store.iterdir() if (p / "sweep-plan.json").is_file()]
    assert len(sweeps) == 1, sweeps
    return sweeps[0]


def read(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def spawned_workers(parent: int) -> list[int]:
    """PIDs of the `multiprocessing` spawn children of `parent` (local sweep workers, possibly still starting)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found
