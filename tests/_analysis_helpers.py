"""Real snapshots for the analysis tests, made once per session by the real runner, and ways to damage copies.

Every snapshot here comes from `genrun.runner.plan.plan_request` + `genrun.runner.execute.execute_snapshot`
(in-process, so torch loads once) or from the real CLI in a subprocess (the SIGKILLed run).
Failing cases are made by changing a *copy* of a real snapshot, the way a person or a bad disk
would (chmod u+w, then edit), never by writing snapshot files from scratch.
"""

import json
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from _forked import ForkedProcess, spawn_cli
from conftest import PROCESS_TIMEOUT_S, CliRun, run_cli
from genrun.schemas import layout

REPO = Path(__file__).resolve().parent.parent
TINY_LM = REPO / "examples" / "models" / "tiny-lm"
TINY_DDIM = REPO / "examples" / "models" / "tiny-ddim"

# A module the killed run uses as its entry point: every decoding step sleeps, so the run is
# still generating when the test kills it (the bundled model otherwise finishes in milliseconds).
SLOW_ENTRYPOINT = '''
import time

from transformers import LogitsProcessor, LogitsProcessorList


class Sleep(LogitsProcessor):
    def __call__(self, input_ids, scores):
        time.sleep(0.05)
        return scores


def generate_slowly(model, tokenizer, inputs, generation, **kwargs):
    encoded = tokenizer(inputs["prompt"], return_tensors="pt")
    out = model.generate(**encoded, **generation, logits_processor=LogitsProcessorList([Sleep()]))
    return tokenizer.decode(out[0], skip_special_tokens=True)
'''

# An entry point that ignores the request's max_new_tokens and passes its own 16 (a helper's hidden cap).
CAPPING_ENTRYPOINT = '''
def generate_capped(model, tokenizer, inputs, generation, **kwargs):
    encoded = tokenizer(inputs["prompt"], return_tensors="pt")
    settings = {**generation, "max_new_tokens": 16}
    out = model.generate(**encoded, **settings)
    return tokenizer.decode(out[0, encoded["input_ids"].shape[1]:], skip_special_tokens=True)
'''

FAILING_ENTRYPOINT = '''
from transformers import StoppingCriteria, StoppingCriteriaList


class FailAt(StoppingCriteria):
    def __init__(self, length):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        if input_ids.shape[1] >= self.length:
            raise ValueError("injected failure after 4 new tokens")
        return input_ids[:, -1] < 0


def generate_failing(model, tokenizer, inputs, generation, **kwargs):
    encoded = tokenizer(inputs["prompt"], return_tensors="pt")
    criteria = StoppingCriteriaList([FailAt(encoded["input_ids"].shape[1] + 4)])
    return model.generate(**encoded, **generation, stopping_criteria=criteria)
'''


