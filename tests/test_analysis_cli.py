"""`genrun verify`, `genrun report` and `genrun diff` through the real CLI, on real snapshots."""

import re
import sys
from pathlib import Path

import orjson

from _analysis_helpers import copy_snapshot, edit_bytes, run_genrun, snapshots, tree_state  # noqa: F401
from genrun.analysis.checks import CHECKS
from genrun.schemas import layout

SUMMARY_LINE = re.compile(r"^(\d+) checks: (\d+) passed, (\d+) warnings, (\d+) failed, (\d+) skipped; "
                          r"examined (\d+) files, (\d+) token ids, (\d+) progress records$")


def summary_of(stdout: str) -> tuple[int, ...]:
    """The numbers of verify's final line (which must be the last line of stdout, exactly in the documented form)."""
    match = SUMMARY_LINE.match(stdout.rstrip("\n").splitlines()[-1])
    assert match, stdout[-500:]
    return tuple(int(g) for g in match.groups())


# --- verify -------------------------------------------------------------------------------------------------


def test_verify_prints_a_table_and_the_summary_line_and_exits_0(snapshots) -> None:
    proc = run_genrun("verify", snapshots.get("eos"), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary_of(proc.stdout) == (27, 20, 0, 0, 7, 21, 13, 6)  # lineage, input_files, processor_files, stages skipped; + input-preparation.json, prompt-token-ids.safetensors, backend.json, run-log.ndjson (the load's bar)
    for spec in CHECKS:
        assert spec.name in proc.stdout
    assert "manifest_integrity" in proc.stdout and "PASS" in proc.stdout


def test_commands_in_verify_and_report_copy_whole_at_80_columns(snapshots) -> None:  # noqa: F811
    """rich folded a command quoted in a table cell at the column's width, cutting ids mid-token (issue 41, item 11): at 80
    columns the command a finding names is printed under the table and the report's headline is never broken by rich,
    so each command is one line that copies whole."""
    planned = snapshots.planned_only()
    command = f"genrun execute {planned.name}"
    verified = run_genrun("verify", planned, env={"COLUMNS": "80"})
    assert verified.returncode == 0, verified.stdout + verified.stderr
    lines = verified.stdout.splitlines()
    assert f"  {command}" in lines, verified.stdout
    assert "(whole under the table)" in verified.stdout and not any(planned.name in line and "│" in line for line in lines)
    reported = run_genrun("report", planned, env={"COLUMNS": "80"})
    assert reported.returncode == 0, reported.stderr
    assert any(f"'{command}'" in line for line in reported.stdout.splitlines()), reported.stdout


def test_verify_warnings_exit_0_unless_strict(snapshots) -> None:
    capped = snapshots.get("model_cap")
    relaxed = run_genrun("verify", capped)
    assert relaxed.returncode == 0, relaxed.stdout
    assert summary_of(relaxed.stdout)[2] == 2  # hidden_cap, budget_truncation (the limit came from the model's config)
    assert run_genrun("verify", snapshots.get("budget"), "--strict").returncode == 0  # the request's own limit, reached
    strict = run_genrun("verify", capped, "--strict")
    assert strict.returncode == 1 and summary_of(strict.stdout) == summary_of(relaxed.stdout)


def test_verify_fails_a_tampered_snapshot(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_bytes(copy, layout.TOKEN_IDS, lambda b: b[:-1] + bytes([b[-1] ^ 1]))
    proc = run_genrun("verify", copy, env={"COLUMNS": "200"})
    assert proc.returncode == 1
    assert summary_of(proc.stdout)[3] >= 1
    assert "generated-token-ids.safetensors" in proc.stdout


def test_verify_fails_a_killed_snapshot(snapshots) -> None:
    proc = run_genrun("verify", snapshots.killed(), env={"COLUMNS": "200"})
    assert proc.returncode == 1
    assert "incomplete: the run ended without a result (external termination?)" in proc.stdout


def test_verify_table_prints_request_table_names_verbatim(snapshots) -> None:
    """'[generation]' in a message is data, not rich markup: it must reach the terminal."""
    proc = run_genrun("verify", snapshots.get("entrypoint_cap"), env={"COLUMNS": "250"})
    assert "[generation] max_new_tokens = 64 did not reach generate" in proc.stdout


def test_verify_json_is_one_document_on_stdout(snapshots) -> None:
    proc = run_genrun("verify", snapshots.get("default_length"), "--json")
    assert proc.returncode == 0, proc.stderr
    document = orjson.loads(proc.stdout)  # raises if anything else is on stdout
    assert [f["name"] for f in document["findings"]] == [spec.name for spec in CHECKS]
    assert set(document["findings"][0]) == {"name", "status", "message", "evidence", "examined"}
    assert document["summary"]["warnings"] == 3 and document["exit_code"] == 0
    assert SUMMARY_LINE.match(document["summary_line"])
    statuses = {f["name"]: f["status"] for f in document["findings"]}
    assert statuses["hidden_cap"] == statuses["library_default_limit"] == statuses["budget_truncation"] == "WARN"


def test_verify_refuses_a_directory_that_is_not_a_snapshot(tmp_path: Path) -> None:
    proc = run_genrun("verify", tmp_path)
    assert proc.returncode == 1
    assert "is not a genrun snapshot (no frozen-sha256.txt)" in proc.stderr
    assert not any(tmp_path.iterdir())


# --- report -------------------------------------------------------------------------------------------------


def test_report_explains_a_finished_run(snapshots) -> None:
    proc = run_genrun("report", snapshots.get("budget"), env={"COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "succeeded: 8 tokens" in out and "stopped by max_new_tokens" in out
    assert "count down from 40 :" in out                       # request essentials
    assert re.search(r"max_new_tokens\s*│\s*8\s*│\s*request", out)  # limit and where it came from
    assert "8 of 8 requested (from request) = 100%" in out     # budget vs actual
    timings = " ".join(out.split())
    assert "Timings: checks" in timings and "load" in timings and "first token" in timings and "decode" in timings and "= total" in timings
    assert "decoded: '39 38 37 36 35 34 33 32'" in out          # last tokens decoded
    assert re.search(r"tokens generated\s+[▁▂▃▄▅▆▇█]+", out)   # terminal chart
    charts = [line for line in out.splitlines() if re.search(r"[▁▂▃▄▅▆▇█]{2}", line)]
    assert charts and all(re.match(r"^  \S.*?\S {2,}[▁▂▃▄▅▆▇█]", line) for line in charts), charts  # a label never touches its chart
    assert len({line.index(next(c for c in line if c in "▁▂▃▄▅▆▇█")) for line in charts}) == 1, charts  # the charts start in one column


def test_report_says_it_did_not_check_the_seal_and_shows_the_signoffs(snapshots, tmp_path: Path) -> None:
    """report never hashes (verify does): an output edited after the seal still reads `succeeded`, so the summary says the
    files were not checked and names `genrun verify`; the sign-offs are one line under it, as `ls` shows them."""
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    assert run_genrun("signoff", copy, "--decision", "accept", "--by", "owner@example.com").returncode == 0
    edit_bytes(copy, "outputs/sequence_0.txt", lambda b: b + b" edited after sealing")
    proc = run_genrun("report", copy, env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("succeeded")
    assert lines[2] == f"files not checked against the seal: run 'genrun verify {copy.name}'"
    assert re.fullmatch(r"sign-offs: accept \S+ \(owner@example\.com\)", lines[3]), lines[3]
    assert run_genrun("verify", copy).returncode == 1  # what the line points to does catch it
    fresh = run_genrun("report", snapshots.killed(), env={"COLUMNS": "200"}).stdout.splitlines()
    assert "files not checked against the seal" not in " ".join(fresh) and fresh[2] == "sign-offs: no sign-offs"  # unsealed: no seal


def test_report_of_a_killed_run_says_how_far_it_got(snapshots) -> None:
    proc = run_genrun("report", snapshots.killed(), env={"COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr
    assert "incomplete: the run ended without a result (external termination?)" in proc.stdout
    assert "last record 'progress' at t=" in proc.stdout
    assert "Last ids in progress.ndjson (row 0): 70(62) 69(61)" in proc.stdout  # "count down from 63 :" -> 62 61 ...
    assert "decoded: '62 61" in proc.stdout


def test_report_json_and_plot(snapshots, tmp_path: Path) -> None:
    plot = tmp_path / "run.png"
    proc = run_genrun("report", snapshots.get("eos"), "--json", "--plot", plot)
    assert proc.returncode == 0, proc.stderr
    document = orjson.loads(proc.stdout)
    assert document["status"] == "succeeded" and document["sequences"][0]["reason"] == "eos"
    assert [t["token"] for t in document["sequences"][0]["last_tokens"]][-2:] == ["0", "<eos>"]
    assert {line["name"]: line["source"] for line in document["limits"]}["max_new_tokens"] == "request"
    assert len(document["samples"]) == document["progress_records"] == 6
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and document["plot"] == str(plot)


def test_report_refuses_to_write_a_plot_inside_the_snapshot(snapshots) -> None:
    snapshot = snapshots.get("eos")
    before = tree_state(snapshot)
    proc = run_genrun("report", snapshot, "--plot", snapshot / "outputs" / "plot.png")
    assert proc.returncode == 1
    assert "is inside the snapshot" in proc.stderr and "never written to" in proc.stderr
    assert tree_state(snapshot) == before


def test_report_plot_without_matplotlib_names_the_extra(snapshots, tmp_path: Path) -> None:
    """matplotlib is installed here, so its import is blocked in the subprocess to act out a laptop without it."""
    script = (
        "import sys\n"
        "class NoMatplotlib:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'matplotlib':\n"
        "            raise ImportError('No module named matplotlib')\n"
        "sys.meta_path.insert(0, NoMatplotlib())\n"
        "from genrun.runner.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    import subprocess

    plot = tmp_path / "run.png"
    proc = subprocess.run([sys.executable, "-c", script, "report", str(snapshots.get("eos")), "--plot", str(plot)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 2  # a missing extra, as the README's exit codes say (it was 1)
    assert "pip install 'genrun[plot]'" in proc.stderr and not plot.exists()


# --- diff ---------------------------------------------------------------------------------------------------


def test_diff_finds_the_first_diverging_token(snapshots) -> None:
    proc = run_genrun("diff", snapshots.get("pow2"), snapshots.get("suppressed"), "--json")
    assert proc.returncode == 0, proc.stderr
    document = orjson.loads(proc.stdout)
    (sequence,) = document["sequences"]
    assert sequence["first_divergence"] == 4 and not sequence["identical"]  # "39 38 37 36" then 35 was suppressed
    assert [c["path"] for c in document["request"]] == ["generation.suppress_tokens", "name"]
    assert any(c["path"] == "call_0.effective.suppress_tokens" for c in document["effective_config"])
    assert document["identical"] is False


def test_diff_of_a_prefix_and_of_different_stop_reasons(snapshots) -> None:
    proc = run_genrun("diff", snapshots.get("budget"), snapshots.get("default_length"), env={"COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"0\s*│\s*max_new_tokens\s*│\s*max_length\s*│\s*8\s*│\s*20\s*│\s*8", proc.stdout)
    assert "generation.max_new_tokens" in proc.stdout


def test_diff_of_a_snapshot_and_its_copy_is_identical(snapshots, tmp_path: Path) -> None:
    snapshot = snapshots.get("eos")
    proc = run_genrun("diff", snapshot, copy_snapshot(snapshot, tmp_path), "--json")
    document = orjson.loads(proc.stdout)
    assert document["identical"] is True and document["sequences"][0]["identical"] is True
    assert document["request"] == document["environment"] == [] and document["model"] is None


def test_diff_across_models_and_code(snapshots) -> None:
    proc = run_genrun("diff", snapshots.get("default_length"), snapshots.get("model_cap"), "--json")
    document = orjson.loads(proc.stdout)
    assert document["model"]["changed"] == ["generation_config.json"]
    assert any(c["path"] == "call_0.limit_sources.max_new_tokens" for c in document["effective_config"])
