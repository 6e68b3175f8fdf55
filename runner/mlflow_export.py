"""`genrun export SNAPSHOT --mlflow`: one MLflow run per snapshot, made after the fact from what the snapshot recorded.

Nothing is logged during generation: an MLflow call costs milliseconds, which on a small model
is a large share of each token's time. Instead the progress stream is replayed here with its
real timestamps (the start record's wall time + each record's `t`), so MLflow's charts show the
run as it happened. Params come from the effective configuration, tags carry the state, stop
reasons and digests, and every file of the snapshot that the artifact registry lists is uploaded
under `snapshot/` (the disk reserve a killed run may leave, and files no registry entry names, are not).

Needs the optional extra: `pip install 'genrun[mlflow]'`.
"""

import contextlib
import logging
import stat
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from genrun.analysis import Snapshot, read_snapshot
from genrun.schemas import StartEvent
from genrun.schemas.artifacts import artifact_for
from genrun.snapshot_dir import SnapshotDir

from .errors import GenrunError, SnapshotError

DEFAULT_EXPERIMENT = "genrun"
TAG_PREFIX = "genrun."
ARTIFACT_DIR = "snapshot"
PARAM_VALUE_LIMIT = 6000  # characters; MLflow refuses longer param values
BATCH_PARAMS, BATCH_METRICS = 100, 1000  # MLflow's log_batch limits per call
PROGRESS_METRICS = ("generated", "units_per_s", "window_units_per_s", "rss_bytes", "cuda_allocated_bytes", "cuda_reserved_bytes")
"""Fields of progress records logged as metrics (step = units generated so far)."""
MLFLOW_MISSING = "MLflow is not installed: pip install 'genrun[mlflow]' (or pip install mlflow)"


class ExportError(GenrunError):
    """The snapshot cannot be exported (not run yet, already exported, MLflow missing or refusing)."""


class ExportedRun(NamedTuple):
    """Where the snapshot went."""

    run_id: str
    experiment_id: str
    tracking_uri: str
    params: int
    metrics: int
    """Metric values logged (progress replay + summary)."""
    artifacts: int
    """Files uploaded."""
    skipped: tuple[str, ...] = ()
    """Files of the snapshot no artifact registry entry names (relative paths): not uploaded."""
    artifact_uri: str = ""
    """Where MLflow stored the uploaded files (the experiment's artifact location, then the run's folder)."""


def export_to_mlflow(snapshot_dir: str | Path, tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT,
                     again: bool = False, artifact_location: str | None = None) -> ExportedRun:
    """Create one MLflow run for the snapshot (refused when one exists for it, unless `again`).

    `artifact_location` is where a *new* experiment stores its files (MLflow's default is `./mlruns`
    in the current directory); MLflow fixes it when the experiment is created.
    """
    try:
        import mlflow
        import mlflow.entities  # noqa: F401 (the whole client is needed; a partial install fails here, with the fix)
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ExportError(MLFLOW_MISSING) from None
    with _mlflow_info_quieted():
        return _export(mlflow, MlflowClient, snapshot_dir, tracking_uri, experiment, again, artifact_location)


@contextlib.contextmanager
def _mlflow_info_quieted() -> Iterator[None]:
    """MLflow and its database migrations log INFO lines ("Creating initial MLflow database tables") through their own
    handlers; an export reports in one line of its own, so only their warnings and errors get through."""
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)


def _export(mlflow: Any, client_class: Any, snapshot_dir: str | Path, tracking_uri: str | None, experiment: str, again: bool,
            artifact_location: str | None) -> ExportedRun:
    from mlflow.entities import Metric, Param
    from genrun.analysis import SnapshotNotFound

    try:
        snap = read_snapshot(snapshot_dir, hash_files=False)
    except SnapshotNotFound as exc:
        raise SnapshotError(str(exc)) from None
    if snap.progress is None or not snap.progress.events:
        raise ExportError(f"{snap.path} has no progress records (planned, never executed): run 'genrun execute {snap.path}' first")
    uri = tracking_uri or mlflow.get_tracking_uri()
    client = client_class(tracking_uri=uri)
    experiment_id = _experiment_id(client, experiment, artifact_location)
    if not again:
        existing = client.search_runs([experiment_id], filter_string=f"tags.`{TAG_PREFIX}snapshot_id` = '{snap.id}'", max_results=1)
        if existing:
            raise ExportError(f"{snap.id} is already exported as MLflow run {existing[0].info.run_id} in experiment '{experiment}'; "
                              "pass --again to create another run")
    start_ms, end_ms = _run_times(snap)
    tags = tags_of(snap)
    run = client.create_run(experiment_id, start_time=start_ms, tags=tags, run_name=snap.id)
    run_id = run.info.run_id
    try:
        params = [Param(k, v) for k, v in params_of(snap).items()]
        metrics = [Metric(k, v, ts, step) for k, v, ts, step in metrics_of(snap, start_ms, end_ms)]
        for batch in _chunks(params, BATCH_PARAMS):
            client.log_batch(run_id, params=batch)
        for batch in _chunks(metrics, BATCH_METRICS):
            client.log_batch(run_id, metrics=batch)
        uploads, skipped = artifact_files(snap.path)
        for rel in uploads:
            folder = "/".join([ARTIFACT_DIR, *rel.split("/")[:-1]])
            client.log_artifact(run_id, str(snap.path / rel), artifact_path=folder)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status=_mlflow_status(snap), end_time=end_ms)
    return ExportedRun(run_id, experiment_id, uri, len(params), len(metrics), len(uploads), tuple(skipped), run.info.artifact_uri)


