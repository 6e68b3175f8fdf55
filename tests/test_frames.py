"""Frame units for autoregressive media models, end to end on the bundled count-down LM (one token = one frame).

`examples/tiny-frames.toml` asks for 2 s at 25 frames/s (50 frames); "count down from 20 :" makes
the model stop by EOS after 21 frames = 0.84 s. This is the short-song case in miniature: a song that comes
back short must be reported as an early stop with its cause, not as "done".
"""

from pathlib import Path

import orjson
import pytest

from _diffusion_helpers import REPO, TINY_LM, events, read_json
from conftest import run_cli, write_request
from genrun.runner.plan import plan_request
from genrun.schemas import layout

EXAMPLE = REPO / "examples" / "tiny-frames.toml"
FRAMES_PRODUCED = 21  # 20 numbers + EOS
PER_SECOND = 25


@pytest.fixture(scope="module")
def frames_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`genrun run examples/tiny-frames.toml --json` through the real CLI."""
    proc = run_cli("run", EXAMPLE, "--store", tmp_path_factory.mktemp("frames-store"), "--json")
    assert proc.returncode == 0, proc.stderr
    return Path(orjson.loads(proc.stdout)["snapshot"])


def test_result_speaks_in_frames_and_seconds(frames_run: Path) -> None:
    result = read_json(frames_run, layout.RESULT)
    assert (result["status"], result["unit"], result["generated"], result["generated_tokens"]) == ("succeeded", "frame", 21, 21)
    assert result["produced_seconds"] == pytest.approx(FRAMES_PRODUCED / PER_SECOND)  # 0.84 s
    assert result["requested_seconds"] == 2.0
    (stop,) = read_json(frames_run, layout.STOP)["sequences"]
    assert (stop["reason"], stop["generated"], stop["evidence"]["last_token_id"]) == ("eos", 21, 2)
    budget = read_json(frames_run, layout.TOKEN_BUDGET)
    assert (budget["units"], budget["requested_units"], budget["domain"]["requested_frames"]) == ("frame", 50, 50)
    stream = events(frames_run)
    assert stream[0].unit == "frame" and stream[0].planned_units == 50
    assert stream[-1].event == "end" and stream[-1].generated == FRAMES_PRODUCED


def test_the_summary_counts_the_row_in_the_runs_unit(frames_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from genrun.runner.cli.execute import render_summary
    from genrun.schemas import Result

    render_summary(frames_run, Result.model_validate_json((frames_run / layout.RESULT).read_bytes()))
    summary = " ".join(capsys.readouterr().err.split())
    assert f"sequence 0: eos (id 2) after {FRAMES_PRODUCED} frames" in summary  # one token is one frame here
    assert f"generated {FRAMES_PRODUCED} frames" in summary and "tokens" not in summary


def test_verify_flags_the_short_output_as_early_stop_caused_by_eos(frames_run: Path) -> None:
    proc = run_cli("verify", frames_run, "--json")
    report = orjson.loads(proc.stdout)
    assert proc.returncode == 0 and report["summary"]["failed"] == 0, report["summary_line"]  # a WARN, not a failure
    early = next(f for f in report["findings"] if f["name"] == "early_stop")
    assert early["status"] == "WARN"
    assert "0.84 s of 2 s requested" in early["message"] and "EOS (id 2) at frame 20" in early["message"]
    assert early["evidence"]["requested_seconds"] == 2.0 and early["evidence"]["produced_seconds"] == pytest.approx(0.84)
    strict = run_cli("verify", frames_run, "--strict")
    assert strict.returncode == 1  # --strict turns the warning into a failing gate


def test_cfg_rows_double_the_kv_estimate(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace('path = "models/tiny-lm"', f'path = "{TINY_LM}"')
    budgets = {}
    for rows in (1, 2):
        request = write_request(tmp_path, text + f"\n[budget]\nrows_per_request = {rows}\n", name=f"rows{rows}.toml")
        budgets[rows] = read_json(plan_request(request, store=tmp_path / "store"), layout.TOKEN_BUDGET)
    one, two = budgets[1], budgets[2]
    assert (one["rows_per_request"], two["rows_per_request"]) == (1, 2)
    assert one["kv_bytes_per_token"] == two["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 4  # 2 x layers x kv heads x head dim x fp32
    assert two["kv_bytes_at_budget"] == 2 * one["kv_bytes_at_budget"] == 2 * one["kv_bytes_per_token"] * (6 + 50)
