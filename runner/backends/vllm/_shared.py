"""One engine, many snapshots: a sweep worker's items share one vLLM engine (continuous batching).

vLLM's engine is not thread-safe, so one thread owns it: it admits each item's requests (`add_request`), steps the
engine, and hands every output to the item it belongs to (the item's callback keeps its ids and counts its progress,
as its own step loop would). Each item's thread only waits for its own rows (writing its prompt ids once every request
has started: `Submission.wait_started`), then finishes and seals its snapshot while this thread keeps stepping the
others. A signal (`interrupt`, from the worker's main thread) aborts every request in
flight: each waiting item raises `RunInterrupted` with the ids it has. An engine error fails every item in flight; an
item whose own requests are refused (or whose callback raises) fails alone.
"""

import threading
from collections.abc import Callable
from typing import Any

from genrun.backends import RunInterrupted

IDLE_WAIT_S = 0.05
"""How long the engine thread sleeps when no request is in flight (and how soon it sees a signal then); seconds."""
ATTRIBUTE = "_genrun_shared_engine"
"""Where an engine's `SharedEngine` is attached while a batch is open (`VllmRun.generate` looks there)."""


class Submission:
    """One item's requests in the shared engine, and how they ended."""

    def __init__(self, requests: list[tuple[str, str, Any]], on_output: Callable[[Any], None]) -> None:
        self.requests = requests
        """`(request id, prompt, SamplingParams)` per prompt."""
        self.on_output = on_output
        """Called on the engine thread with each `RequestOutput` of these requests."""
        self.unfinished = {request_id for request_id, _, _ in requests}
        self._not_started = set(self.unfinished)
        self.started = threading.Event()
        """Set once every request has delivered its first output (its prompt ids), or when the submission ended."""
        self.done = threading.Event()
        self.signal: str | None = None
        self.error: BaseException | None = None

    def wait_started(self) -> None:
        """Block until every request is generating (or the submission ended): what only needs the prompts' ids can be done
        while the engine generates the rest."""
        self.started.wait()

    def note_output(self, request_id: str) -> None:
        """On the engine thread, after `on_output`: the last of the requests to deliver its first output sets `started`."""
        if self._not_started:
            self._not_started.discard(request_id)
            if not self._not_started:
                self.started.set()

    def wait(self) -> None:
        """Block until every request finished; raise `RunInterrupted` or the failure that ended them early."""
        self.done.wait()
        if self.signal is not None:
            raise RunInterrupted(self.signal)
        if self.error is not None:
            raise self.error


class SharedEngine:
    """The `ItemBatch` of the vllm backend: the engine thread and the items in flight."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self._engine = llm.llm_engine
        self._lock = threading.Lock()
        self._inbox: list[Submission] = []
        self._wake = threading.Event()
        self._routes: dict[str, Submission] = {}
        self._signal: str | None = None
        self._closed = False
        setattr(llm, ATTRIBUTE, self)
        self._thread = threading.Thread(target=self._loop, name="genrun-vllm-shared-engine", daemon=True)
        self._thread.start()

    def submit(self, requests: list[tuple[str, str, Any]], on_output: Callable[[Any], None]) -> Submission:
        """Queue one item's requests for the engine thread (after a signal: ended at once, interrupted)."""
        submission = Submission(requests, on_output)
        with self._lock:
            if self._signal is not None or self._closed:
                self._end(submission, signal=self._signal, error=None if self._signal else RuntimeError("the shared vLLM engine was closed"))
                return submission
            self._inbox.append(submission)
        self._wake.set()
        return submission

    def interrupt(self, signal_name: str) -> None:
        """Called from a signal handler: only a flag (the engine thread acts on it within one step)."""
        self._signal = self._signal or signal_name

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join()
        if getattr(self._llm, ATTRIBUTE, None) is self:
            delattr(self._llm, ATTRIBUTE)

    def _loop(self) -> None:
        while True:
            self._wake.clear()
            self._admit()
            if self._signal is not None or self._closed:
                self._end_all(signal=self._signal, error=None if self._signal else RuntimeError("the shared vLLM engine was closed"))
                if self._closed:
                    return
            if not self._routes:
                self._wake.wait(IDLE_WAIT_S)
                continue
            try:
                outputs = self._engine.step()
            except BaseException as exc:  # the engine failed (or its core died): every item in flight fails with it
                self._end_all(signal=None, error=exc)
                continue
            for out in outputs:
                self._deliver(out)

    def _admit(self) -> None:
        with self._lock:
            admitted, self._inbox = self._inbox, []
        for submission in admitted:
            added: list[str] = []
            try:
                for request_id, prompt, sampling in submission.requests:
                    self._engine.add_request(request_id, prompt, sampling)
                    added.append(request_id)
                    self._routes[request_id] = submission
            except Exception as exc:  # noqa: BLE001 (this item's request was refused: it fails alone, with the reason)
                self._abort(submission, added)
                self._end(submission, signal=None, error=exc)

    def _deliver(self, out: Any) -> None:
        submission = self._routes.get(out.request_id)
        if submission is None:
            return
        try:
            submission.on_output(out)
        except Exception as exc:  # noqa: BLE001 (an item's own bookkeeping failed: it fails alone)
            self._abort(submission, list(submission.unfinished))
            self._end(submission, signal=None, error=exc)
            return
        submission.note_output(out.request_id)
        if out.finished:
            submission.unfinished.discard(out.request_id)
            self._routes.pop(out.request_id, None)
            if not submission.unfinished:
                submission.done.set()

    def _abort(self, submission: Submission, request_ids: list[str]) -> None:
        for request_id in request_ids:
            self._routes.pop(request_id, None)
        if request_ids:
            self._engine.abort_request(request_ids)

    def _end(self, submission: Submission, *, signal: str | None, error: BaseException | None) -> None:
        submission.signal, submission.error = signal, error
        submission.started.set()
        submission.done.set()

    def _end_all(self, *, signal: str | None, error: BaseException | None) -> None:
        """Abort every request in flight and queued; each item ends with `signal` or `error`."""
        with self._lock:
            queued, self._inbox = self._inbox, []
        in_flight = list(dict.fromkeys(self._routes.values()))
        for submission in in_flight:
            try:
                self._abort(submission, list(submission.unfinished))
            except Exception:  # noqa: BLE001 (a dead engine cannot abort; the items still end, with the first cause)
                self._routes.clear()
        for submission in (*in_flight, *queued):
            self._end(submission, signal=signal, error=error)
