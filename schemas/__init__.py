"""Pydantic models for requests and every snapshot artifact. Imports neither torch nor transformers."""

from .budget import DomainEstimate, TokenBudget
from .generation_config import GenerationConfigBeforeGenerate, LimitSource
from .identity import CodeIdentity, CodeSet, CpuInfo, CudaDevice, CudaInfo, Environment, FileDigest, GitState, ModelFile, ModelIdentity
from .inputs import AudioFacts, AudioReceived, ImageFacts, ImageReceived, InputFile, InputFiles, InputPreparation, PreparedRow, Truncation
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
from .request import BudgetSpec, ChatMessage, EntrypointSpec, InputSpec, ModelSpec, PolicySpec, ProgressSpec, Request, UnitsSpec
from .result import ExecutionIdentity, PeakMemory, Result, RunStatus, Timings
from .signoff import Decision, DigestKind, Signoff
from .stop import ExceptionInfo, GenerationStop, SequenceStop, StopReason
from .token_ids import GeneratedTokenIds, TokenSequenceSummary

__all__ = [
    "AudioFacts", "AudioReceived", "ImageFacts", "ImageReceived", "InputFile", "InputFiles", "InputPreparation", "PreparedRow", "Truncation",
    "AnyEvent", "BudgetSpec", "ChatMessage", "CodeIdentity", "CodeSet", "CpuInfo", "CudaDevice", "CudaInfo",
    "Decision", "DigestKind", "DomainEstimate", "EVENT_ADAPTER", "EndEvent", "EntrypointSpec", "Environment",
    "ExceptionEvent", "ExceptionInfo", "ExecutionIdentity", "FileDigest", "FirstTokenEvent", "GeneratedTokenIds",
    "GenerationConfigBeforeGenerate", "GenerationStop", "GitState", "InputSpec", "InterruptedEvent", "LimitSource",
    "ModelFile", "ModelIdentity", "ModelSpec", "PeakMemory", "PipelineCallBeforeCall", "PolicySpec", "ProgressEvent", "ProgressSpec", "Request",
    "Result", "RunStatus", "SequenceStop", "Signoff", "StartEvent", "StopReason", "Timings", "TokenBudget",
    "TokenSequenceSummary", "UnitsSpec",
]
