"""Instrumentation of transformers' generate: effective config, per-row stop evidence, streamed ids.

`instrument_generate(session)` patches `GenerationMixin.generate` for a block; every outermost
call is recorded as a `CallCapture` in the `CaptureSession`; `stop_records` turns the captures
into `generation-stop.json` records. See `patch.py` for what is and is not reached.
"""

from .capture import CallCapture, CaptureSession, RowTokens
from .criteria import RecordingCriteriaList, RowCriteria
from .effective_config import build_before_generate
from .evidence import generation_calls
from .patch import instrument_generate, is_instrumented
from .stops import ClassifiedRow, classify_calls, stop_records

__all__ = [
    "CallCapture", "CaptureSession", "ClassifiedRow", "classify_calls", "RecordingCriteriaList", "RowCriteria", "RowTokens",
    "build_before_generate", "generation_calls", "instrument_generate", "is_instrumented", "stop_records",
]
