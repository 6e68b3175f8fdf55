"""THE snapshot format: every file and row name, constant, version and state of a snapshot directory.

Writer (`genrun.runner`) and reader (`genrun.analysis`) both take names and constants from here
(or from the schema modules re-exported here), never from a copy of their own; the reader still
checks the facts independently. Torch-free and pure: nothing here reads or writes a snapshot.
The list of every file, with its model, phase, meaning and writers, is `genrun.schemas.artifacts`
(it imports these names); `docs/snapshot-format.md` is generated from both (`genrun schema`).
"""

import importlib
import re
from collections.abc import Callable, Collection, Mapping
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

# Re-exported so that `layout` is the one import for every format fact (versions, units, request decoding, stops), and
# imported when first asked for (`__getattr__` below): those modules define pydantic models, whose import is half of the
# start-up of a command that needs none of them (`genrun ls` reads names and constants only).
if TYPE_CHECKING:
    from ._versioning import FORMAT_HISTORY, FORMAT_VERSION, NewerFormat, newer_format_message, recorded_genrun_version
    from .progress import Unit
    from .request_source import REQUEST_SOURCE_FORMATS, RequestSourceError, decode_request_source
    from .stop import STOP_REASON_MEANING, StopReason, describe_stop

_REEXPORTED = {
    "._versioning": ("FORMAT_HISTORY", "FORMAT_VERSION", "NewerFormat", "newer_format_message", "recorded_genrun_version"),
    ".progress": ("Unit",),
    ".request_source": ("REQUEST_SOURCE_FORMATS", "RequestSourceError", "decode_request_source"),
    ".stop": ("STOP_REASON_MEANING", "StopReason", "describe_stop"),
}
_MODULE_OF = {name: module for module, names in _REEXPORTED.items() for name in names}


