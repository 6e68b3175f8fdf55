"""The `loop` backend: record any generation loop (ONNX Runtime, MNN, hand-written), stage by stage."""

from .backend import LoopBackend, create_backend
from .recorder import LoopRecorder, RecorderMisuse, Stage

__all__ = ["LoopBackend", "LoopRecorder", "RecorderMisuse", "Stage", "create_backend"]
