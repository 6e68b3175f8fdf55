"""The registry of verify's checks: each a small function `(Snapshot, CheckContext) -> Finding`.

Every check is pure (it reads only the loaded snapshot and the context), except `signoffs`,
which runs `ssh-keygen` to judge signatures. Order is the order of the report: integrity first,
then the request, the tokens and why generation stopped, then the stream, text and sign-offs.
"""

import traceback
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from genrun.schemas import EvidenceKind

from ._check_calls import check_call_evidence
from ._check_declared import check_call_config, check_stop_evidence
from ._check_diffusion import check_diffusion_steps
from ._check_inputs import check_input_coverage, check_input_files, check_processor_files
from ._check_integrity import (
    check_artifacts_valid,
    check_completeness,
    check_execution_identity,
    check_manifest_integrity,
    check_outputs_listed,
    check_plan_digest_chain,
)
from ._check_lineage import check_lineage
from ._check_limits import check_budget_truncation, check_early_stop, check_hidden_cap, check_library_default_limit, is_suspicious_count
from ._check_progress import check_progress_stream
from ._check_request import check_limits_reached_config, check_request_round_trip
from ._check_signoffs import check_signoffs
from ._check_stages import check_stages
from ._check_tokens import check_saved_text, check_stop_reasons, check_token_counts, check_token_summary
from ._context import CheckContext
from ._finding import Examined, Finding, skip
from ._load import Snapshot

Check = Callable[[Snapshot, CheckContext], Finding]


class CheckSpec(NamedTuple):
    """A registered check."""

    name: str
    """The finding name it reports."""
    run: Check
    needs: tuple[EvidenceKind, ...] = ()
    """Evidence kinds the check reads: where the snapshot's backend declares one of them not, `run_checks` SKIPs the check
    without running it (a check never asks which backend wrote the snapshot)."""

    @property
    def contract(self) -> str:
        """First line of the check's docstring: what it guarantees when it passes."""
        return (self.run.__doc__ or "").strip().splitlines()[0]


CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("completeness", check_completeness),
    CheckSpec("artifacts_valid", check_artifacts_valid),
    CheckSpec("manifest_integrity", check_manifest_integrity),
    CheckSpec("plan_digest_chain", check_plan_digest_chain),
    CheckSpec("execution_identity", check_execution_identity),
    CheckSpec("input_files", check_input_files),
    CheckSpec("processor_files", check_processor_files),
    CheckSpec("request_round_trip", check_request_round_trip),
    CheckSpec("input_coverage", check_input_coverage),
    CheckSpec("limits_reached_config", check_limits_reached_config),
    CheckSpec("call_config", check_call_config),
    CheckSpec("token_counts", check_token_counts, ("token_ids",)),
    CheckSpec("token_summary", check_token_summary, ("token_ids",)),
    CheckSpec("stop_reasons", check_stop_reasons),
    CheckSpec("stop_evidence", check_stop_evidence),
    CheckSpec("call_evidence", check_call_evidence, ("generation_calls",)),
    CheckSpec("hidden_cap", check_hidden_cap, ("token_ids",)),
    CheckSpec("library_default_limit", check_library_default_limit, ("generation_config",)),
    CheckSpec("budget_truncation", check_budget_truncation, ("token_ids",)),
    CheckSpec("early_stop", check_early_stop),
    CheckSpec("diffusion_steps", check_diffusion_steps, ("diffusion_steps",)),
    CheckSpec("stages", check_stages, ("stages",)),
    CheckSpec("progress_stream", check_progress_stream),
    CheckSpec("saved_text", check_saved_text, ("token_ids",)),
    CheckSpec("outputs_listed", check_outputs_listed),
    CheckSpec("signoffs", check_signoffs),
    CheckSpec("lineage", check_lineage),
)
"""Every check verify runs, in report order."""


def run_checks(snap: Snapshot, ctx: CheckContext, checks: Sequence[CheckSpec] = CHECKS) -> list[Finding]:
    """Run each check; a check that raises on a damaged snapshot becomes a FAIL naming the exception (never a crash, never hidden)."""
    findings = []
    for spec in checks:
        undeclared_kind = next((kind for kind in spec.needs if not snap.declares(kind)), None)
        try:
            finding = spec.run(snap, ctx) if undeclared_kind is None else skip(spec.name, undeclared(snap, undeclared_kind))
        except Exception as exc:  # a damaged snapshot must produce a report, not a traceback; the FAIL carries the traceback
            finding = Finding(name=spec.name, status="FAIL", message=f"the check could not run on this snapshot: {type(exc).__name__}: {exc}",
                              evidence={"traceback": traceback.format_exc()}, examined=Examined())
        findings.append(bounded(finding).model_copy(update={"name": spec.name}))
    return findings


def undeclared(snap: Snapshot, kind: EvidenceKind) -> str:
    """The SKIP message of a check whose evidence kind the snapshot's backend did not declare."""
    declared = snap.declaration
    return (f"the {declared.backend!r} backend declares no {kind} evidence (it declares {', '.join(declared.evidence)}); "
            f"its outputs are checked through the manifest")


MESSAGE_CHARS = 4000
"""Characters of a finding's message shown at most: a hostile snapshot can make a check find millions of problems."""
EVIDENCE_ITEMS = 10_000
"""Entries of any one list or mapping in a finding's evidence kept at most (a real batch of rows is far smaller)."""


def bounded(finding: Finding) -> Finding:
    """The finding with its message and evidence cut to `MESSAGE_CHARS` / `EVIDENCE_ITEMS`, saying how much was left out."""
    message = finding.message
    if len(message) > MESSAGE_CHARS:
        message = f"{message[:MESSAGE_CHARS]}… ({len(message) - MESSAGE_CHARS:,} more characters not shown)"
    return finding.model_copy(update={"message": message, "evidence": _bounded_value(finding.evidence)})


def _bounded_value(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {key: _bounded_value(item) for key, item in list(value.items())[:EVIDENCE_ITEMS]}
        if len(value) > EVIDENCE_ITEMS:
            kept["…"] = f"{len(value) - EVIDENCE_ITEMS:,} more entries not shown"
        return kept
    if isinstance(value, (list, tuple)):
        kept_items = [_bounded_value(item) for item in value[:EVIDENCE_ITEMS]]
        kept_items += [f"… {len(value) - EVIDENCE_ITEMS:,} more not shown"] if len(value) > EVIDENCE_ITEMS else []
        return type(value)(kept_items)
    return value


__all__ = ["CHECKS", "Check", "CheckContext", "CheckSpec", "is_suspicious_count", "run_checks"]
