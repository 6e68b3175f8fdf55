"""Each verify check on real snapshots: a case where it passes and one where it fails or warns.

Passing cases are snapshots made by the runner. Failing cases are copies of those snapshots
changed the way a person or a disk would change them (chmod u+w, then edit one file), or runs
that really ended badly (a library default limit, a capped checkpoint, an exception, a SIGKILL).
"""

import re
from pathlib import Path

import orjson
import pytest

from _analysis_helpers import copy_snapshot, edit_bytes, edit_json, finding, run_genrun, snapshots  # noqa: F401
from genrun.analysis import verify_snapshot
from genrun.analysis._check_integrity import INCOMPLETE
from genrun.analysis.checks import CHECKS
from genrun.schemas import layout


def check(path: Path, name: str):
    """The finding `name` of a fresh verify of `path`."""
    return finding(verify_snapshot(path), name)


# --- a clean run ------------------------------------------------------------------------------


def test_clean_eos_run_passes_every_check_that_applies(snapshots) -> None:
    verification = verify_snapshot(snapshots.get("eos"))
    statuses = {f.name: f.status for f in verification.findings}
    assert [f.name for f in verification.findings] == [spec.name for spec in CHECKS]
    skipped = {name for name, status in statuses.items() if status == "SKIP"}
    assert skipped == {"early_stop", "diffusion_steps", "stages", "signoffs", "lineage", "input_files", "processor_files"}, statuses  # not a rerun; a text-only request; one stage
    assert set(statuses.values()) == {"PASS", "SKIP"}, statuses
    summary = verification.summary
    assert (summary.checks, summary.passed, summary.warnings, summary.failed) == (27, 20, 0, 0)
    # examined: every file of the snapshot (manifest included), the 13 ids, the 6 progress lines
    files = sum(1 for p in snapshots.get("eos").rglob("*") if p.is_file())
    assert (summary.examined.files, summary.examined.token_ids, summary.examined.progress_records) == (files, 13, 6)
    assert verification.exit_code() == 0 and verification.exit_code(strict=True) == 0


# --- completeness -----------------------------------------------------------------------------


def test_killed_run_is_incomplete_with_its_last_progress_record(snapshots) -> None:
    killed = snapshots.killed()
    last = orjson.loads((killed / layout.PROGRESS).read_bytes().splitlines()[-1])
    found = check(killed, "completeness")
    assert found.status == "FAIL"
    assert found.message.startswith(INCOMPLETE)
    assert f"t={last['t']:.3f} s, generated {last['generated']} tokens" in found.message
    assert found.evidence["last_generated"] == last["generated"] >= 1
    assert verify_snapshot(killed).exit_code() == 1


def test_plan_without_execution_is_planned_not_failed(snapshots) -> None:
    found = check(snapshots.planned_only(), "completeness")
    assert found.status == "PASS" and found.message.startswith("planned, not executed")
    assert verify_snapshot(snapshots.planned_only()).exit_code() == 0


