"""The `token_ids` evidence for a backend that keeps its own ids (an engine's step loop), without transformers'
instrumentation: the same files the built-in language-model backend writes. torch and safetensors are imported when
writing, so `genrun.backends` imports without them."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from genrun.schemas import GeneratedTokenIds, TokenSequenceSummary, layout
from genrun.snapshot_dir import SnapshotDir

from ._io import write_bytes_atomic


class TokenRow(NamedTuple):
    """One row: what `save_token_rows` writes."""

    row: int
    """Row index (`sequence_<row>`; not `index`, which a tuple already has)."""
    ids: Sequence[int]
    """Generated ids, prompt excluded, up to and including the one the row stopped at."""
    eos_token_ids: tuple[int, ...]
    """The row's EOS set (ids that end it), for `eos_positions`."""
    call_index: int = 0
    """Outermost call the row belongs to."""


def save_token_rows(snapshot: SnapshotDir, outputs_dir: Path, rows: Sequence[TokenRow], tokenizer: Any, *, prompt_length: int | None,
                    eos_token_ids: tuple[int, ...], pad_token_id: int | None) -> tuple[str, ...]:
    """`generated-token-ids.safetensors` (int64 per row), `generated-token-ids.json` (last ids, EOS positions, both decodes)
    and `outputs/sequence_<i>.txt` (through `outputs_dir`, the context's path through the directory the core holds open);
    returns the output names (relative to `outputs/`)."""
    import safetensors.torch
    import torch

    tensors = {layout.sequence_name(r.row): torch.tensor(list(r.ids), dtype=torch.int64) for r in rows}
    snapshot.write_bytes(layout.TOKEN_IDS, safetensors.torch.save(tensors))
    summary = summarise_token_rows(rows, tokenizer, prompt_length=prompt_length, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id)
    snapshot.write(layout.TOKEN_IDS_SUMMARY, summary)
    return write_sequence_texts(outputs_dir, summary)


def summarise_token_rows(rows: Sequence[TokenRow], tokenizer: Any, *, prompt_length: int | None, eos_token_ids: tuple[int, ...],
                         pad_token_id: int | None) -> GeneratedTokenIds:
    """`generated-token-ids.json`: per row the count, last `layout.LAST_IDS_KEPT` ids, EOS positions and both decodes."""
    sequences = []
    for r in rows:
        ids, eos = list(r.ids), set(r.eos_token_ids)
        sequences.append(TokenSequenceSummary(
            index=r.row, call_index=r.call_index, count=len(ids), last_ids=tuple(ids[-layout.LAST_IDS_KEPT:]),
            eos_positions=tuple(i for i, t in enumerate(ids) if t in eos),
            text=decode(tokenizer, ids, skip_special_tokens=True), text_with_special=decode(tokenizer, ids, skip_special_tokens=False)))
    return GeneratedTokenIds(prompt_length=prompt_length, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id, sequences=tuple(sequences))


def write_sequence_texts(outputs_dir: Path, summary: GeneratedTokenIds) -> tuple[str, ...]:
    """`outputs/sequence_<i>.txt` (decoded without special tokens) for rows a tokenizer could decode, written through
    `outputs_dir` (the execution context's path through the directory the core holds open, never a link planted since)."""
    written = []
    for seq in summary.sequences:
        if seq.text is not None:
            name = layout.sequence_text_name(seq.index)
            write_bytes_atomic(outputs_dir / name, seq.text.encode())
            written.append(name)
    return tuple(written)


def save_prompt_ids(snapshot: SnapshotDir, rows: Sequence[tuple[int, Sequence[int]]]) -> None:
    """`prompt-token-ids.safetensors`: `prompt_<row>` int64 [prompt_tokens] per row, as the backend tokenised them."""
    import safetensors.torch
    import torch

    tensors = {f"prompt_{row}": torch.tensor(list(ids), dtype=torch.int64) for row, ids in rows}
    snapshot.write_bytes(layout.PROMPT_TOKEN_IDS, safetensors.torch.save(tensors))


def decode(tokenizer: Any, ids: list[int], *, skip_special_tokens: bool) -> str | None:
    """`tokenizer.decode` (processors forward it too); `None` when there is nothing that decodes."""
    fn = getattr(tokenizer, "decode", None)
    return None if fn is None else fn(ids, skip_special_tokens=skip_special_tokens)
