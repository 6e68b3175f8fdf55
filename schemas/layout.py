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

# -- media inputs (issue 12): present only when [input] names files ---------------------------------
INPUTS_DIR = "inputs"  # frozen copies of the media files, `inputs/<row>-<kind>-<name>`
INPUT_FILES = "input-files.json"  # frozen at plan time: path, size, sha256 and header facts of each file
INPUT_PREPARATION = "input-preparation.json"  # written before generate: what the model actually received
PROMPT_TOKEN_IDS = "prompt-token-ids.safetensors"  # beside it: `prompt_<row>` int64, the unpadded prompt ids

FROZEN_FILES = (REQUEST, ENVIRONMENT, CODE, MODEL, TOKEN_BUDGET)
"""Frozen at plan time besides the request source (whose extension varies)."""


def extra_generation_config_name(call_index: int) -> str:
    """Effective config of the outermost generate call `call_index` >= 1 (entry points calling generate twice)."""
    return f"generation-config.before-generate.{call_index}.json"