def test_result_without_seal_is_incomplete(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    (copy / layout.MANIFEST).unlink()
    found = check(copy, "completeness")
    assert found.status == "FAIL" and "never sealed" in found.message
    assert check(copy, "manifest_integrity").status == "SKIP"


# --- artifacts, manifest, plan digest chain, identities ---------------------------------------------


def test_file_that_breaks_its_schema_fails_but_verify_still_reports(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.RESULT, lambda r: r.update(status="done"))
    verification = verify_snapshot(copy)
    found = finding(verification, "artifacts_valid")
    assert found.status == "FAIL" and "result.json" in found.message and "status" in found.message
    assert len(verification.findings) == len(CHECKS)  # every other check still reported


def test_one_changed_byte_in_a_sealed_file_fails_the_manifest(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_bytes(copy, "outputs/sequence_0.txt", lambda b: b.replace(b"5", b"6", 1))
    verification = verify_snapshot(copy)
    manifest = finding(verification, "manifest_integrity")
    assert manifest.status == "FAIL" and manifest.evidence["changed"] == ["outputs/sequence_0.txt"]
    assert finding(verification, "saved_text").status == "FAIL"
    assert verification.exit_code() == 1


def test_added_and_missing_files_fail_the_manifest_but_signoffs_are_outside_it(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    (copy / "notes.txt").write_text("added after sealing\n")
    (copy / layout.TOKEN_IDS_SUMMARY).unlink()
    (copy / layout.SIGNOFFS_DIR / "README").write_text("sign-offs are appended after sealing\n")
    found = check(copy, "manifest_integrity")
    assert found.status == "FAIL"
    assert (found.evidence["extra"], found.evidence["missing"]) == (["notes.txt"], [layout.TOKEN_IDS_SUMMARY])


def test_changing_a_frozen_file_breaks_the_plan_chain_even_when_rehashed(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.TOKEN_BUDGET, lambda b: b.update(requested_units=65536))
    found = check(copy, "plan_digest_chain")
    assert found.status == "FAIL" and found.evidence["changed"] == [layout.TOKEN_BUDGET]
    # Re-hashing frozen-sha256.txt to hide it moves the plan digest: the seal and result.json give it away.
    from genrun.schemas.digests import parse_sha256sum, render_sha256sum, sha256_file

    entries = parse_sha256sum((copy / layout.FROZEN_MANIFEST).read_bytes())
    entries[layout.TOKEN_BUDGET] = sha256_file(copy / layout.TOKEN_BUDGET)
    edit_bytes(copy, layout.FROZEN_MANIFEST, lambda _: render_sha256sum(entries.items()))
    verification = verify_snapshot(copy)
    chain = finding(verification, "plan_digest_chain")
    assert chain.status == "FAIL" and "binds plan digest" in chain.message
    assert finding(verification, "execution_identity").status == "FAIL"


def test_execution_identity_must_equal_the_frozen_one(snapshots, tmp_path: Path) -> None:
    assert check(snapshots.get("eos"), "execution_identity").status == "PASS"
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.RESULT, lambda r: r["execution_identity"].update(model_digest="0" * 64))
    found = check(copy, "execution_identity")
    assert found.status == "FAIL" and "model_digest" in found.message


def test_outputs_listed_in_result_must_exist(snapshots, tmp_path: Path) -> None:
    assert check(snapshots.get("eos"), "outputs_listed").status == "PASS"
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.RESULT, lambda r: r.update(outputs=["sequence_0.txt", "sequence_1.txt"]))
    found = check(copy, "outputs_listed")
    assert found.status == "FAIL" and found.evidence["missing"] == ["outputs/sequence_1.txt"]


# --- the request and its limits --------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["eos", "json"])
def test_request_source_round_trips(snapshots, variant: str) -> None:
    path = snapshots.json_request() if variant == "json" else snapshots.get(variant)
    found = check(path, "request_round_trip")
    assert found.status == "PASS" and found.evidence["source"] == f"request.source.{'json' if variant == 'json' else 'toml'}"


def test_request_source_key_dropped_from_the_normalised_request_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_bytes(copy, "request.source.toml", lambda b: b.replace(b"[generation]\n", b"[generation]\nmax_new_token = 3\n"))
    found = check(copy, "request_round_trip")
    assert found.status == "FAIL" and "generation.max_new_token" in found.message


def test_request_source_value_changed_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_bytes(copy, "request.source.toml", lambda b: b.replace(b"max_new_tokens = 64", b"max_new_tokens = 65536"))
    found = check(copy, "request_round_trip")
    assert found.status == "FAIL" and "generation.max_new_tokens (65536 vs 64)" in found.message


def test_request_limits_reached_the_effective_config(snapshots) -> None:
    found = check(snapshots.get("eos"), "limits_reached_config")
    assert found.status == "PASS" and "max_new_tokens=64 (request)" in found.message and "max_length=70" in found.message


def test_limit_that_did_not_reach_generate_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.GENERATION_CONFIG, lambda c: c["effective"].update(max_new_tokens=16))
    found = check(copy, "limits_reached_config")
    assert found.status == "FAIL"
    assert "max_new_tokens = 64 did not reach generate (effective 16)" in found.message
    assert "max_length 70 != prompt_length 6 + max_new_tokens 16" in found.message


