"""File names of the snapshot directory contract (DESIGN.md), shared by runner and analysis."""

REQUEST_SOURCE_PREFIX = "request.source"  # + ".toml" / ".json"
REQUEST = "request.json"
ENVIRONMENT = "environment.json"
CODE = "code.json"
MODEL = "model.json"
TOKEN_BUDGET = "token-budget.json"
FROZEN_MANIFEST = "frozen-sha256.txt"

GENERATION_CONFIG = "generation-config.before-generate.json"
PIPELINE_CALL = "pipeline-call.before-call.json"  # diffusers backend: the call as made
PROGRESS = "progress.ndjson"
TOKEN_IDS = "generated-token-ids.safetensors"
TOKEN_IDS_SUMMARY = "generated-token-ids.json"
STOP = "generation-stop.json"
RESULT = "result.json"
OUTPUTS_DIR = "outputs"
MANIFEST = "manifest-sha256.txt"
SIGNOFFS_DIR = "signoffs"

FROZEN_FILES = (REQUEST, ENVIRONMENT, CODE, MODEL, TOKEN_BUDGET)
"""Frozen at plan time besides the request source (whose extension varies)."""


def extra_generation_config_name(call_index: int) -> str:
    """Effective config of the outermost generate call `call_index` >= 1 (entry points calling generate twice)."""
    return f"generation-config.before-generate.{call_index}.json"

# -- sweeps (issue 14): a sweep snapshot is a directory of its own beside its items' snapshots ----
SWEEP_SOURCE_PREFIX = "sweep.source"  # + ".toml" / ".json": the sweep file exactly as given
SWEEP_BASE_REQUEST_PREFIX = "sweep.base-request.source"  # + ".toml" / ".json": the base request's bytes
SWEEP_DATASET = "sweep-dataset.jsonl"  # the dataset's bytes, when at most SWEEP_DATASET_COPY_LIMIT
SWEEP_DATASET_COPY_LIMIT = 64 << 20  # bytes; a larger dataset is frozen by its sha256 only
SWEEP_PLAN = "sweep-plan.json"
SWEEP_PROGRESS = "sweep-progress.ndjson"  # append-only: one line per attempt started / ended
SWEEP_RESULT = "sweep-result.json"
WORKER_MODEL = "worker-model.json"  # in an item snapshot: the worker's loaded-once model
