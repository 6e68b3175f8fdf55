"""A streamer that keeps every generated id and counts progress, forwarding to the user's own streamer.

generate's first `put` is the (expanded) prompt `[rows, prompt]`; then one `put` per decoding
step with the new ids `[rows]` (assisted decoding puts `[1, k]`). The tensors are kept as they
come (no `.tolist()` per step) and stacked every `CHUNK_STEPS` steps, so memory stays near
8 bytes per id even for 65k-token runs; this is how partial ids survive an exception or a signal.
"""

from collections.abc import Callable

import torch
from transformers.generation.streamers import BaseStreamer
from genrun.backends import deferred


CHUNK_STEPS = 1024  # steps per stacked chunk: one small op per 1024 tokens
LAST_IDS = 8  # ids of row 0 shown in progress records


class TeeStreamer(BaseStreamer):
    """Records ids and calls `on_step(n)` per step; forwards every call to `inner` when given."""

    def __init__(self, on_step: Callable[[int], None], inner: BaseStreamer | None = None) -> None:
        self.prompt: torch.Tensor | None = None
        """The first put: `[rows, padded_prompt]`."""
        self.steps = 0
        """Decoding steps received."""
        self.ended = False
        """generate called `end()` (it does not on an exception)."""
        self.multi_token_extra = 0
        """Assisted decoding: ids put beyond one per put (draft tokens the model accepted)."""
        self._on_step = on_step
        self._inner = inner
        self._chunk: list[torch.Tensor] = []
        self._chunks: list[torch.Tensor] = []  # each [steps, rows]

    def put(self, value: torch.Tensor) -> None:
        if self.prompt is None:
            self.prompt = value
        elif value.dim() == 1:
            self._chunk.append(value)
            self.steps += 1
            if len(self._chunk) >= CHUNK_STEPS:
                self._compact()
            self._on_step(1)
        else:  # assisted decoding: [1, k] accepted tokens at once
            n = value.shape[-1]
            self._chunk.extend(value.reshape(-1, n).T)
            self.steps += n
            self.multi_token_extra += n - 1
            self._on_step(n)
        if self._inner is not None:
            self._inner.put(value)

    def end(self) -> None:
        self.ended = True
        if self._inner is not None:
            self._inner.end()

    def tokens(self) -> torch.Tensor:
        """Every streamed step as `[steps, rows]` int64 (on the CPU)."""
        self._compact()
        if not self._chunks:
            rows = self.prompt.shape[0] if self.prompt is not None else 0
            return torch.zeros((0, rows), dtype=torch.long)
        return torch.cat(self._chunks) if len(self._chunks) > 1 else self._chunks[0]

    def last_ids(self) -> tuple[int, ...]:
        """The last `LAST_IDS` ids of row 0 (read only when a progress record is written)."""
        recent: list[torch.Tensor] = self._chunk[-LAST_IDS:]
        if len(recent) < LAST_IDS and self._chunks:
            missing = LAST_IDS - len(recent)
            return tuple(self._chunks[-1][-missing:, 0].tolist()) + tuple(int(t[0]) for t in recent)
        return tuple(int(t[0]) for t in recent)

    def _compact(self) -> None:
        if self._chunk:
            stacked = torch.stack(self._chunk).to(torch.long)
            with deferred():  # never drop a chunk between the two stores
                self._chunks.append(stacked)
                self._chunk = []