def test_entry_point_that_replaced_the_requested_limit_warns(snapshots) -> None:
    found = check(snapshots.get("entrypoint_cap"), "limits_reached_config")
    assert found.status == "WARN" and "max_new_tokens = 64 did not reach generate (passed 16, effective 16)" in found.message


# --- token counts, summaries and stop reasons ----------------------------------------------------------------


@pytest.mark.parametrize("variant", ["eos", "budget", "batch", "max_length", "stop_string"])
def test_counts_summary_and_stop_reasons_agree(snapshots, variant: str) -> None:
    verification = verify_snapshot(snapshots.get(variant))
    for name in ("token_counts", "token_summary", "stop_reasons"):
        assert finding(verification, name).status == "PASS", finding(verification, name)


def test_batch_rows_stop_for_different_reasons(snapshots) -> None:
    found = check(snapshots.get("batch"), "stop_reasons")
    assert "0: eos, 1: max_new_tokens" in found.message


def test_count_that_disagrees_across_files_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.STOP, lambda s: s["sequences"][0].update(generated=16384))
    edit_json(copy, layout.RESULT, lambda r: r.update(generated_tokens=16384))
    found = check(copy, "token_counts")
    assert found.status == "FAIL"
    assert "generation-stop.json 16384" in found.message and "generated_tokens 16384 != 13 ids saved" in found.message


def test_summary_that_misdescribes_the_ids_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.TOKEN_IDS_SUMMARY, lambda s: s["sequences"][0].update(eos_positions=[], last_ids=[1, 2]))
    found = check(copy, "token_summary")
    assert found.status == "FAIL" and "last_ids" in found.message and "eos_positions [] != [12]" in found.message


_TOKEN_FACTS = ("last_token_id", "fired", "eos_token_ids", "max_new_tokens", "max_length", "prompt_length")


def _claim(reason: str, **evidence: object):
    """Forge row 0's stop as `reason`, with evidence of that reason's shape (a mismatched tag would not even load); the row's
    token facts are kept, as a forger who only changed the reason would."""
    def forge(stops: dict) -> None:
        row = stops["sequences"][0]
        facts = {k: row["evidence"][k] for k in _TOKEN_FACTS if k in row["evidence"]}
        row.update(reason=reason, evidence={"reason": reason, **facts, **evidence})
    return forge


def test_eos_claimed_for_a_row_cut_by_the_budget_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("budget"), tmp_path)
    edit_json(copy, layout.STOP, _claim("eos", eos_token_id=2, source=None, stop_length=None))
    found = check(copy, "stop_reasons")
    assert found.status == "FAIL" and "is not in the EOS set [2]" in found.message


def test_length_limit_claimed_for_a_row_that_ended_with_eos_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.STOP, _claim("max_new_tokens", limit=64, source="request", stop_length=None))
    found = check(copy, "stop_reasons")
    assert found.status == "FAIL" and "ended by EOS, not by a length limit" in found.message


def test_stop_string_missing_from_the_decoded_tail_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("stop_string"), tmp_path)
    edit_json(copy, layout.STOP, lambda s: s["sequences"][0]["evidence"].update(stop_string="x"))
    found = check(copy, "stop_reasons")
    assert found.status == "FAIL" and "does not contain 'x'" in found.message


def test_unknown_stop_reason_warns(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("budget"), tmp_path)
    edit_json(copy, layout.STOP, _claim("unknown", note="forged"))
    found = check(copy, "stop_reasons")
    assert found.status == "WARN" and "no recorded criterion explains the stop" in found.message


