"""Sweep planning: grid x dataset expansion, every item validated like a request before anything is written."""

import subprocess
import time
from pathlib import Path

import pytest

from _refusal_helpers import store_content, store_with_a_bystander
from _sweep_helpers import only_sweep, read, write_sweep
from genrun.runner.cli import main
from genrun.runner.errors import RequestError
from genrun.runner.sweep.spec import expand_items, load_sweep
from genrun.schemas.sweep import SweepPlan

ROWS = [{"input.prompt": "count down from 3 :"}, {"input.prompt": "count down from 7 :", "seed": 3}]


def test_grid_times_dataset_in_order(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path, rows=ROWS, grid={"generation.max_new_tokens": [4, 16], "generation.do_sample": [False]})
    items = expand_items(load_sweep(sweep))
    assert [(i.dataset_line, i.changes) for i in items] == [
        (1, {"input.prompt": "count down from 3 :", "generation.max_new_tokens": 4, "generation.do_sample": False}),
        (1, {"input.prompt": "count down from 3 :", "generation.max_new_tokens": 16, "generation.do_sample": False}),
        (2, {"input.prompt": "count down from 7 :", "seed": 3, "generation.max_new_tokens": 4, "generation.do_sample": False}),
        (2, {"input.prompt": "count down from 7 :", "seed": 3, "generation.max_new_tokens": 16, "generation.do_sample": False}),
    ]
    last = items[-1].request
    assert (last.name, last.seed, last.input.prompt, last.generation["max_new_tokens"]) == ("sw-0003", 3, "count down from 7 :", 16)
    assert last.progress.every_units == 2  # the rest is the base request


def test_grid_only_and_dataset_only(tmp_path: Path) -> None:
    assert len(expand_items(load_sweep(write_sweep(tmp_path / "g", grid={"generation.max_new_tokens": [1, 2, 3], "seed": [0, 1]})))) == 6
    assert len(expand_items(load_sweep(write_sweep(tmp_path / "d", rows=ROWS)))) == 2


def test_plan_freezes_every_item_and_the_sweep(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path, rows=ROWS, grid={"generation.max_new_tokens": [4, 16]})
    store = tmp_path / "store"
    assert main(["sweep", "plan", str(sweep), "--store", str(store)]) == 0
    sweep_dir = only_sweep(store)
    plan = SweepPlan.model_validate_json((sweep_dir / "sweep-plan.json").read_bytes())
    assert len(plan.items) == 4 and plan.dataset is not None and plan.dataset.lines == 2 and plan.dataset.copied
    for item in plan.items:
        snapshot = store / item.snapshot_id
        assert read(snapshot / "request.json")["name"] == f"sw-{item.index:04d}"
        digest = subprocess.run(["sha256sum", snapshot / "frozen-sha256.txt"], capture_output=True, text=True, check=True).stdout.split()[0]
        assert digest == item.plan_digest
    assert (sweep_dir / "sweep.source.toml").read_bytes() == sweep.read_bytes()
    assert (sweep_dir / "sweep-dataset.jsonl").read_bytes() == (tmp_path / "items.jsonl").read_bytes()
    assert (sweep_dir / "sweep.base-request.source.toml").read_bytes() == (tmp_path / "base.toml").read_bytes()
    assert not (sweep_dir / "manifest-sha256.txt").exists()  # planned, not run


