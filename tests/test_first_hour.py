"""A new user's first hour: each rough edge, through the real CLI in a subprocess.

Models are the bundled tiny-lm (or a copy with a chat template / its own generation_config);
CUDA is really absent on this machine, so the device refusal is tested for real.
"""

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from _lm_helpers import tiny_lm_variant

from _forked import spawn_cli
from conftest import EXAMPLES, REPO, CliRun, run_cli, tiny_request, write_request
from genrun.analysis.checks import CHECKS
from genrun.schemas import layout


def _plan(tmp_path: Path, text: str, store: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("plan", write_request(tmp_path, text), "--store", store)


def _only_snapshot(store: Path) -> Path:
    (snapshot,) = [p for p in store.iterdir() if not p.name.startswith(".")]
    return snapshot


def _findings(proc: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {f["name"]: f for f in orjson.loads(proc.stdout)["findings"]}


def _one_line(text: str) -> str:
    return " ".join(text.split())


# 1 ------------------------------------------------------------------------------------------------


def test_unavailable_cuda_device_is_refused_at_plan_time(tmp_path: Path, tiny_lm: Path) -> None:
    import torch

    device = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"  # one this machine lacks
    text = tiny_request(tiny_lm).replace('device = "cpu"', f'device = "{device}"')
    proc = _plan(tmp_path, text, tmp_path / "store")
    assert proc.returncode == 2, proc.stderr
    message = _one_line(proc.stderr)
    assert f"[model] device = '{device}' is not available" in message and "available: cpu" in message
    assert "Traceback" not in proc.stderr and "AssertionError" not in proc.stderr
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").iterdir())


# 2 ------------------------------------------------------------------------------------------------


def test_ls_shows_full_ids_and_commands_take_ids_and_prefixes(tmp_path: Path, tiny_lm: Path) -> None:
    store = tmp_path / "store"
    name = "a-rather-long-request-name-for-my-qwen2-chat"
    for _ in range(2):
        assert _plan(tmp_path, tiny_request(tiny_lm, name=name), store).returncode == 0
    ids = sorted(p.name for p in store.iterdir())
    piped = run_cli("ls", "--store", store)
    assert piped.returncode == 0 and all(i in piped.stdout for i in ids), piped.stdout  # piped: nothing cut

    narrow = subprocess.run(  # a real 80-column terminal: other columns go, ids stay whole
        ["script", "-qec", f"{sys.executable} -m genrun.runner.cli ls --store {store}", "/dev/null"],
        env={**os.environ, "COLUMNS": "80", "LINES": "40"}, capture_output=True, text=True, timeout=120,
    )
    assert narrow.returncode == 0, narrow.stdout
    screen = re.sub(r"\x1b\[[0-9;]*m", "", narrow.stdout)
    assert all(i in screen for i in ids), screen
    assert "left out to fit 80 columns" in _one_line(screen)

    full = run_cli("verify", ids[0], "--store", store)  # a bare id
    assert full.returncode == 0, full.stdout + full.stderr
    unique_prefix = ids[1][: len(os.path.commonprefix(ids)) + 1]
    by_prefix = run_cli("report", unique_prefix, "--store", store, "--json")
    assert by_prefix.returncode == 0 and orjson.loads(by_prefix.stdout)["snapshot_id"] == ids[1]
    ambiguous = run_cli("verify", ids[0][:8], "--store", store)
    assert ambiguous.returncode == 1 and "is ambiguous in store" in _one_line(ambiguous.stderr)
    missing = run_cli("execute", "19990101T", "--store", store)
    assert missing.returncode == 1 and "neither a directory nor the id (or id prefix)" in _one_line(missing.stderr)


# 3 ------------------------------------------------------------------------------------------------


def test_verify_and_report_on_a_plan_say_planned(tmp_path: Path, tiny_lm: Path) -> None:
    store = tmp_path / "store"
    assert _plan(tmp_path, tiny_request(tiny_lm), store).returncode == 0
    snapshot = _only_snapshot(store)
    verify = run_cli("verify", snapshot, "--json")
    assert verify.returncode == 0, verify.stdout
    findings = _findings(verify)
    assert findings["completeness"]["status"] == "PASS"
    assert findings["completeness"]["message"].startswith("planned, not executed")
    assert findings["plan_digest_chain"]["status"] == "PASS"
    assert not [f for f in findings.values() if f["status"] == "FAIL"]
    report = run_cli("report", snapshot)
    assert report.returncode == 0 and "planned, not executed" in report.stdout
    assert "external termination" not in report.stdout + verify.stdout


def test_a_plan_with_a_changed_frozen_file_still_fails(tmp_path: Path, tiny_lm: Path) -> None:
    store = tmp_path / "store"
    assert _plan(tmp_path, tiny_request(tiny_lm), store).returncode == 0
    request = _only_snapshot(store) / layout.REQUEST
    os.chmod(request, 0o644)
    request.write_bytes(request.read_bytes().replace(b'"max_new_tokens": 16', b'"max_new_tokens": 17'))
    verify = run_cli("verify", _only_snapshot(store), "--json")
    assert verify.returncode == 1 and _findings(verify)["plan_digest_chain"]["status"] == "FAIL"


# 4 ------------------------------------------------------------------------------------------------


def test_prompt_longer_than_the_context_says_how_much_to_cut(tmp_path: Path, tiny_lm: Path) -> None:
    context = json.loads((tiny_lm / "config.json").read_text())["max_position_embeddings"]
    prompt = " ".join(["count"] * (context + 40))
    proc = _plan(tmp_path, tiny_request(tiny_lm, prompt=prompt), tmp_path / "store")
    assert proc.returncode == 3, proc.stderr
    message = _one_line(proc.stderr)
    found = re.search(r"the prompt is too long: ([\d,]+) tokens, but the model's context is ([\d,]+) tokens; cut at least ([\d,]+) tokens", message)
    assert found, message
    prompt_tokens, ctx, cut = (int(g.replace(",", "")) for g in found.groups())
    assert ctx == context and prompt_tokens > context and cut == prompt_tokens - context + 1
    assert "at most 0" not in message


# 5 and 6 ------------------------------------------------------------------------------------------


def test_entry_point_passing_generation_through_explains_the_count(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = run_cli("run", EXAMPLES / "tiny-entrypoint.toml", "--store", store)
    assert proc.returncode == 0, proc.stderr
    verify = run_cli("verify", _only_snapshot(store), "--strict", "--json")
    findings = _findings(verify)
    assert findings["hidden_cap"]["status"] == "PASS", findings["hidden_cap"]
    assert "set by the request (passed through by the entry point)" in findings["hidden_cap"]["message"]
    assert findings["budget_truncation"]["status"] == "PASS"
    assert verify.returncode == 0, [f["message"] for f in findings.values() if f["status"] in ("WARN", "FAIL")]


def test_requested_limit_reached_is_information_and_strict_passes(tmp_path: Path, tiny_lm: Path) -> None:
    store = tmp_path / "store"
    proc = run_cli("run", write_request(tmp_path, tiny_request(tiny_lm, prompt="count down from 30 :", generation="max_new_tokens = 3")),
                   "--store", store)
    assert proc.returncode == 0, proc.stderr
    verify = run_cli("verify", _only_snapshot(store), "--strict", "--json")
    finding = _findings(verify)["budget_truncation"]
    assert finding["status"] == "PASS" and finding["message"].startswith("reached the limit set by the request")
    assert verify.returncode == 0


def test_limit_from_the_model_config_still_warns(tmp_path: Path) -> None:
    model = tiny_lm_variant(tmp_path / "model-limit", {"max_new_tokens": 3, "eos_token_id": 2, "bos_token_id": 1, "pad_token_id": 0})
    store = tmp_path / "store"
    text = tiny_request(model, prompt="count down from 30 :", generation="")
    proc = run_cli("run", write_request(tmp_path, text), "--store", store)
    assert proc.returncode == 0, proc.stderr
    finding = _findings(run_cli("verify", _only_snapshot(store), "--json"))["budget_truncation"]
    assert finding["status"] == "WARN" and "did not come from the request" in finding["message"]


# 7 ------------------------------------------------------------------------------------------------


def _interrupt_right_after_planned(request: Path, store: Path) -> tuple[Path, str, int] | None:
    """Start `genrun run`, stop it when `planned ...` appears, and Ctrl-C it there if execution has not begun.

    SIGSTOP freezes the process where it is; no progress.ndjson yet means execution has not
    opened its stream (nor installed its signal handlers), so the SIGINT delivered on SIGCONT
    lands in exactly the window between the plan and the start of execution. None when the process had already gone further.
    """
    proc = spawn_cli("run", request, "--store", store, stdout=subprocess.DEVNULL)
    assert proc.stderr is not None
    snapshot = None
    for line in proc.stderr:
        if line.startswith("planned "):
            proc.send_signal(signal.SIGSTOP)
            snapshot = Path(line.split()[1])
            break
    assert snapshot is not None, "no 'planned' line"
    early = not (snapshot / layout.PROGRESS).exists()
    if early:
        proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGCONT)
    rest = proc.stderr.read()
    code = proc.wait(timeout=300)
    return (snapshot, rest, code) if early else None


def test_ctrl_c_right_after_planned_keeps_the_plan(tmp_path: Path, tiny_lm: Path) -> None:
    request = write_request(tmp_path, tiny_request(tiny_lm))
    caught = None
    for attempt in range(3):  # under heavy load the process may already have started executing when it is stopped
        caught = _interrupt_right_after_planned(request, tmp_path / f"store{attempt}")
        if caught is not None:
            break
    assert caught is not None, "execution always began before the process could be stopped"
    snapshot, rest, code = caught
    assert code == 130, rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    assert f"interrupted before execution; the plan is kept at {snapshot} (genrun execute {snapshot})" in _one_line(rest)
    assert not (snapshot / layout.PROGRESS).exists() and not (snapshot / layout.RESULT).exists()
    later = run_cli("execute", snapshot, "--json")
    assert later.returncode == 0 and orjson.loads(later.stdout)["status"] == "succeeded"


# 8, 9, 10 -----------------------------------------------------------------------------------------


def test_memory_breakdown_rates_per_row_and_summed_and_library_output(tmp_path: Path, tiny_lm: Path) -> None:
    store = tmp_path / "store"
    text = tiny_request(tiny_lm, generation="max_new_tokens = 12").replace(
        'prompt = "count down from 5 :"', 'prompts = ["count down from 3 :", "count down from 30 :"]')
    proc = run_cli("run", write_request(tmp_path, text), "--store", store, env={"COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    memory = next(line for line in proc.stderr.splitlines() if line.strip().startswith("memory: needs"))
    assert all(part in memory for part in ("weights", "KV cache", "activations", "margin")), memory  # one line, never split
    assert "Loading weights" not in proc.stderr  # transformers' own bar is off: genrun owns the terminal
    snapshot = _only_snapshot(store)
    result = json.loads((snapshot / layout.RESULT).read_text())
    budget = json.loads((snapshot / layout.TOKEN_BUDGET).read_text())
    assert budget["weight_bytes"] + budget["kv_bytes_at_budget"] + budget["activation_bytes_estimate"] + budget["margin_bytes"] == budget["required_bytes"]
    last = [json.loads(line) for line in (snapshot / layout.PROGRESS).read_text().splitlines()][-1]
    decode_s = result["timings"]["decode_s"]
    assert result["rows"] == 2
    assert result["units_per_s"] == pytest.approx(result["generated"] / decode_s)  # summed over rows
    assert result["units_per_s_per_row"] == pytest.approx(last["generated"] / decode_s)  # per row, as progress counts
    assert result["generated"] > last["generated"]  # the two rows really are summed
    assert "summed over rows" in _one_line(proc.stderr) and "per row" in _one_line(proc.stderr)
    report = run_cli("report", snapshot)
    assert "margin" in report.stdout and "summed over 2 rows" in _one_line(report.stdout)

    quiet_plan = run_cli("plan", write_request(tmp_path, text, "q.toml"), "--store", tmp_path / "q", "--quiet")
    assert quiet_plan.returncode == 0 and quiet_plan.stderr == "", quiet_plan.stderr
    planned = _only_snapshot(tmp_path / "q")
    assert quiet_plan.stdout == f"{planned}\n"  # the snapshot alone on stdout: what a script takes
    quiet = run_cli("execute", planned, "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == f"{planned}\n", quiet.stderr
    quiet_run = run_cli("run", write_request(tmp_path, text, "q.toml"), "--store", tmp_path / "q2", "--quiet")
    assert quiet_run.returncode == 0 and quiet_run.stderr == "" and quiet_run.stdout == f"{_only_snapshot(tmp_path / 'q2')}\n"
    assert run_cli("verify", quiet_run.stdout.strip()).returncode == 0


# 11 -----------------------------------------------------------------------------------------------


def test_one_conversation_is_reported_as_one_conversation(tmp_path: Path, tiny_lm: Path) -> None:
    model = tmp_path / "chat-lm"
    shutil.copytree(tiny_lm, model)
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    config_path.write_text(json.dumps(config))
    text = tiny_request(model).replace(
        'prompt = "count down from 5 :"',
        'messages = [{role = "system", content = "count"}, {role = "user", content = "down from 5 :"}]')
    store = tmp_path / "store"
    assert _plan(tmp_path, text, store).returncode == 0
    report = run_cli("report", _only_snapshot(store))
    assert report.returncode == 0
    assert "1 conversation (2 messages" in _one_line(report.stdout) and "prompts/messages" not in report.stdout


# 12 -----------------------------------------------------------------------------------------------


def test_readme_command_list_names_every_option() -> None:
    from genrun.runner.cli import SUBCOMMANDS, build_parser

    readme = (REPO / "README.md").read_text()
    block = readme.split("## Commands", 1)[1].split("```", 2)[1]
    entries = re.split(r"\n(?=genrun )", block)
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    for name in SUBCOMMANDS:
        entry = next(e for e in entries if e.startswith(f"genrun {name} "))
        options = [o for a in subparsers.choices[name]._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
        assert all(o in entry for o in options), (name, [o for o in options if o not in entry])
    assert "inputs" in readme and "examples/tiny-entrypoint.toml" in readme
    assert "pip install -e '.[diffusers]'" in readme


def test_help_shows_current_counts_and_both_install_forms() -> None:
    verify_help = run_cli("verify", "--help").stdout
    assert f"{len(CHECKS)} checks:" in verify_help
    assert "pip install -e '.[plot]'" in _one_line(run_cli("report", "--help").stdout)
    run_help = _one_line(run_cli("run", "--help").stdout)
    assert "--require-approval" in run_help and "--allowed-signers" in run_help and "--quiet" in run_help


# round 3, item 6: the bundled examples demonstrate what their comments and the README say -------------------------


def _run_example(tmp_path: Path, example: Path, *extra: str) -> tuple[CliRun, Path, dict[str, dict]]:
    """`genrun run EXAMPLE` (exit 0) and `genrun verify --json` of it (no FAIL): the run, the snapshot, findings by name."""
    store = tmp_path / example.stem
    proc = run_cli("sweep" if example.parent.name == "sweep" else "run", example, "--store", store, *extra)
    assert proc.returncode == 0, proc.stderr
    snapshot = next(p for p in store.iterdir() if not p.name.startswith(".") and (p / layout.MANIFEST).is_file()
                    and (example.parent.name != "sweep" or (p / layout.SWEEP_PLAN).is_file()))
    verified = run_cli("verify", snapshot, "--json")
    findings = _findings(verified)
    assert not [f"{n}: {f['message']}" for n, f in findings.items() if f["status"] == "FAIL"]
    return proc, snapshot, findings


def _warnings(findings: dict[str, dict]) -> list[str]:
    return [f"{name}: {f['message']}" for name, f in findings.items() if f["status"] == "WARN"]


@pytest.mark.parametrize("example", ["tiny-budget.toml", "sweep/countdowns.toml", "tiny-audio-lm.toml"])
def test_examples_that_say_no_warn_verify_without_one(tmp_path: Path, example: str) -> None:
    """tiny-budget and the sweep cut by a limit the request sets (information, not a WARN, as their comments say);
    tiny-audio-lm's cap is its own budget's conservative estimate, so budget_truncation has nothing to warn about."""
    _, snapshot, findings = _run_example(tmp_path, EXAMPLES / example)
    assert _warnings(findings) == []
    if example == "tiny-audio-lm.toml":
        assert findings["budget_truncation"]["status"] == "PASS"
        assert json.loads((snapshot / layout.TOKEN_BUDGET).read_text())["domain"]["conservative_fits_budget"] is True
    else:
        assert "no WARN" in (EXAMPLES / example).read_text()


def test_whisper_long_form_plan_matches_generate_and_counts_one_row(tmp_path: Path) -> None:
    """Long-form windows predict timestamps (no `<|notimestamps|>`): the plan's 1-token decoder prompt is what generate saw;
    EOS is the checkpoint's (Whisper's generate merges one full config: only the request's own keys are the request's);
    two sequential windows are two sequences of one row, in the run summary and in `report` alike."""
    proc, snapshot, findings = _run_example(tmp_path, EXAMPLES / "tiny-whisper-long-form.toml")
    assert _warnings(findings) == [] and findings["limits_reached_config"]["status"] == "PASS"
    budget = json.loads((snapshot / layout.TOKEN_BUDGET).read_text())
    configs = [json.loads(p.read_text()) for p in sorted(snapshot.glob("generation-config.before-generate*.json"))]
    assert len(configs) == 2 and budget["prompt_tokens"] == configs[0]["prompt_length"] == 1
    assert [c["limit_sources"]["eos_token_id"] for c in configs] == ["model_generation_config"] * 2
    assert [c["limit_sources"]["max_new_tokens"] for c in configs] == ["request"] * 2
    assert json.loads((snapshot / layout.RESULT).read_text())["rows"] == 1
    summary = _one_line(proc.stderr)
    assert "sequence 1:" in summary and "(1 row)" in summary and "over 2 rows" not in summary, summary
    report = _one_line(run_cli("report", snapshot).stdout)
    assert "over 1 row(s)" in report and "summed over" not in report, report

    # the same request setting EOS itself: then the request is its source
    text = (EXAMPLES / "tiny-whisper-long-form.toml").read_text().replace("max_new_tokens = 8", "max_new_tokens = 8\neos_token_id = 256")
    text = text.replace('"models/', f'"{EXAMPLES}/models/').replace('"audio/', f'"{EXAMPLES}/audio/')
    own = run_cli("run", write_request(tmp_path, text, "own-eos.toml"), "--store", tmp_path / "own")
    assert own.returncode == 0, own.stderr
    config = json.loads((_only_snapshot(tmp_path / "own") / "generation-config.before-generate.json").read_text())
    assert config["limit_sources"]["eos_token_id"] == "request"


def test_readme_links_into_docs_resolve() -> None:
    """The user guide points to docs/ for the material moved out of it (design rules, benchmarks, testing): every link holds."""
    readme = (REPO / "README.md").read_text()
    links = set(re.findall(r"\]\((docs/[^)#]+)(?:#([^)]+))?\)", readme))
    assert {"docs/design.md", "docs/benchmarks.md", "docs/testing.md"} <= {path for path, _ in links}
    for path, anchor in links:
        target = REPO / path
        assert target.is_file(), path
        if anchor:
            headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", target.read_text(), re.M)}
            assert anchor in headings, f"{path}#{anchor}"


def _first_table_under(markdown: str, heading: str) -> list[str]:
    """The rows of the first Markdown table after `heading`."""
    lines = markdown.split(f"\n{heading}\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    return list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))


def test_the_benchmark_figures_are_the_readmes_in_both_places() -> None:
    """docs/benchmarks.md's "current figures" gave the store's figures of an earlier round (0.89 s where the README said
    2.40 s): the README is the source, the docs' table repeats it row for row, and every command names a script that
    exists (issue 41, item 2)."""
    readme = _first_table_under((REPO / "README.md").read_text(), "## Benchmarks")
    docs = _first_table_under((REPO / "docs" / "benchmarks.md").read_text(), "## Current figures")
    assert len(readme) > 2 and readme == docs, sorted(set(readme) ^ set(docs))
    scripts = {script for row in readme[2:] for script in re.findall(r"bench/[\w.]+", row)}
    assert scripts and all((REPO / script).is_file() for script in scripts), scripts


def test_the_readme_stays_a_guide() -> None:
    """It was 59 KB of guide and round logs; the logs live in docs/ now and the guide stays under ~25 KB."""
    assert len((REPO / "README.md").read_bytes()) <= 25 * 1024


def test_readme_states_the_format_this_genrun_writes() -> None:
    """The README said "writes format 2" after the format became 3: its sentence must name `layout.FORMAT_VERSION`."""
    from genrun.schemas import layout

    readme = " ".join((REPO / "README.md").read_text().split())
    stated = re.findall(r"This genrun writes format (\d+) and reads every earlier format", readme)
    assert stated == [str(layout.FORMAT_VERSION)], stated


# round 4 (issue 41), item 8: the README's commands keep what they create inside the checkout, git-ignored ------------


def test_readme_commands_create_only_git_ignored_paths_inside_the_checkout() -> None:
    """`.venv-vllm/` was not ignored (later snapshots recorded `git dirty: true`) and the recipe wrote /tmp/torch-pin.txt,
    a path every user of the machine shares. Environments (`python3 -m venv X`), files written by redirection and the
    review commands' outputs (`--html`, `--plot`, `export --mlflow`'s defaults: left untracked by a fresh clone's first
    hour, issue 41 round 5) must be relative and git-ignored; the sign-off recipe's `~/` paths are the one exception, and
    the README says so in bold."""
    import subprocess

    readme = (REPO / "README.md").read_text()
    commands = re.sub(r"\s#.*", "", "\n".join(re.findall(r"```bash\n(.*?)```", readme, re.S)))  # comments left out
    created = [f"{d}/" for d in re.findall(r"python3 -m venv (\S+)", commands)] + re.findall(r"\s>>?\s+([^\s&|;)]+)", commands)
    created += re.findall(r"--(?:html|plot) (\S+)", commands)  # the review page, the store's index, the sweep's plot
    if "--mlflow" in commands and "--tracking-uri" not in commands:  # MLflow's defaults: a database and artifacts in the cwd
        created += ["mlflow.db", "mlruns/"]
    assert ".venv-vllm/" in created and ".venv-vllm/torch-pin.txt" in created, created
    assert {"review.html", "index.html", "sweep.png", "mlflow.db"} <= set(created), created
    in_home = [path for path in created if path.startswith("~/")]
    assert in_home == ["~/.config/genrun_allowed_signers"], in_home
    assert "**writes a new key pair into `~/.ssh/` and appends to\n`~/.config/genrun_allowed_signers`**" in readme
    for path in (p for p in created if not p.startswith("~/")):
        assert not path.startswith("/"), f"the README writes {path}, outside the checkout"
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO)
        assert ignored.returncode == 0, f"the README creates {path}, which git does not ignore"


# round 4 (issue 41), item 11: the memory line says what the model needs apart from the margin kept free ---------------


def test_memory_line_gives_the_models_share_apart_from_the_margin() -> None:
    """It read "needs ~2.35 GiB = weights 309 KiB + … margin 2.35 GiB", as if the tiny model needed gigabytes."""
    from types import SimpleNamespace

    from genrun.analysis import describe_memory

    budget = SimpleNamespace(required_bytes=(10 << 30) // 10 + 3 * 1024, weight_bytes=2048, kv_bytes_at_budget=1024,
                             activation_bytes_estimate=0, margin_bytes=(10 << 30) // 10, device="cpu", device_memory_total_bytes=10 << 30)
    assert describe_memory(budget) == ("~1.00 GiB of cpu: the model 3.0 KiB (weights 2.0 KiB + KV cache 1.0 KiB + activations 0 B) "
                                       "+ margin 1.00 GiB (10% of cpu's 10.00 GiB, kept free whatever the model's size)")