def test_interrupted_run_is_sealed_and_its_stop_agrees_with_its_result(snapshots, tmp_path: Path) -> None:
    interrupted = snapshots.interrupted()
    verification = verify_snapshot(interrupted)
    completeness = finding(verification, "completeness")
    assert completeness.status == "WARN"
    assert re.search(r"the run was interrupted by SIGINT after \d+ tokens: the outputs are partial", completeness.message)
    stops = finding(verification, "stop_reasons")
    assert stops.status == "PASS" and "0: interrupted" in stops.message and stops.evidence["result_status"] == "interrupted"
    assert finding(verification, "token_counts").status == "PASS"
    copy = copy_snapshot(interrupted, tmp_path)
    edit_json(copy, layout.RESULT, lambda r: r.update(signal=None))
    assert check(copy, "stop_reasons").status == "FAIL"


def test_exception_run_agrees_with_its_result_and_a_mismatch_fails(snapshots, tmp_path: Path) -> None:
    exception = snapshots.get("exception")
    assert check(exception, "stop_reasons").status == "PASS"
    completeness = check(exception, "completeness")
    assert completeness.status == "WARN" and "failed with ValueError: injected failure after 4 new tokens" in completeness.message
    copy = copy_snapshot(exception, tmp_path)
    edit_json(copy, layout.RESULT, lambda r: r.update(status="succeeded"))
    found = check(copy, "stop_reasons")
    assert found.status == "FAIL" and "result.json says status 'succeeded'" in found.message


# --- hidden caps, library defaults, truncation ----------------------------------------------------------------


def test_power_of_two_without_eos_explained_by_the_request_passes_with_a_note(snapshots) -> None:
    found = check(snapshots.get("pow2"), "hidden_cap")
    assert found.status == "PASS"
    assert "16 tokens is a power of two without EOS, but it is max_new_tokens=16 set by the request" in found.message


@pytest.mark.parametrize(("variant", "count", "origin"), [
    ("model_cap", 16, "max_new_tokens=16 from model_generation_config"),
    ("default_length", 20, "max_length=26 from library_default"),
    ("entrypoint_cap", 16, "max_new_tokens=16 from entrypoint"),
])
def test_power_of_two_or_common_budget_without_eos_warns(snapshots, variant: str, count: int, origin: str) -> None:
    found = check(snapshots.get(variant), "hidden_cap")
    assert found.status == "WARN"
    assert f"suspected hidden cap: sequence 0 stopped at {count} tokens" in found.message and origin in found.message


@pytest.mark.parametrize("ended_by", ["interrupted", "exception"])
def test_a_row_a_signal_or_a_raise_ended_at_a_power_of_two_is_no_hidden_cap(snapshots, tmp_path: Path, ended_by: str) -> None:
    """16 tokens is where the signal (or the engine's death) found the row: the event explains the count, no limit does."""
    copy = copy_snapshot(snapshots.get("model_cap"), tmp_path)  # 16 tokens without EOS: a WARN as recorded
    evidence = {"reason": "interrupted", "signal": "SIGINT"} if ended_by == "interrupted" else {"reason": "exception", "type": "EngineDeadError"}

    def ended(stop: dict) -> None:
        stop["sequences"][0].update(reason=ended_by, evidence=evidence)
        if ended_by == "exception":
            stop["sequences"][0]["exception"] = {"type": "vllm.v1.engine.exceptions.EngineDeadError", "message": "engine core died",
                                                 "traceback": ""}

    edit_json(copy, layout.STOP, ended)
    found = check(copy, "hidden_cap")
    assert found.status == "PASS", found.message
    word = "interrupted" if ended_by == "interrupted" else "ended by an exception"
    assert f"16 tokens is a power of two without EOS, but it is where the run was {word}, not a limit" in found.message
    assert found.evidence["sequence_0"] == {"count": 16, "reason": ended_by, "explained_by_event": True, "explained_by_request": False}


def test_eos_at_any_count_is_no_hidden_cap(snapshots) -> None:
    assert check(snapshots.get("eos"), "hidden_cap").status == "PASS"


def test_library_default_length_warns(snapshots) -> None:
    assert check(snapshots.get("eos"), "library_default_limit").status == "PASS"
    found = check(snapshots.get("default_length"), "library_default_limit")
    assert found.status == "WARN"
    assert "cut at 20 tokens by the library default max_length=26 (prompt 6 + 20)" in found.message


