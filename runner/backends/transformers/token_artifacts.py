"""`generated-token-ids.safetensors` and `generated-token-ids.json` from the classified rows (the summary, the texts and
the prompt ids are `genrun.runner.token_rows`', shared with every backend that writes token ids).

The ids are the new tokens of each row (no prompt) up to and including the step the row
stopped at; ids generate kept emitting after a row finished (pads, or real tokens when no EOS
criterion exists) are not kept. Partial rows of an interrupted or failed run are kept as far
as they got.
"""

from collections.abc import Sequence
from typing import Any

import safetensors.torch

from genrun.schemas import GeneratedTokenIds, layout
from genrun.backends import SnapshotDir, TokenRow, summarise_token_rows

from .instrument import ClassifiedRow


def write_token_ids(snapshot: SnapshotDir, rows: Sequence[ClassifiedRow]) -> None:
    """One int64 tensor per row, written atomically (an empty file when no row exists)."""
    tensors = {layout.sequence_name(r.index): r.tokens.ids.contiguous() for r in rows}
    snapshot.write_bytes(layout.TOKEN_IDS, safetensors.torch.save(tensors))


def summarise(rows: Sequence[ClassifiedRow], tokenizer: Any, prompt_length: int | None, eos_ids: tuple[int, ...], pad_id: int | None) -> GeneratedTokenIds:
    """Per-row count, last `layout.LAST_IDS_KEPT` ids, EOS positions (each row's own EOS set) and both decodes."""
    token_rows = [TokenRow(r.index, r.tokens.ids.tolist(), tuple(r.stop.evidence.fact("eos_token_ids", ())), r.tokens.call_index) for r in rows]
    return summarise_token_rows(token_rows, tokenizer, prompt_length=prompt_length, eos_token_ids=eos_ids, pad_token_id=pad_id)


def write_token_summary(snapshot: SnapshotDir, summary: GeneratedTokenIds) -> None:
    """`generated-token-ids.json`."""
    snapshot.write(layout.TOKEN_IDS_SUMMARY, summary)
