"""`determinism.json`: what bit-for-bit reproduction depends on.

The settings themselves come from the backend's runtime (`genrun.runner.runtime.Runtime.deterministic_mode`: torch's
switches for the torch backends, none for a backend that names no library); this module adds what the run's own
evidence says about sampling.
"""

from genrun.schemas import Determinism, GenerationConfigBeforeGenerate, layout
from genrun.snapshot_dir import SnapshotDir


def with_sampling(record: Determinism, snapshot: SnapshotDir) -> Determinism:
    """Fill `sampling` from the effective config generate wrote (`do_sample`); `None` when there is none (diffusers, a failed load)."""
    config = snapshot.read_optional(layout.GENERATION_CONFIG, GenerationConfigBeforeGenerate)
    if config is None:
        return record
    do_sample = config.effective.get("do_sample")
    return record.model_copy(update={"sampling": bool(do_sample) if do_sample is not None else None})