def test_a_planned_sweep_verifies_as_planned_not_executed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Like a planned snapshot: exit 0, 'planned, not executed', `genrun sweep execute` as the next step (at 80 columns a
    line of its own under the table: in the cell rich cut the sweep's path mid-name). A driver holding the sweep's lock
    (started, nothing logged yet) makes it a sweep in progress again: FAIL, with the resume hint."""
    import fcntl
    import json

    store = tmp_path / "store"
    assert main(["sweep", "plan", str(write_sweep(tmp_path, rows=ROWS)), "--store", str(store)]) == 0
    sweep_dir = only_sweep(store)
    capsys.readouterr()
    assert main(["verify", str(sweep_dir), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    sealed = next(f for f in document["findings"] if f["name"] == "sweep_sealed")
    assert document["status"] == "planned" and document["exit_code"] == 0
    assert sealed["status"] == "PASS" and sealed["message"].startswith("planned, not executed")
    assert f"'genrun sweep execute {sweep_dir}'" in sealed["message"]
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["verify", str(sweep_dir)]) == 0
    human = capsys.readouterr().out
    assert "(planned)" in human and f"  genrun sweep execute {sweep_dir}" in human.splitlines(), human
    monkeypatch.delenv("COLUMNS")
    assert main(["report", str(sweep_dir), "--html", str(tmp_path / "sweep.html")]) == 0  # its page names the same next step
    assert f"planned, not executed: run it with &#39;genrun sweep execute {sweep_dir}&#39;" in (tmp_path / "sweep.html").read_text()
    assert main(["ls", "--store", str(store), "--json"]) == 0  # and ls lists it as planned, found by --state planned
    rows = {row["id"]: row["state"] for row in json.loads(capsys.readouterr().out)["snapshots"]}
    assert rows[sweep_dir.name] == "sweep planned"
    assert main(["ls", "--store", str(store), "--state", "planned", "--json"]) == 0
    assert sweep_dir.name in {row["id"] for row in json.loads(capsys.readouterr().out)["snapshots"]}

    with open(sweep_dir / "sweep-plan.json", "rb") as plan:  # what a starting `genrun sweep execute` holds
        fcntl.flock(plan, fcntl.LOCK_EX)
        assert main(["verify", str(sweep_dir), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    sealed = next(f for f in document["findings"] if f["name"] == "sweep_sealed")
    assert document["status"] == "unsealed" and sealed["status"] == "FAIL" and "genrun sweep resume" in sealed["message"]


def test_bad_dataset_line_refuses_the_whole_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"input.prompt": f"count down from {n} :"} for n in range(1, 12)]
    rows[8] = {"input.prompt": "count down from 9 :", "generation.max_new_tokens": "many"}
    sweep = write_sweep(tmp_path, rows=rows)
    store = tmp_path / "store"
    assert main(["sweep", str(sweep), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "dataset line 9" in err and "max_new_tokens" in err and "'many'" in err
    assert not store.exists() or not any(store.iterdir())  # nothing written, not even the 8 good items


def test_unknown_dotted_key_names_the_line_and_suggests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(tmp_path, rows=[{"input.prompt": "count down from 3 :"}, {"generation.max_new_token": 4}])
    store = tmp_path / "store"
    assert main(["sweep", "plan", str(sweep), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "dataset line 2" in err and "did you mean 'max_new_tokens'" in err
    assert not store.exists()


def test_generation_key_refused_by_the_real_plan_checks(tmp_path: Path) -> None:
    """A key pydantic accepts but transformers' GenerationConfig does not: refused by plan's own check, per item."""
    sweep = write_sweep(tmp_path, grid={"generation.max_new_tokenz": [4]})
    with pytest.raises(RequestError, match=r"sweep item 0.*max_new_tokenz"):
        from genrun.runner.sweep.store import plan_sweep

        plan_sweep(sweep, tmp_path / "store")
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())


@pytest.mark.parametrize(
    ("rows", "grid", "message"),
    [
        ([{"input.prompt": "x", "generation.max_new_tokens": 3}], {"generation.max_new_tokens": [4]}, "also sets"),
        ([["not", "an", "object"]], None, "line 1 must be a non-empty JSON object"),
        ([{"model.path.deeper": 1}], None, "goes through 'model.path', which is a value"),
        (None, {"generation.max_new_tokens": []}, "has no values"),
    ],
)
def test_malformed_sweeps_are_refused(tmp_path: Path, rows, grid, message: str) -> None:  # noqa: ANN001
    with pytest.raises(RequestError, match=message):
        expand_items(load_sweep(write_sweep(tmp_path, rows=rows, grid=grid)))


def test_sweep_file_is_strict(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path, rows=ROWS)
    sweep.write_text(sweep.read_text().replace("workers = 1", "worker = 1"))
    with pytest.raises(RequestError, match="did you mean 'workers'"):
        load_sweep(sweep)


def test_sweep_artifacts_round_trip_and_refuse_unknown_keys(tmp_path: Path) -> None:
    import orjson
    from pydantic import ValidationError

    from genrun.schemas.sweep import ATTEMPT_ADAPTER, ItemOutcome, SweepResult, WorkerModel

    sweep = write_sweep(tmp_path, rows=ROWS)
    assert main(["sweep", "plan", str(sweep), "--store", str(tmp_path / "store")]) == 0
    raw = (only_sweep(tmp_path / "store") / "sweep-plan.json").read_bytes()
    plan = SweepPlan.model_validate_json(raw)
    assert orjson.loads(raw) == plan.model_dump(mode="json")  # written in normalised form
    with pytest.raises(ValidationError, match="surprise"):
        SweepPlan.model_validate(orjson.loads(raw) | {"surprise": 1})
    outcome = ItemOutcome(index=0, status="lost", snapshot_id="a", snapshot_digest=None, attempts=("a",), stop_reasons=(), generated=None)
    result = SweepResult(status="completed", counts={"lost": 1}, items=(outcome,))
    assert SweepResult.model_validate_json(result.model_dump_json()) == result
    worker = WorkerModel(worker="local-0", pid=1, loaded_for_snapshot="a", reused=False, items_before=0, model_digest="d", key="k")
    assert WorkerModel.model_validate_json(worker.model_dump_json()) == worker
    with pytest.raises(ValidationError):
        ATTEMPT_ADAPTER.validate_json(b'{"event": "finished", "item": 0, "attempt": 1, "snapshot_id": "a", "t": 0}')


def test_items_share_the_sweeps_facts_and_keep_their_own_checks(tmp_path: Path) -> None:
    """Environment, genrun's code hash and the tokenizer are computed once per sweep; each item's own facts stay its own."""
    rows = [{"seed": 1}, {"input.prompt": "count down from 12 : 11 10", "entrypoint.callable": "sweep_entries:raise_now"}]
    sweep = write_sweep(tmp_path, rows=rows)
    store = tmp_path / "store"
    assert main(["sweep", "plan", str(sweep), "--store", str(store)]) == 0
    assert main(["plan", str(tmp_path / "base.toml"), "--store", str(tmp_path / "lone")]) == 0
    (lone,) = (tmp_path / "lone").iterdir()
    plan = SweepPlan.model_validate_json((only_sweep(store) / "sweep-plan.json").read_bytes())
    first, second = (store / item.snapshot_id for item in plan.items)
    assert (first / "environment.json").read_bytes() == (second / "environment.json").read_bytes()
    codes = [read(d / "code.json") for d in (first, second, lone)]
    assert codes[0]["genrun"] == codes[1]["genrun"] == codes[2]["genrun"]  # the same hash a lone plan records
    assert codes[0]["entrypoint"] is None and [f["path"] for f in codes[1]["entrypoint"]["files"]] == ["sweep_entries.py"]
    budgets = [read(d / "token-budget.json") for d in (first, second, lone)]
    for budget in budgets:
        del budget["device_memory_free_bytes"]  # measured live at each plan
    assert budgets[0] == budgets[2]  # item 0 is the base request (another seed): the shared tokenizer gives the lone plan's budget
    assert budgets[1]["prompt_tokens"] == budgets[0]["prompt_tokens"] + 2  # each item's own prompt is tokenized


def test_the_checkpoint_generation_config_is_read_once_per_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Key validation, decoding mode, generate's value builders and the budget all read generation_config.json: a
    sweep plan reads it once for all its items, a lone plan once for itself, and the next lone plan again (each
    `genrun plan` has its own plan context; a spy around transformers' loader, which still loads)."""
    from transformers import GenerationConfig

    reads: list[str] = []
    load = GenerationConfig.from_pretrained.__func__

    def counted(cls, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        reads.append(str(args[0]))
        return load(cls, *args, **kwargs)

    monkeypatch.setattr(GenerationConfig, "from_pretrained", classmethod(counted))
    sweep = write_sweep(tmp_path, rows=[{"seed": 1}, {"seed": 2}, {"seed": 3}])
    assert main(["sweep", "plan", str(sweep), "--store", str(tmp_path / "store")]) == 0
    assert len(reads) == 1, reads
    reads.clear()
    assert main(["plan", str(tmp_path / "base.toml"), "--store", str(tmp_path / "lone")]) == 0
    assert len(reads) == 1, reads
    reads.clear()
    assert main(["plan", str(tmp_path / "base.toml"), "--store", str(tmp_path / "lone")]) == 0
    assert len(reads) == 1, reads  # nothing is kept from one plan to the next


def _refused(sweep: Path, tmp_path: Path, *fragments: str) -> None:
    """`genrun sweep plan` in its own process (a regression could hang on a FIFO): exit 2, every fragment named, store unchanged."""
    from conftest import run_cli_subprocess

    store, before = store_with_a_bystander(tmp_path)
    done = run_cli_subprocess("sweep", "plan", sweep, "--store", store, timeout=300)
    message = " ".join(done.stderr.split())
    assert done.returncode == 2 and "Traceback" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert len(message) < 2000, message  # a hostile value is named, never printed whole
    assert store_content(store) == before


HOSTILE_LINES = {  # dataset line -> what the refusal says
    "5000-digit integer": ('{"seed": ' + "9" * 5000 + "}", "line 1 holds a number too long"),
    "100k-deep nesting": ('{"generation.suppress_tokens": ' + "[" * 100_000 + "]" * 100_000 + "}", "line 1 is nested too deeply"),
    "a key with 1,000 dots": ('{"' + ".".join(["input"] * 1001) + '": 1}', "has 1,001 parts"),
    "a key given twice": ('{"seed": 1, "seed": 2}', "key 'seed' appears twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_LINES))
def test_a_hostile_dataset_line_is_refused(case: str, tmp_path: Path) -> None:
    line, named = HOSTILE_LINES[case]
    sweep = write_sweep(tmp_path, rows=[{"seed": 0}])
    (tmp_path / "items.jsonl").write_text(line + "\n")
    _refused(sweep, tmp_path, named)


@pytest.mark.parametrize("target", ["/dev/zero", "/proc/self/mem", "fifo"])
def test_a_dataset_that_is_not_a_regular_file_is_refused_before_it_is_read(target: str, tmp_path: Path) -> None:
    """A FIFO hung `sweep plan` forever; /dev/zero filled memory; /proc/self/mem raised an OSError traceback."""
    import os

    sweep = write_sweep(tmp_path, rows=[{"seed": 0}])
    if target == "fifo":
        os.mkfifo(tmp_path / "fifo")
    sweep.write_text(sweep.read_text().replace('path = "items.jsonl"', f'path = "{target}"'))
    _refused(sweep, tmp_path, "[sweep.dataset] path", "/mem cannot be read" if target == "/proc/self/mem" else "not a regular file")


@pytest.mark.parametrize(("name", "text", "named"), [
    ("sweep.toml", '[sweep]\nname = "s"\nrequest = "base.toml"\nretries = ' + "9" * 5000 + "\n", "retries = 9999999999… (5,000 digits)"),
    ("sweep.toml", '[sweep]\nname = "s"\nrequest = "base.toml"\n[sweep.grid]\nseed = ' + "[" * 100_000 + "]" * 100_000 + "\n",
     "nested too deeply"),
    ("sweep.json", '{"sweep": {"name": "s", "request": "base.toml", "grid": {"seed": ' + "[" * 100_000 + "]" * 100_000 + "}}}",
     "nested too deeply"),
])
def test_a_hostile_sweep_file_is_refused(name: str, text: str, named: str, tmp_path: Path) -> None:
    write_sweep(tmp_path)  # the base request beside it
    sweep = tmp_path / name
    sweep.write_text(text)
    _refused(sweep, tmp_path, f"sweep file {sweep}", named)


def test_a_grid_over_the_item_limit_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    """A 1,000 x 1,000 grid exhausted memory while its million requests were built."""
    from genrun.runner.sweep.spec import MAX_SWEEP_ITEMS

    sweep = write_sweep(tmp_path, rows=[{"seed": 0}, {"seed": 1}],
                        grid={"generation.max_new_tokens": list(range(1, 1001)), "generation.top_k": list(range(1, 1001))})
    _refused(sweep, tmp_path, "the sweep has 2,000,000 items (2 dataset lines x 1,000 'generation.max_new_tokens' x 1,000 "
             f"'generation.top_k'); a sweep holds at most {MAX_SWEEP_ITEMS:,}", "split it into several sweeps")


def test_gc_removes_the_items_of_a_sweep_plan_killed_before_the_sweep_existed(tmp_path: Path) -> None:
    """SIGKILL of `sweep plan` once its first item snapshot is in the store: `genrun gc --yes` removes every item that no
    sweep lists (a sweep is planned whole or not at all) and leaves an ordinary planned snapshot and any sweep alone."""
    from _sweep_helpers import start_cli
    from conftest import run_cli

    store = tmp_path / "store"
    rows = [{"input.prompt": f"count down from {k % 9 + 3} :"} for k in range(40)]
    sweep_file = write_sweep(tmp_path / "in", rows=rows)
    assert run_cli("plan", tmp_path / "in" / "base.toml", "--store", store).returncode == 0  # not a sweep's: never touched
    (unrelated,) = [p for p in store.iterdir() if not p.name.startswith(".")]
    planner = start_cli("sweep", "plan", sweep_file, "--store", store)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and planner.poll() is None and len([p for p in store.iterdir() if not p.name.startswith(".")]) < 2:
        time.sleep(0.01)
    planner.kill()
    planner.wait(timeout=60)

    done = run_cli("gc", "--store", store, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    sweeps = [p for p in store.iterdir() if (p / "sweep-plan.json").is_file()]
    listed = {item["snapshot_id"] for sweep in sweeps for item in read(sweep / "sweep-plan.json")["items"]}
    left = {p.name for p in store.iterdir()} - {unrelated.name} - {s.name for s in sweeps}
    assert left == listed  # nothing left but the items of a sweep that was made (none when the kill came first)
    assert (unrelated / "frozen-sha256.txt").is_file()


@pytest.mark.parametrize(("argv", "named", "instead"), [
    (["run", "examples/sweep/countdowns.toml"], "is a sweep file (it has a top-level [sweep] table), not a request",
     "'genrun sweep examples/sweep/countdowns.toml'"),
    (["plan", "examples/sweep/countdowns.toml"], "is a sweep file", "'genrun sweep plan examples/sweep/countdowns.toml'"),
    (["sweep", "examples/tiny.toml"], "is a request (it has a [model] table and no [sweep]), not a sweep file",
     "'genrun run examples/tiny.toml'"),
    (["sweep", "plan", "examples/tiny.toml"], "is a request", "'genrun plan examples/tiny.toml'"),
])
def test_a_file_of_the_other_kind_is_refused_in_one_line_naming_the_command(argv: list[str], named: str, instead: str,
                                                                             tmp_path: Path) -> None:
    from conftest import run_cli

    done = run_cli(*argv, "--store", tmp_path / "store")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and named in done.stderr and instead in done.stderr, done.stderr  # one line
    assert not (tmp_path / "store").exists()