def toml_value(value: Any) -> str:
    """A TOML literal for the small values requests use (JSON strings and arrays are valid TOML here)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def request_toml(name: str, model: Path, prompt: str | list[str] | None, generation: dict[str, Any], **tables: dict[str, Any]) -> str:
    """A complete TOML request; `tables` adds `[progress]`, `[units]`, `[entrypoint]`, ..."""
    backend = "diffusers" if (Path(model) / "model_index.json").is_file() else "transformers"
    lines = [f'name = "{name}"', "seed = 0", "", "[model]", f'path = "{model}"', f'backend = "{backend}"', 'dtype = "float32"',
             'device = "cpu"']
    if prompt is not None:  # an unconditional diffusion pipeline takes no input
        lines += ["", "[input]", f"prompts = {toml_value(prompt)}" if isinstance(prompt, list) else f"prompt = {toml_value(prompt)}"]
    lines += ["", "[generation]", *(f"{k} = {toml_value(v)}" for k, v in generation.items())]
    for table, body in tables.items():
        lines += ["", f"[{table}]", *(f"{k} = {toml_value(v)}" for k, v in body.items())]
    return "\n".join(lines) + "\n"


# name -> (prompt, [generation], extra tables, model variant)
VARIANTS: dict[str, tuple[Any, dict[str, Any], dict[str, dict[str, Any]], str]] = {
    "eos": ("count down from 12 :", {"max_new_tokens": 64, "do_sample": False}, {"progress": {"every_units": 4}}, "bundled"),
    "budget": ("count down from 40 :", {"max_new_tokens": 8, "do_sample": False}, {}, "bundled"),
    "pow2": ("count down from 40 :", {"max_new_tokens": 16, "do_sample": False}, {}, "bundled"),
    "max_length": ("count down from 40 :", {"max_length": 12, "do_sample": False}, {}, "bundled"),
    "default_length": ("count down from 40 :", {"do_sample": False}, {}, "bundled"),
    "model_cap": ("count down from 40 :", {"do_sample": False}, {}, "capped"),
    "stop_string": ("count down from 12 :", {"max_new_tokens": 64, "do_sample": False, "stop_strings": ["5"]}, {}, "stop_strings"),
    # a stopping criterion of the entry point raises after 4 tokens (a real exception run; a value generate rejects
    # up front, such as a stop string the tokenizer cannot index, is refused at plan time)
    "exception": ("count down from 12 :", {"max_new_tokens": 64, "do_sample": False},
                  {"entrypoint": {"callable": "failing_entry:generate_failing"}}, "bundled"),
    # same prompt as "pow2", but the word "35" is suppressed: the ids agree up to position 4, then differ
    "suppressed": ("count down from 40 :", {"max_new_tokens": 16, "do_sample": False, "suppress_tokens": ["<id of 35>"]}, {}, "bundled"),
    "batch": (["count down from 3 :", "count down from 40 :"], {"max_new_tokens": 10, "do_sample": False}, {}, "bundled"),
    "frame_short": ("count down from 12 :", {"max_new_tokens": 100, "do_sample": False},
                    {"units": {"name": "frame", "per_second": 25, "requested_seconds": 4.0, "tokens_per_frame": 1}}, "bundled"),
    "frame_ok": ("count down from 12 :", {"max_new_tokens": 100, "do_sample": False},
                 {"units": {"name": "frame", "per_second": 25, "requested_seconds": 0.5, "tokens_per_frame": 1}}, "bundled"),
    "entrypoint_cap": ("count down from 40 :", {"max_new_tokens": 64, "do_sample": False},
                       {"entrypoint": {"callable": "capping_entry:generate_capped"}}, "bundled"),
    "diffusion": (None, {"num_inference_steps": 4}, {"progress": {"every_units": 1}}, "ddim"),
    "tokenizer_moved": ("count down from 12 :", {"max_new_tokens": 64, "do_sample": False}, {}, "private"),
}


def token_id(word: str) -> int:
    """Id of a word in the bundled tokenizer's vocabulary (read from tokenizer.json, no transformers)."""
    return orjson.loads((TINY_LM / "tokenizer.json").read_bytes())["model"]["vocab"][word]


