"""`result.json`: how the run ended, how long each phase took, how much memory it used."""


from ._base import Strict
from ._versioning import Versioned
from .layout import RunStatus
from .progress import Unit
from .stop import ExceptionInfo

__all__ = ["ExecutionIdentity", "PeakMemory", "Phases", "Result", "RunStatus", "Timings", "describe_produced"]


class Phases(Strict):
    """Where `total_s` went: the execution's consecutive phases, seconds; the ones it reached sum to `total_s`.

    `None`: the run never reached that phase (a refused or failed step before it), or, for `load_s`, reused a model
    loaded before it (`Timings.load_s` then gives that earlier load's duration). Sealing (the manifest) comes after
    `result.json` and is in no phase.
    """

    checks_s: float | None
    """Re-verifying the frozen plan, genrun's code and the model's files (sha256, through the hash cache) and any approval."""
    imports_s: float | None
    """Importing the backend's module; its libraries (torch, transformers, ...) are imported by the first phase that uses them (`prepare` or `load`)."""
    prepare_s: float | None
    """Holding the sealing reserve, opening `progress.ndjson` and `outputs/`, deterministic mode, the backend's `start`."""
    load_s: float | None
    """Loading the model in this run (`None` when a loaded model was reused)."""
    generate_s: float | None
    """The backend's `generate`: preparing inputs, then generation itself (`first_token_s` + `decode_s` of it)."""
    evidence_s: float | None
    """Writing the evidence: the backend's ids and outputs, the terminal event, `determinism.json`, the stop records."""


class Timings(Strict):
    """Wall-clock phases, seconds."""

    load_s: float | None
    """Loading weights and tokenizer."""
    first_token_s: float | None
    """From the start of generation to the first unit."""
    decode_s: float | None
    """From the first unit to the end of generation."""
    total_s: float
    """The whole execution, from `execute` being called to `result.json` (sealing follows)."""
    phases: Phases | None = None
    """The phases `total_s` is made of (`None` in files written before they were recorded)."""


class PeakMemory(Strict):
    """Peaks over the run."""

    rss_bytes: int | None
    """Peak resident set size of the process (`ru_maxrss`)."""
    cuda_allocated_bytes: int | None
    """Peak CUDA allocation."""
    cuda_reserved_bytes: int | None
    """Peak CUDA reservation."""


class ExecutionIdentity(Strict):
    """Identities re-computed at execution, compared with the frozen ones."""

    code_digest: str
    """`code.json` genrun digest at execution."""
    model_digest: str
    """`model.json` digest at execution."""
    plan_digest: str
    """sha256 of `frozen-sha256.txt` when execution started."""


class Result(Versioned):
    """`result.json`."""

    status: RunStatus
    """`succeeded` whatever the stop reason, `failed` on an exception, `interrupted` on a signal."""
    exit_code: int
    """Process exit code genrun returns."""
    unit: Unit
    """Unit of `generated`."""
    generated: int
    """Units generated over all rows."""
    generated_tokens: int
    """Tokens generated over all rows (equals `generated` for token units)."""
    units_per_s: float | None
    """generated / decode time: summed over all rows."""
    produced_seconds: float | None
    """Frame units: produced duration of the longest row."""
    requested_seconds: float | None
    """Frame units: requested duration."""
    timings: Timings
    """Phase timings."""
    peak_memory: PeakMemory
    """Memory peaks."""
    exception: ExceptionInfo | None
    """The exception that failed the run."""
    signal: str | None
    """The signal that interrupted the run."""
    execution_identity: ExecutionIdentity
    """Identities at execution."""
    outputs: tuple[str, ...]
    """Files written under `outputs/`."""
    forced: bool
    """Pre-flight refusals were overridden."""
    notes: tuple[str, ...] = ()
    """Remarks the backend recorded (nested generate calls seen, signals after the first, ...)."""
    rows: int | None = None
    """Rows generated in parallel (the most sequences of one generate call in generation-stop.json); None in files written
    before it was recorded; older files count every sequence, sequential calls included."""
    units_per_s_per_row: float | None = None
    """Units of the furthest row / decode time: the per-row rate progress.ndjson and the plot show."""


def describe_produced(result: Result) -> str | None:
    """`produced 0.40 s of 1 s requested` for a frame-unit run (`None` otherwise): the run summary's and the report's words."""
    if result.produced_seconds is None:
        return None
    requested = f" of {result.requested_seconds:g} s requested" if result.requested_seconds is not None else ""
    return f"produced {result.produced_seconds:.2f} s{requested}"