def artifact_files(snapshot_dir: Path) -> tuple[list[str], list[str]]:
    """(files to upload, files skipped), relative paths in sorted order: the registry decides what is evidence
    (regular files only; links are never followed)."""
    uploads: list[str] = []
    skipped: list[str] = []
    for rel, st in sorted(SnapshotDir(snapshot_dir).entries()):
        if not stat.S_ISREG(st.st_mode):
            continue
        spec = artifact_for(rel)
        if spec is None:
            skipped.append(rel)
        elif not spec.transient:
            uploads.append(rel)
    return uploads, skipped


def params_of(snap: Snapshot) -> dict[str, str]:
    """Flat `section.key` -> value: the request, then the effective generation config as generate used it."""
    found: dict[str, Any] = {}
    if snap.request_json is not None:
        found.update(_flatten(snap.request_json, "request"))
    for cfg in snap.generation_configs:
        prefix = "effective" if cfg.call_index == 0 else f"effective.call{cfg.call_index}"
        found.update(_flatten(dict(cfg.effective), prefix))
        found.update(_flatten(dict(cfg.limit_sources), f"{prefix}_source"))
    if snap.budget is not None:
        found.update(_flatten({k: v for k, v in snap.budget.model_dump(mode="json").items() if not isinstance(v, (dict, list))}, "budget"))
    return {k: _param_value(v) for k, v in found.items()}


def tags_of(snap: Snapshot) -> dict[str, str]:
    """State, stop reasons, digests and identity, under `genrun.`."""
    state = snap.result.status if snap.result is not None else "incomplete"
    tags = {"snapshot_id": snap.id, "state": state, "sealed": str(snap.is_sealed).lower()}
    if snap.stop is not None:
        reasons = [s.reason for s in snap.stop.sequences]
        tags["stop_reasons"] = ",".join(sorted(set(reasons))) or "none"
        tags.update({f"stop_reason.row{s.index}": s.reason for s in snap.stop.sequences[:32]})
    for name, value in (("plan_digest", snap.plan_digest), ("snapshot_digest", snap.snapshot_digest),
                        ("model_digest", snap.model.digest if snap.model else None),
                        ("code_digest", snap.code.genrun.digest if snap.code else None),
                        ("exit_code", snap.result.exit_code if snap.result else None), ("unit", snap.unit),
                        ("backend", snap.request.model.backend if snap.request else None)):
        if value is not None:
            tags[name] = str(value)
    return {TAG_PREFIX + k: v for k, v in tags.items()} | {"mlflow.source.name": "genrun"}


def metrics_of(snap: Snapshot, start_ms: int, end_ms: int) -> Iterator[tuple[str, float, int, int]]:
    """(key, value, timestamp ms, step): every progress record at its real time, then result.json's summary at the end."""
    events = snap.progress.events if snap.progress else ()
    origin = events[0].t if events else 0.0
    for e in events:
        at = start_ms + round((e.t - origin) * 1000)
        for key in PROGRESS_METRICS:
            value = getattr(e, key, None)
            if value is not None:
                yield f"progress.{key}", float(value), at, e.generated
    if snap.result is not None:
        r = snap.result
        summary = {"generated": r.generated, "generated_tokens": r.generated_tokens, "units_per_s": r.units_per_s,
                   "load_s": r.timings.load_s, "first_token_s": r.timings.first_token_s, "decode_s": r.timings.decode_s,
                   "total_s": r.timings.total_s, "peak_rss_bytes": r.peak_memory.rss_bytes,
                   "peak_cuda_allocated_bytes": r.peak_memory.cuda_allocated_bytes, "produced_seconds": r.produced_seconds}
        final_step = max((e.generated for e in events), default=0)
        for key, value in summary.items():
            if value is not None:
                yield f"result.{key}", float(value), end_ms, final_step


def _run_times(snap: Snapshot) -> tuple[int, int]:
    """Start and end of the run in ms since the epoch, from the start record's wall time and the last record's `t`."""
    events = snap.progress.events if snap.progress is not None else ()
    start = next((e for e in events if isinstance(e, StartEvent)), None)
    if start is None:
        raise ExportError(f"{snap.path}: progress.ndjson has no 'start' record, so the run's times are unknown; check with 'genrun verify'")
    start_ms = round(datetime.fromisoformat(start.wall_time).timestamp() * 1000)
    return start_ms, start_ms + round((events[-1].t - start.t) * 1000)


def _experiment_id(client: Any, name: str, artifact_location: str | None) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage != "active":
            raise ExportError(f"MLflow experiment '{name}' is deleted; restore it in MLflow or pass --experiment with another name")
        if artifact_location is not None and _same_location(found.artifact_location, artifact_location) is False:
            raise ExportError(f"--artifact-location {artifact_location}: MLflow experiment '{name}' already stores its artifacts at "
                              f"{found.artifact_location} (fixed when it was created); pass --experiment with a new name to use another place")
        return found.experiment_id
    return client.create_experiment(name, artifact_location=_location_uri(artifact_location))


def _location_uri(location: str | None) -> str | None:
    """A plain path becomes an absolute file: URI (MLflow would resolve a relative one against its own working directory)."""
    if location is None or "://" in location or location.startswith("file:"):
        return location
    return Path(location).expanduser().absolute().as_uri()


def _same_location(existing: str, wanted: str) -> bool:
    return existing.rstrip("/") == (_location_uri(wanted) or "").rstrip("/")


def _mlflow_status(snap: Snapshot) -> str:
    if snap.result is None:
        return "KILLED"
    return {"succeeded": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}[snap.result.status]


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat.update(_flatten(inner, f"{prefix}.{key}"))
        return flat
    return {prefix: value}


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= PARAM_VALUE_LIMIT else text[: PARAM_VALUE_LIMIT - 1] + "…"


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