class SnapshotFactory:
    """Makes each named variant once per session (lazily), with the real planner and executor."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "store"
        self._made: dict[str, Path] = {}

    def get(self, name: str) -> Path:
        """The sealed snapshot of variant `name` (read-only: copy it before changing anything)."""
        if name not in self._made:
            self._made[name] = self._make(name)
        return self._made[name]

    def _make(self, name: str) -> Path:
        from genrun.runner.execute import execute_snapshot
        from genrun.runner.plan import plan_request

        prompt, generation, tables, model_kind = VARIANTS[name]
        if "suppress_tokens" in generation:
            generation = {**generation, "suppress_tokens": [token_id("35")]}
        work = self.root / name
        work.mkdir(parents=True)
        model = self._model(model_kind, work)
        if "entrypoint" in tables:
            (work / "capping_entry.py").write_text(CAPPING_ENTRYPOINT)
            (work / "failing_entry.py").write_text(FAILING_ENTRYPOINT)
        request = work / "request.toml"
        request.write_text(request_toml(name.replace("_", "-"), model, prompt, generation, **tables))
        snapshot = plan_request(request, self.store)
        execute_snapshot(snapshot, live=False)
        if model_kind == "private":  # the tokenizer changes after the run: decoding must be refused, not wrong
            tokenizer = model / "tokenizer.json"
            tokenizer.write_bytes(tokenizer.read_bytes().replace(b'"<eos>"', b'"<end>"', 1))
        return snapshot

    def _model(self, kind: str, work: Path) -> Path:
        if kind == "bundled":
            return TINY_LM
        if kind == "ddim":
            return TINY_DDIM
        model = work / "model"
        shutil.copytree(TINY_LM, model)
        if kind == "stop_strings":  # StopStringCriteria probes the vocabulary with the word "abcdef"; give it one
            tokenizer = orjson.loads((model / "tokenizer.json").read_bytes())
            vocab = tokenizer["model"]["vocab"]
            vocab["abcdef"] = len(vocab)
            (model / "tokenizer.json").write_bytes(orjson.dumps(tokenizer))
        if kind == "capped":  # the checkpoint's own generation_config caps output at 16 new tokens
            config = orjson.loads((model / "generation_config.json").read_bytes())
            config["max_new_tokens"] = 16
            (model / "generation_config.json").write_bytes(orjson.dumps(config))
        return model

    def json_request(self) -> Path:
        """The 'eos' variant written as a JSON request (the round trip through json.loads)."""
        if "json" not in self._made:
            from genrun.runner.execute import execute_snapshot
            from genrun.runner.plan import plan_request

            work = self.root / "json"
            work.mkdir()
            body = {"name": "json", "model": {"path": str(TINY_LM), "dtype": "float32", "device": "cpu"},
                    "input": {"prompt": "count down from 5 :"}, "generation": {"max_new_tokens": 32, "do_sample": False}}
            (work / "request.json").write_text(json.dumps(body))
            snapshot = plan_request(work / "request.json", self.store)
            execute_snapshot(snapshot, live=False)
            self._made["json"] = snapshot
        return self._made["json"]

    def planned_only(self) -> Path:
        """A snapshot that was planned and never executed."""
        if "planned" not in self._made:
            from genrun.runner.plan import plan_request

            work = self.root / "planned"
            work.mkdir()
            (work / "request.toml").write_text(request_toml("planned", TINY_LM, "count down from 5 :", {"max_new_tokens": 8}))
            self._made["planned"] = plan_request(work / "request.toml", self.store)
        return self._made["planned"]

    def killed(self) -> Path:
        """A run SIGKILLed mid-generation, after at least one `progress` record reached the file."""
        return self._signalled("killed")

    def interrupted(self) -> Path:
        """A run stopped by SIGINT mid-generation: genrun records the interruption and seals the snapshot."""
        return self._signalled("interrupted")

    def _signalled(self, name: str) -> Path:
        if name not in self._made:  # both slow runs start together: each spends most of its time importing torch
            self._made.update(make_signalled_snapshots(self.root, {"killed": signal.SIGKILL, "interrupted": signal.SIGINT}))
        return self._made[name]


def make_signalled_snapshots(root: Path, signals: dict[str, signal.Signals]) -> dict[str, Path]:
    """Run the real CLI on a slow entry point once per name, wait for a `progress` record, then send that run its signal."""
    runs = {name: _start_slow_run(root / name) for name in signals}
    try:
        pending = dict(runs)
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        while pending and time.monotonic() < deadline:
            for name, (proc, store) in list(pending.items()):
                progress = [p / layout.PROGRESS for p in store.glob("2*")] if store.is_dir() else []
                if progress and progress[0].is_file() and b'"event":"progress"' in progress[0].read_bytes():
                    proc.send_signal(signals[name])
                    del pending[name]
                elif proc.poll() is not None:
                    raise AssertionError(f"the slow run {name} ended before it could be signalled: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.02)
        assert not pending, f"no progress record within {PROCESS_TIMEOUT_S} s from {sorted(pending)}"
        for name, (proc, _) in runs.items():
            expected = -signal.SIGKILL if signals[name] == signal.SIGKILL else 128 + signals[name]  # genrun exits 130 on SIGINT
            assert proc.wait(timeout=PROCESS_TIMEOUT_S) == expected, proc.stderr.read().decode()[-2000:]
    finally:
        for proc, _ in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {name: next(p for p in store.iterdir() if not p.name.startswith(".")) for name, (_, store) in runs.items()}


def _start_slow_run(work: Path) -> tuple[ForkedProcess, Path]:
    work.mkdir(parents=True)
    (work / "slow_entry.py").write_text(SLOW_ENTRYPOINT)
    request = work / "request.toml"
    request.write_text(request_toml(work.name, TINY_LM, "count down from 63 :", {"max_new_tokens": 64, "do_sample": False},
                                    entrypoint={"callable": "slow_entry:generate_slowly"}, progress={"every_units": 1}))
    store = work / "store"
    proc = spawn_cli("run", request, "--store", store, stdout=subprocess.DEVNULL, text=False)
    return proc, store


_FACTORY: list[SnapshotFactory] = []
"""The session's one factory: test modules import the fixture below, and pytest would otherwise keep one
instance per importing module (a session fixture is shared only when defined in conftest.py)."""


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotFactory:
    """Real snapshots made by the runner, built on first use and shared by the session."""
    if not _FACTORY:
        _FACTORY.append(SnapshotFactory(tmp_path_factory.mktemp("analysis-snapshots")))
    return _FACTORY[0]


def copy_snapshot(snapshot: Path, parent: Path) -> Path:
    """A copy (same name, same modes) under `parent`, so the original stays pristine for other tests."""
    parent.mkdir(parents=True, exist_ok=True)
    target = parent / snapshot.name
    shutil.copytree(snapshot, target, symlinks=True)
    return target


def make_writable(path: Path) -> None:
    """chmod u+w, as a person editing a sealed file would first have to."""
    path.chmod(path.stat().st_mode | stat.S_IWUSR)


def edit_bytes(snapshot: Path, rel: str, change: Callable[[bytes], bytes]) -> None:
    """Rewrite one file of a (copied) snapshot with `change` applied to its bytes."""
    path = snapshot / rel
    make_writable(path)
    path.write_bytes(change(path.read_bytes()))


def edit_json(snapshot: Path, rel: str, change: Callable[[dict], None]) -> None:
    """Load one JSON file of a (copied) snapshot, let `change` mutate the dict, write it back."""
    def rewrite(data: bytes) -> bytes:
        document = orjson.loads(data)
        change(document)
        return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"

    edit_bytes(snapshot, rel, rewrite)


def run_genrun(*args: str | Path, env: dict[str, str] | None = None, timeout: float = PROCESS_TIMEOUT_S) -> CliRun:
    """The real CLI, in-process (`conftest.run_cli`)."""
    return run_cli(*args, env=env, timeout=timeout)


def finding(verification: Any, name: str) -> Any:
    """The finding called `name` of a Verification."""
    (found,) = [f for f in verification.findings if f.name == name]
    return found


def tree_state(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """relative path -> (mode, mtime_ns, bytes) of every file and directory (to prove nothing changed)."""
    state = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() else b""
        state[path.relative_to(root).as_posix()] = (st.st_mode, st.st_mtime_ns, data)
    return state


def as_another_user() -> list[str]:
    """The command prefix that runs a process as `nobody` when this one is root (root reads every folder, so a folder of
    mode 000 only refuses another user); empty when not root; skips the test when root has no `setpriv`."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no way to read as a user the folder's mode refuses")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
