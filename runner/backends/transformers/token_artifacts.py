"""`generated-token-ids.safetensors`, `generated-token-ids.json` and `outputs/sequence_<i>.txt` from the classified rows.

The ids are the new tokens of each row (no prompt) up to and including the step the row
stopped at; ids generate kept emitting after a row finished (pads, or real tokens when no EOS
criterion exists) are not kept. Partial rows of an interrupted or failed run are kept as far
as they got.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import safetensors.torch

from genrun.schemas import GeneratedTokenIds, TokenSequenceSummary, layout
from genrun.snapshot_dir import SnapshotDir

from ..._io import write_bytes_atomic

from .instrument import ClassifiedRow


def write_token_ids(snapshot: SnapshotDir, rows: Sequence[ClassifiedRow]) -> None:
    """One int64 tensor per row, written atomically (an empty file when no row exists)."""
    tensors = {layout.sequence_name(r.index): r.tokens.ids.contiguous() for r in rows}
    snapshot.write_bytes(layout.TOKEN_IDS, safetensors.torch.save(tensors))


def write_prompt_token_ids(snapshot: SnapshotDir, rows: Sequence[tuple[int, Sequence[int]]]) -> None:
    """`prompt-token-ids.safetensors`: `prompt_<row>` int64 [prompt_tokens] per row (unpadded), written before generate."""
    import torch

    tensors = {f"prompt_{row}": torch.tensor(list(ids), dtype=torch.int64) for row, ids in rows}
    snapshot.write_bytes(layout.PROMPT_TOKEN_IDS, safetensors.torch.save(tensors))


def summarise(rows: Sequence[ClassifiedRow], tokenizer: Any, prompt_length: int | None, eos_ids: tuple[int, ...], pad_id: int | None) -> GeneratedTokenIds:
    """Per-row count, last `layout.LAST_IDS_KEPT` ids, EOS positions and both decodes."""
    sequences = []
    for r in rows:
        ids = r.tokens.ids.tolist()
        eos_set = set(r.stop.evidence.fact("eos_token_ids", ()))
        sequences.append(
            TokenSequenceSummary(
                index=r.index,
                call_index=r.tokens.call_index,
                count=len(ids),
                last_ids=tuple(ids[-layout.LAST_IDS_KEPT:]),
                eos_positions=tuple(i for i, t in enumerate(ids) if t in eos_set),
                text=decode(tokenizer, ids, skip_special_tokens=True),
                text_with_special=decode(tokenizer, ids, skip_special_tokens=False),
            )
        )
    return GeneratedTokenIds(prompt_length=prompt_length, eos_token_ids=eos_ids, pad_token_id=pad_id, sequences=tuple(sequences))


def write_token_summary(snapshot: SnapshotDir, summary: GeneratedTokenIds) -> None:
    """`generated-token-ids.json`."""
    snapshot.write(layout.TOKEN_IDS_SUMMARY, summary)


def write_sequence_texts(outputs_dir: Path, summary: GeneratedTokenIds) -> tuple[str, ...]:
    """`outputs/sequence_<i>.txt` (decoded without special tokens) for rows a tokenizer could decode, written through
    `outputs_dir` (the execution context's path through the directory the core holds open, never a link planted since)."""
    written = []
    for seq in summary.sequences:
        if seq.text is None:
            continue
        name = layout.sequence_text_name(seq.index)
        write_bytes_atomic(outputs_dir / name, seq.text.encode())
        written.append(name)
    return tuple(written)


def decode(tokenizer: Any, ids: list[int], *, skip_special_tokens: bool) -> str | None:
    """`tokenizer.decode` (processors forward it too); `None` when there is nothing that decodes."""
    fn = getattr(tokenizer, "decode", None)
    if fn is None:
        return None
    return fn(ids, skip_special_tokens=skip_special_tokens)