def __getattr__(name: str) -> Any:
    """A re-exported name, from its module (imported now, once: the name is then kept here)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __package__), name)
    globals()[name] = value
    return value


# -- plan: frozen by `genrun plan`, covered by frozen-sha256.txt --------------------------------------------------
REQUEST_SOURCE_PREFIX = "request.source"  # + ".toml" / ".json"
REQUEST = "request.json"
ENVIRONMENT = "environment.json"
CODE = "code.json"
MODEL = "model.json"
TOKEN_BUDGET = "token-budget.json"
FROZEN_MANIFEST = "frozen-sha256.txt"
LINEAGE = "lineage.json"  # rerun children only: parent, changes, why (frozen with the plan)
BACKEND = "backend.json"  # format 3+: the backend and the evidence it declares (older snapshots: derived in memory)

# -- execute: written by `genrun execute` ---------------------------------------------------------------------------
GENERATION_CONFIG = "generation-config.before-generate.json"
PIPELINE_CALL = "pipeline-call.before-call.json"  # diffusers backend: the call as made (its declaration names it; format 1/2 is read by it)
PROGRESS = "progress.ndjson"
TOKEN_IDS = "generated-token-ids.safetensors"
TOKEN_IDS_SUMMARY = "generated-token-ids.json"
STOP = "generation-stop.json"
GENERATION_CALLS = "generation-calls.json"  # transformers backend: path and evidence level of each generate call
RESULT = "result.json"
STAGES = "stages.json"  # `stages` evidence: each stage of a staged run (unit, rows, counts, consumption, time, memory)
STAGE_IDS = "stage-ids.json"  # `stages` evidence: the ids each stage emitted, per row
STAGE_PROGRESS = "stage-progress.ndjson"  # `stages` evidence: append-only start / progress / end per stage
DETERMINISM = "determinism.json"  # what reproduction depends on, as it was during generation
RUN_LOG = "run-log.ndjson"  # what libraries (and user code) wrote to stdout/stderr during execution; absent when nothing was
OUTPUTS_DIR = "outputs"

DISK_RESERVE = ".genrun-disk-reserve"
"""Space held during execution so a full disk still leaves room for the evidence; removed before the seal."""

# -- seal and sign-off ----------------------------------------------------------------------------------------------
MANIFEST = "manifest-sha256.txt"
SIGNOFFS_DIR = "signoffs"

# -- media inputs: present only when [input] names files -------------------------------------------
INPUTS_DIR = "inputs"  # frozen copies of the media files, `inputs/<row>-<kind>-<name>`
INPUT_FILES = "input-files.json"  # frozen at plan time: path, size, sha256 and header facts of each file
INPUT_PREPARATION = "input-preparation.json"  # written before generate: what the model actually received
PROMPT_TOKEN_IDS = "prompt-token-ids.safetensors"  # beside it: `prompt_<row>` int64, the unpadded prompt ids
PROCESSOR_DIR = "processor"  # frozen copy of a `[model] processor` directory (listed in frozen-sha256.txt), loaded by execute

FROZEN_FILES = (REQUEST, ENVIRONMENT, CODE, MODEL, TOKEN_BUDGET)
"""Frozen at plan time besides the request source (whose extension varies)."""
OPTIONAL_FROZEN_FILES = (LINEAGE, BACKEND)
"""Frozen at plan time when present (only rerun children have a lineage; snapshots before format 3 have no `backend.json`)."""

EXECUTION_FILES = (GENERATION_CONFIG, PIPELINE_CALL, PROGRESS, TOKEN_IDS, TOKEN_IDS_SUMMARY, STOP, RESULT)
"""Written by execution (besides `outputs/` and further generation configs); any of them means it started."""

# -- constants of the artifacts' content -----------------------------------------------------------------------------
LAST_IDS_KEPT = 64
"""`generated-token-ids.json` keeps the last this-many ids of each row."""

LIBRARY_DEFAULT_NEW_TOKENS = 20
"""transformers 5.x: with neither `max_new_tokens` nor `max_length` set, `max_length` = prompt + 20."""

Phase = Literal["plan", "execute", "seal", "sign-off"]
"""When a file is written: `genrun plan`, `genrun execute`, the seal at the end of execute, `genrun signoff`.
Every file with its phase, model, meaning and writers is listed once, in `genrun.schemas.artifacts`."""


_SEQUENCE = re.compile(r"^sequence_(0|[1-9][0-9]{0,17})$")  # a row index: at most 18 digits (int64), never a 5000-digit key
_EXTRA_GENERATION_CONFIG = re.compile(r"^generation-config\.before-generate\.(\d+)\.json$")


def request_source_name(fmt: str) -> str:
    """`request.source.toml` / `request.source.json`: the request bytes exactly as given."""
    return f"{REQUEST_SOURCE_PREFIX}.{fmt}"


def is_request_source(name: str) -> bool:
    """`request.source.<ext>`."""
    return name.startswith(REQUEST_SOURCE_PREFIX + ".")


def sequence_name(index: int) -> str:
    """`sequence_<index>`: the safetensors key of row `index` (and the stem of its text output)."""
    return f"sequence_{index}"


def sequence_index(name: str) -> int | None:
    """The row index of a `sequence_<i>` key, `None` for any other name."""
    match = _SEQUENCE.match(name)
    return int(match.group(1)) if match else None


def sequence_text_name(index: int) -> str:
    """`sequence_<i>.txt` under `outputs/`: the row decoded without special tokens."""
    return f"{sequence_name(index)}.txt"


def sequence_text_path(index: int) -> str:
    """`outputs/sequence_<i>.txt`, relative to the snapshot."""
    return f"{OUTPUTS_DIR}/{sequence_text_name(index)}"


def generation_config_name(call_index: int) -> str:
    """The effective config of outermost generate call `call_index`: `generation-config.before-generate.json` for the
    first (0), `...before-generate.<i>.json` for each further one (entry points calling generate more than once)."""
    return GENERATION_CONFIG if call_index == 0 else GENERATION_CONFIG.replace(".json", f".{call_index}.json")


def generation_config_call_index(name: str) -> int | None:
    """0 for `generation-config.before-generate.json`, i for `...before-generate.<i>.json`, else `None`."""
    if name == GENERATION_CONFIG:
        return 0
    match = _EXTRA_GENERATION_CONFIG.match(name)
    return int(match.group(1)) if match else None


# -- snapshot state ---------------------------------------------------------------------------------------------------
PLANNING_PREFIX = ".tmp-"
"""A plan is frozen in `<store>/.tmp-*` and renamed into place; its planner holds an exclusive `flock` on that
directory while it lives, so a `.tmp-*` directory nobody holds was left by a killed planner (`abandoned`)."""


class SnapshotState(str, Enum):
    """Where a snapshot is in its life, derived from the files present (see `snapshot_state`); `abandoned` also
    needs the planner's lock (a `.tmp-*` directory no process holds), and a started run whose execution lock no
    process holds is `incomplete`, not `running` (readers that can see the lock say so: `ls`, `watch`, `verify`)."""

    PLANNING = "planning"
    ABANDONED = "abandoned"
    PLANNED = "planned"
    RUNNING = "running"
    INCOMPLETE = "incomplete"
    SEALED = "sealed"


STATE_MEANING: Mapping[SnapshotState, str] = MappingProxyType({
    SnapshotState.PLANNING: "a `.tmp-*` directory without `frozen-sha256.txt` yet, locked by its planner: the plan is being frozen",
    SnapshotState.ABANDONED: "a `.tmp-*` directory no planner holds (killed while planning): never a plan; `genrun gc --yes` removes it",
    SnapshotState.PLANNED: "frozen, not executed: no execution file yet",
    SnapshotState.RUNNING: "execution started, no `result.json` yet, and a process holds its execution lock: still running",
    SnapshotState.INCOMPLETE: "never sealed and no process executes it any more (`result.json` written but no seal, or no process "
                              "holds the execution lock of a started run): never `succeeded`, its files are not protected",
    SnapshotState.SEALED: "`manifest-sha256.txt` present (the seal is written last): complete and protected",
})
"""State -> what it means (shown by the format doc)."""


def snapshot_state(names: Collection[str]) -> SnapshotState:
    """The state from the relative paths present in the snapshot directory.

    Sealed means `manifest-sha256.txt` is present: it is written last, after every other file.
    An unsealed snapshot with `result.json` is `incomplete`, never `succeeded`.
    """
    if MANIFEST in names:
        return SnapshotState.SEALED
    if FROZEN_MANIFEST not in names:
        return SnapshotState.PLANNING
    if RESULT in names:
        return SnapshotState.INCOMPLETE
    started = any(n in EXECUTION_FILES or n.startswith(OUTPUTS_DIR + "/") or generation_config_call_index(n) is not None for n in names)
    return SnapshotState.RUNNING if started else SnapshotState.PLANNED


RunStatus = Literal["succeeded", "failed", "interrupted"]
"""How a run ended: `result.json`'s `status` (`genrun.schemas.result.Result`)."""