def test_output_cut_by_the_requested_budget_is_information_with_numbers(snapshots) -> None:
    assert check(snapshots.get("eos"), "budget_truncation").status == "PASS"
    found = check(snapshots.get("budget"), "budget_truncation")
    assert found.status == "PASS" and found.message.startswith("reached the limit set by the request")
    assert "cut by max_new_tokens: 8 of 8 new tokens (prompt 6, max_length 14)" in found.message
    assert found.evidence["budget_estimate"]["requested_units"] == 8


def test_output_cut_by_a_limit_from_the_model_config_warns_with_numbers(snapshots) -> None:
    found = check(snapshots.get("model_cap"), "budget_truncation")
    assert found.status == "WARN" and "the limit did not come from the request" in found.message
    assert "cut by max_new_tokens: 16 of 16 new tokens" in found.message


# --- frames ------------------------------------------------------------------------------------------------


def test_frames_short_of_the_requested_duration_warn_early_stop_naming_eos(snapshots) -> None:
    found = check(snapshots.get("frame_short"), "early_stop")
    assert found.status == "WARN"
    assert found.message.startswith("early_stop: produced 0.52 s of 4 s requested")
    assert "the model emitted EOS (id 2) at frame 12" in found.message


def test_frames_within_five_percent_pass(snapshots) -> None:
    found = check(snapshots.get("frame_ok"), "early_stop")
    assert found.status == "PASS" and "0.52 s of 0.5 s" in found.message
    assert check(snapshots.get("eos"), "early_stop").status == "SKIP"


def test_produced_seconds_that_do_not_match_the_ids_fail(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("frame_short"), tmp_path)
    edit_json(copy, layout.RESULT, lambda r: r.update(produced_seconds=4.0))
    assert check(copy, "early_stop").status == "FAIL"


def test_early_stop_counts_at_the_planned_rate_when_the_request_gives_none(snapshots, tmp_path: Path) -> None:
    """MusicGen-family plans take the rate from the codec (token-budget.json), not `[units] per_second`."""
    copy = copy_snapshot(snapshots.get("frame_short"), tmp_path)
    edit_json(copy, layout.REQUEST, lambda r: r["units"].update(per_second=None))
    edit_json(copy, layout.TOKEN_BUDGET, lambda b: b["domain"].update(frames_per_second=25.0, frames_per_second_source="model_codec"))
    found = check(copy, "early_stop")
    assert found.status == "WARN" and found.message.startswith("early_stop: produced 0.52 s of 4 s requested")
    assert found.evidence["per_second"] == 25.0


# --- progress stream -----------------------------------------------------------------------------------------


def test_progress_stream_with_a_gap_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_bytes(copy, layout.PROGRESS, lambda b: b"".join(line for i, line in enumerate(b.splitlines(keepends=True)) if i != 2))
    found = check(copy, "progress_stream")
    assert found.status == "FAIL" and "seq is not contiguous: record 2 has seq 3" in found.message


def test_progress_going_back_in_time_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)

    def rewind(data: bytes) -> bytes:
        lines = [orjson.loads(line) for line in data.splitlines()]
        lines[3]["t"] = 0.0
        return b"".join(orjson.dumps(line) + b"\n" for line in lines)

    edit_bytes(copy, layout.PROGRESS, rewind)
    found = check(copy, "progress_stream")
    assert found.status == "FAIL" and "t goes backwards at seq 3" in found.message


def test_progress_line_cut_mid_write_is_reported_not_fatal(snapshots, tmp_path: Path) -> None:
    """The killed run's stream plus half a record without a newline: what a kill mid-`write()` leaves."""
    copy = copy_snapshot(snapshots.killed(), tmp_path)
    partial = b'{"seq":99,"t":1.5,"generated":3,"rss_b'
    edit_bytes(copy, layout.PROGRESS, lambda b: b + partial)
    verification = verify_snapshot(copy)
    stream = finding(verification, "progress_stream")
    assert stream.status == "WARN" and f"cut off after {len(partial)} bytes (no newline)" in stream.message
    completeness = finding(verification, "completeness")
    assert completeness.status == "FAIL" and "the final line of progress.ndjson is cut off" in completeness.message


