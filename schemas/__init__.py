"""Pydantic models for requests and every snapshot artifact. Imports neither torch nor transformers."""

from .budget import DomainEstimate, TokenBudget
from .generation_calls import AudioEvidence, CallEvidence, EvidenceLevel, GenerationCalls
from .generation_config import GenerationConfigBeforeGenerate, LimitSource
from .identity import CodeIdentity, CodeSet, CpuInfo, CudaDevice, CudaInfo, Environment, FileDigest, GitState, ModelFile, ModelIdentity, ProcessorIdentity
from .lineage import ChangeAction, Determinism, Lineage, RequestChange
from .inputs import AudioFacts, AudioReceived, DecoderPrompt, ImageFacts, ImageReceived, InputFile, InputFiles, InputPreparation, PreparedRow, Truncation
from .pipeline_call import PipelineCallBeforeCall
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
    DIFFUSION_EVIDENCE,
    EVIDENCE_KIND_MEANING,
    TOKEN_EVIDENCE,
    BackendDeclaration,
    CallConfigArtifact,
    EvidenceDeclaration,
    EvidenceKind,
    derived_declaration,
)
from .stop import STOP_REASON_MEANING, TERMINAL_REASONS, ExceptionInfo, GenerationStop, SequenceStop, StopEvidence, StopReason, describe_stop
from .stop_diffusion import DIFFUSION_STOP_EVIDENCE, CompletedEvidence, DiffusionExceptionEvidence, DiffusionInterruptedEvidence, DiffusionSteps
from .stop_tokens import (
    TOKEN_STOP_EVIDENCE,
    CustomEvidence,
    EosEvidence,
    ExceptionEvidence,
    InterruptedEvidence,
    MaxLengthEvidence,
    MaxNewTokensEvidence,
    MaxTimeEvidence,
    StopStringEvidence,
    TokenStopFacts,
    UnknownEvidence,
)
from .token_ids import GeneratedTokenIds, TokenSequenceSummary
from ._versioning import FORMAT_HISTORY, FORMAT_VERSION, NewerFormat, Versioned
from .artifacts import SNAPSHOT_ARTIFACTS, SWEEP_ARTIFACTS, ArtifactSpec, artifact_for, model_for, with_declared

__all__ = [
    "ArtifactSpec", "SNAPSHOT_ARTIFACTS", "SWEEP_ARTIFACTS", "artifact_for", "model_for", "with_declared",
    "BackendDeclaration", "CallConfigArtifact", "DIFFUSION_EVIDENCE", "DIFFUSION_STOP_EVIDENCE", "DiffusionExceptionEvidence",
    "DiffusionInterruptedEvidence", "EVIDENCE_KIND_MEANING", "EvidenceDeclaration", "EvidenceKind", "TERMINAL_REASONS", "TOKEN_EVIDENCE",
    "TOKEN_STOP_EVIDENCE", "TokenStopFacts", "derived_declaration", "describe_stop",
    "CompletedEvidence", "CustomEvidence", "DiffusionSteps", "EosEvidence", "ExceptionEvidence", "InterruptedEvidence", "MaxLengthEvidence", "MaxNewTokensEvidence", "MaxTimeEvidence", "STOP_REASON_MEANING", "StopEvidence", "StopStringEvidence", "UnknownEvidence", "AudioFacts", "AudioReceived", "DecoderPrompt", "ImageFacts", "ImageReceived", "InputFile", "InputFiles", "InputPreparation", "PreparedRow", "Truncation", "FORMAT_HISTORY", "FORMAT_VERSION", "NewerFormat", "Versioned",
    "AnyEvent", "AudioEvidence", "BudgetSpec", "CallEvidence", "EvidenceLevel", "GenerationCalls", "ChangeAction", "Determinism", "DeterminismSpec", "Lineage", "RequestChange", "ChatMessage", "CodeIdentity", "CodeSet", "CpuInfo", "CudaDevice", "CudaInfo",
    "Decision", "DigestKind", "DomainEstimate", "EVENT_ADAPTER", "EndEvent", "EntrypointSpec", "Environment",
    "ExceptionEvent", "ExceptionInfo", "ExecutionIdentity", "FileDigest", "FirstTokenEvent", "GeneratedTokenIds",
    "GenerationConfigBeforeGenerate", "GenerationStop", "GitState", "InputSpec", "InterruptedEvent", "LimitSource",
    "ModelFile", "ModelIdentity", "ProcessorIdentity", "ModelSpec", "PeakMemory", "Phases", "PipelineCallBeforeCall", "PolicySpec", "ProgressEvent", "ProgressSpec", "Request",
    "Result", "RunLogLine", "RunStatus", "SequenceStop", "Signoff", "StartEvent", "StopReason", "Timings", "TokenBudget",
    "TokenSequenceSummary", "UnitsSpec",
]