def shown_status(state: SnapshotState, result_status: str | None) -> str:
    """What every tool shows for a snapshot: the result's status (succeeded / failed / interrupted) only once sealed.

    An unsealed snapshot shows its state (`planning`, `planned`, `running`, `incomplete`) whatever its
    `result.json` says: the only way to `succeeded` is the manifest, written last. A sealed snapshot whose
    result cannot be read shows `sealed` (verify names the damage).
    """
    if state is SnapshotState.SEALED:
        return result_status or state.value
    return state.value


# -- the frozen-manifest check ----------------------------------------------------------------------------------------
class FrozenCheck(NamedTuple):
    """How the files now compare with `frozen-sha256.txt`; every tuple empty means the plan is intact."""

    not_frozen: tuple[str, ...]
    """Files that must be frozen (the `FROZEN_FILES` and the request source) but are not listed."""
    missing: tuple[str, ...]
    """Listed but no longer present."""
    changed: tuple[str, ...]
    """Present with a sha256 other than the frozen one."""

    @property
    def intact(self) -> bool:
        """Nothing missing, unlisted or changed."""
        return not (self.not_frozen or self.missing or self.changed)


def check_frozen(frozen: Mapping[str, str], request_sources: Collection[str], digest_of: Callable[[str], str | None]) -> FrozenCheck:
    """Compare `frozen-sha256.txt` entries with the files: `digest_of(rel)` is the current sha256, `None` if absent.

    `request_sources` are the `request.source.<ext>` files present (their extension varies).
    """
    # An optional frozen file (a rerun's lineage) that is present must be frozen: added later, it is no evidence.
    present_optional = [name for name in OPTIONAL_FROZEN_FILES if name in frozen or digest_of(name) is not None]
    required = [*FROZEN_FILES, *request_sources, *present_optional]
    not_frozen = tuple(sorted(name for name in required if name not in frozen))
    current = {rel: digest_of(rel) for rel in sorted(frozen)}
    missing = tuple(rel for rel, digest in current.items() if digest is None)
    changed = tuple(rel for rel, digest in current.items() if digest is not None and digest != frozen[rel])
    return FrozenCheck(not_frozen, missing, changed)


# -- sweeps: a sweep snapshot is a directory of its own beside its items' snapshots ---------------
SWEEP_SOURCE_PREFIX = "sweep.source"  # + ".toml" / ".json": the sweep file exactly as given
SWEEP_BASE_REQUEST_PREFIX = "sweep.base-request.source"  # + ".toml" / ".json": the base request's bytes
SWEEP_DATASET = "sweep-dataset.jsonl"  # the dataset's bytes, when at most SWEEP_DATASET_COPY_LIMIT
SWEEP_DATASET_COPY_LIMIT = 64 << 20  # bytes; a larger dataset is frozen by its sha256 only
SWEEP_PLAN = "sweep-plan.json"
SWEEP_PROGRESS = "sweep-progress.ndjson"  # append-only: one line per attempt started / ended
SWEEP_RESULT = "sweep-result.json"
WORKER_MODEL = "worker-model.json"  # in an item snapshot: the worker's loaded-once model
