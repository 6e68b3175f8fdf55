"""Pydantic models for requests and every snapshot artifact. Imports neither torch nor transformers.

The names below are imported on first use (PEP 562): building ~100 pydantic models costs a quarter of a second, which
every command paid at start-up though a reading command (`ls`, `verify`, the store page) needs a few of them. The
`TYPE_CHECKING` imports are what type checkers read; `_EXPORTS` is what runs, and tests/test_schemas_exports.py
checks that the two name the same things.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .budget import DomainEstimate, TokenBudget
    from .generation_calls import AudioEvidence, CallEvidence, EvidenceLevel, GenerationCalls
    from .generation_config import GenerationConfigBeforeGenerate, LimitSource
    from .identity import CodeIdentity, CodeSet, CpuInfo, CudaDevice, CudaInfo, Environment, FileDigest, GitState, ModelFile, ModelIdentity, ProcessorIdentity
    from .lineage import ChangeAction, Determinism, Lineage, RequestChange
    from .inputs import AudioFacts, AudioReceived, DecoderPrompt, ImageFacts, ImageReceived, InputFile, InputFiles, InputPreparation, PreparedRow, Truncation
    from .progress import (
        EVENT_ADAPTER,
        AnyEvent,
        EndEvent,
        ExceptionEvent,
        FirstTokenEvent,
        InterruptedEvent,
        ProgressEvent,
        StartEvent,
    )
    from .request import BudgetSpec, ChatMessage, DeterminismSpec, EntrypointSpec, InputSpec, ModelSpec, PolicySpec, ProgressSpec, Request, UnitsSpec
    from .result import ExecutionIdentity, PeakMemory, Phases, Result, RunStatus, Timings
    from .run_log import RunLogLine
    from .signoff import Decision, DigestKind, Signoff
    from .evidence import (
        EVIDENCE_KIND_MEANING,
        BackendDeclaration,
        CallConfigArtifact,
        EvidenceDeclaration,
        EvidenceKind,
        derived_declaration,
    )
    from .stop import STOP_REASON_MEANING, TERMINAL_REASONS, ExceptionInfo, Failed, FailedWithMessage, GenerationStop, Interrupted, SequenceStop, StopEvidence, StopReason, describe_stop
    from .diffusion_steps import DiffusionSteps
    from .token_ids import GeneratedTokenIds, TokenSequenceSummary, TokenStopFacts
    from ._versioning import FORMAT_HISTORY, FORMAT_VERSION, NewerFormat, Versioned
    from .artifacts import SNAPSHOT_ARTIFACTS, SWEEP_ARTIFACTS, ArtifactSpec, artifact_for, model_for, snapshot_artifacts, with_declared

_EXPORTS: dict[str, tuple[str, ...]] = {
    "budget": ("DomainEstimate", "TokenBudget"),
    "generation_calls": ("AudioEvidence", "CallEvidence", "EvidenceLevel", "GenerationCalls"),
    "generation_config": ("GenerationConfigBeforeGenerate", "LimitSource"),
    "identity": ("CodeIdentity", "CodeSet", "CpuInfo", "CudaDevice", "CudaInfo", "Environment", "FileDigest", "GitState", "ModelFile", "ModelIdentity", "ProcessorIdentity"),
    "lineage": ("ChangeAction", "Determinism", "Lineage", "RequestChange"),
    "inputs": ("AudioFacts", "AudioReceived", "DecoderPrompt", "ImageFacts", "ImageReceived", "InputFile", "InputFiles", "InputPreparation", "PreparedRow", "Truncation"),
    "progress": ("EVENT_ADAPTER", "AnyEvent", "EndEvent", "ExceptionEvent", "FirstTokenEvent", "InterruptedEvent", "ProgressEvent", "StartEvent"),
    "request": ("BudgetSpec", "ChatMessage", "DeterminismSpec", "EntrypointSpec", "InputSpec", "ModelSpec", "PolicySpec", "ProgressSpec", "Request", "UnitsSpec"),
    "result": ("ExecutionIdentity", "PeakMemory", "Phases", "Result", "RunStatus", "Timings"),
    "run_log": ("RunLogLine",),
    "signoff": ("Decision", "DigestKind", "Signoff"),
    "evidence": ("EVIDENCE_KIND_MEANING", "BackendDeclaration", "CallConfigArtifact", "EvidenceDeclaration", "EvidenceKind", "derived_declaration"),
    "stop": ("STOP_REASON_MEANING", "TERMINAL_REASONS", "ExceptionInfo", "Failed", "FailedWithMessage", "GenerationStop", "Interrupted", "SequenceStop", "StopEvidence", "StopReason", "describe_stop"),
    "diffusion_steps": ("DiffusionSteps",),
    "token_ids": ("GeneratedTokenIds", "TokenSequenceSummary", "TokenStopFacts"),
    "_versioning": ("FORMAT_HISTORY", "FORMAT_VERSION", "NewerFormat", "Versioned"),
    "artifacts": ("SNAPSHOT_ARTIFACTS", "SWEEP_ARTIFACTS", "ArtifactSpec", "artifact_for", "model_for", "snapshot_artifacts", "with_declared"),
}
"""Each submodule and the names this package takes from it."""
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """`from genrun.schemas import Request`: the submodule that defines it is imported now (once: the name is kept)."""
    module = _MODULE_OF.get(name)
    if module is None:  # a submodule (`from genrun.schemas import layout`) is then imported by the import system
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