# --- saved text ----------------------------------------------------------------------------------------------


def test_saved_text_equals_the_decode_of_the_ids(snapshots) -> None:
    found = check(snapshots.get("eos"), "saved_text")
    assert found.status == "PASS" and found.evidence["decodes_compared"] == 2


def test_saved_text_that_differs_from_the_ids_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    edit_json(copy, layout.TOKEN_IDS_SUMMARY, lambda s: s["sequences"][0].update(text="11 10 9 8 7 6 5 4 3 2 1"))
    found = check(copy, "saved_text")
    assert found.status == "FAIL" and "sequence 0: text differs from the decode" in found.message


def test_saved_text_is_skipped_when_the_tokenizer_changed_since_the_run(snapshots) -> None:
    found = check(snapshots.get("tokenizer_moved"), "saved_text")
    assert found.status == "SKIP" and "the tokenizer changed since the run" in found.message


# --- sign-offs -----------------------------------------------------------------------------------------------


def test_signoffs_absent_skip_unsigned_pass_and_a_resealed_snapshot_fails(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("eos"), tmp_path)
    assert check(copy, "signoffs").message == "no sign-offs"
    signed = run_genrun("signoff", copy, "--decision", "accept", "--by", "tester@example.com")
    assert signed.returncode == 0, signed.stderr
    found = check(copy, "signoffs")
    assert found.status == "PASS" and "accept unsigned (tester@example.com)" in found.message
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("")
    strict = finding(verify_snapshot(copy, allowed_signers=allowed), "signoffs")
    assert strict.status == "WARN" and "carry no signature" in strict.message
    # Change a file and re-seal the manifest over it: the manifest check passes again, the sign-off cannot.
    from genrun.runner.store import seal_snapshot

    edit_bytes(copy, "outputs/sequence_0.txt", lambda b: b.replace(b"5", b"6", 1))
    for path in [copy / layout.MANIFEST]:
        path.chmod(0o644)
    seal_snapshot(copy)
    verification = verify_snapshot(copy)
    assert finding(verification, "manifest_integrity").status == "PASS"
    signoff = finding(verification, "signoffs")
    assert signoff.status == "FAIL" and "digest no longer matches" in signoff.message


# --- diffusion ------------------------------------------------------------------------------------------------


def test_diffusion_snapshot_skips_token_checks_and_checks_steps(snapshots) -> None:
    verification = verify_snapshot(snapshots.get("diffusion"))
    statuses = {f.name: f.status for f in verification.findings}
    for name in ("token_counts", "token_summary", "hidden_cap", "library_default_limit", "budget_truncation", "saved_text"):
        assert statuses[name] == "SKIP" and "the 'diffusers' backend declares no" in finding(verification, name).message
    for name in ("manifest_integrity", "limits_reached_config", "call_config", "stop_reasons", "stop_evidence", "diffusion_steps",
                 "outputs_listed", "progress_stream"):
        assert statuses[name] == "PASS", finding(verification, name)
    assert "completed after 4/4 steps" in finding(verification, "diffusion_steps").message
    assert verification.exit_code(strict=True) == 0


def test_diffusion_steps_short_of_the_plan_fail(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("diffusion"), tmp_path)
    edit_json(copy, layout.STOP, lambda s: s["sequences"][0].update(generated=3))
    found = check(copy, "diffusion_steps")
    assert found.status == "FAIL" and "'completed' after 3 of 4 planned steps" in found.message


def test_diffusion_steps_that_did_not_reach_the_pipeline_call_fail(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("diffusion"), tmp_path)
    edit_json(copy, layout.PIPELINE_CALL, lambda c: c["call_arguments"].update(num_inference_steps=50))
    found = check(copy, "limits_reached_config")
    assert found.status == "FAIL" and "num_inference_steps = 4 did not reach the pipeline call (call 50)" in found.message


