"""`early_stop`'s verdict, one rule for every frame run: the recorded duration agrees with the frames, and is not short.

The transformers/MusicGen check (`_check_limits.check_early_stop`, frames from the saved ids or decoded audio) and the
staged-loop check (`_check_stages.stages_early_stop`, frames from a stage's counted units) differ in where the frames
come from and how the cause is found; from the frames on they judge alike, here.
"""

from collections.abc import Callable
from typing import Any

from ._finding import Examined, Finding

EARLY_STOP_FRACTION = 0.95
"""Frame outputs shorter than 95 % of the requested duration raise `early_stop`."""


def judge_produced_duration(requested: float, recorded: float | None, computed: float, per_second: float, *, frames_from: str,
                            cause: Callable[[], str], evidence: dict[str, Any], examined: Examined,
                            fraction: float = EARLY_STOP_FRACTION) -> Finding:
    """FAIL when result.json's `produced_seconds` is more than a frame off `computed` (the frames' duration, `frames_from`
    says whence), PASS at `fraction` of `requested` or more, else WARN naming `cause()` (only asked for then)."""
    name = "early_stop"
    if recorded is None or abs(recorded - computed) > 1.0 / per_second:
        return Finding(name=name, status="FAIL", message=f"result.json produced_seconds {recorded} != {computed:.3f} s from {frames_from}",
                       evidence=evidence, examined=examined)
    share = recorded / requested
    evidence["fraction"] = share
    if share >= fraction:
        return Finding(name=name, status="PASS", message=f"produced {recorded:.2f} s of {requested:g} s requested, {share:.0%} of it",
                       evidence=evidence, examined=examined)
    evidence["cause"] = why = cause()
    # the percentage is the produced share, said so, beside the threshold it fell under (never a bare "(40%, 5 % short)")
    return Finding(name=name, status="WARN", message=f"early_stop: produced {recorded:.2f} s of {requested:g} s requested, only "
                   f"{share:.1%} of it (early_stop warns below {fraction:.0%}); {why}", evidence=evidence, examined=examined)