def test_a_missing_call_config_of_a_succeeded_run_fails_by_its_declared_name(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("diffusion"), tmp_path)
    (copy / layout.PIPELINE_CALL).unlink()
    found = check(copy, "limits_reached_config")
    assert found.status == "FAIL" and found.message == f"no valid {layout.PIPELINE_CALL}: the call configuration was never recorded"


def test_steps_planned_are_checked_against_what_the_call_config_planned(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("diffusion"), tmp_path)
    edit_json(copy, layout.PIPELINE_CALL, lambda c: c.update(timesteps_planned=7))
    found = check(copy, "diffusion_steps")
    assert found.status == "FAIL" and "the stop file plans 4 steps, the call config 7" in found.message


def test_the_declared_call_config_is_read_typed_and_shown_as_its_model_declares(snapshots, tmp_path: Path) -> None:
    """One path for every backend's call config: the reader holds it typed (genrun's own model, as declared), report and
    diff take its heading, rows and section from that model, never from knowing the family."""
    from genrun.analysis._load import read_snapshot
    from genrun.analysis.diff import diff_snapshots
    from genrun.analysis.report import report_snapshot

    snap = read_snapshot(snapshots.get("diffusion"), hash_files=False)
    declared = snap.declaration.call_config
    assert declared is not None and type(snap.call_config).__name__ == declared.model.rsplit(":", 1)[1] == "PipelineCallBeforeCall"
    assert snap.call_config_json == orjson.loads((snap.path / declared.name).read_bytes())
    report = report_snapshot(snap.path)
    assert report.call_config_heading == "Pipeline call (as made)" and report.call_config_name == declared.name
    assert report.call_config is not None and report.call_config["pipeline_class"] == "DDIMPipeline"
    assert "schema_version" not in report.call_config and None not in report.call_config.values()
    assert report.call_config_shown is not None and "scheduler_config" not in report.call_config_shown
    assert "pipeline" not in report.model_dump(mode="json")  # no family field in the document
    lm = report_snapshot(snapshots.get("eos"))  # the generation_config kind shows its config call by call (the limits) instead
    assert lm.call_config is None and lm.limits
    copy = copy_snapshot(snapshots.get("diffusion"), tmp_path)
    edit_json(copy, declared.name, lambda c: c.update(guidance_scale=9.5))
    changes = diff_snapshots(snapshots.get("diffusion"), copy).effective_config
    assert [(c.path, c.b) for c in changes] == [("pipeline_call.guidance_scale", 9.5)]  # the section its model names


def test_every_registered_json_artifact_is_read_and_damage_to_any_is_named(snapshots, tmp_path: Path) -> None:
    """The reader is driven by the artifact registry: each JSON file it names is read with its model, including ones no
    check asks for by name (here `determinism.json`), so their damage is a problem, not silence."""
    from genrun.analysis._load import read_snapshot
    from genrun.schemas.artifacts import SNAPSHOT_ARTIFACTS, artifact_for

    source = snapshots.get("eos")
    snap = read_snapshot(source, hash_files=False)
    registered = {rel for rel in snap.files if (spec := artifact_for(rel, SNAPSHOT_ARTIFACTS)) is not None and spec.form == "json"
                  and spec.phase != "sign-off"}
    assert layout.DETERMINISM in registered and set(snap.artifacts) == registered
    assert all(isinstance(snap.artifacts[rel], artifact_for(rel, SNAPSHOT_ARTIFACTS).model) for rel in registered)
    copy = copy_snapshot(source, tmp_path)
    edit_json(copy, layout.DETERMINISM, lambda d: d.update(not_a_field=1))
    found = check(copy, "artifacts_valid")
    assert found.status == "FAIL" and f"{layout.DETERMINISM}:" in found.message and "not_a_field" in found.message


def test_diffusion_output_changed_after_sealing_fails_the_manifest(snapshots, tmp_path: Path) -> None:
    copy = copy_snapshot(snapshots.get("diffusion"), tmp_path)
    edit_bytes(copy, "outputs/image_0.png", lambda b: b[:-8] + bytes(8))
    found = check(copy, "manifest_integrity")
    assert found.status == "FAIL" and found.evidence["changed"] == ["outputs/image_0.png"]
