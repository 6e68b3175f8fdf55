"""Build ``examples/processors/tiny-whisper-15s``: the tiny Whisper's processor with 15 s feature windows.

Why this exists: the example of ``[model] processor`` (a processor directory other than the
checkpoint's). Its ``WhisperFeatureExtractor`` takes 15 s windows at hop 80 instead of 30 s at hop
160, so the encoder still receives its 3000 frames but they cover 15 s: a 34 s file is cut to 15 s
instead of 30 s, and ``input-preparation.json`` / ``genrun verify`` show that difference. The
tokenizer is the checkpoint's own. Nothing is downloaded; no weights are written.

Usage::

    python examples/models/make_tiny_whisper_15s_processor.py [--out DIR]
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from _build import parse_args  # sibling module: the scripts run as `python examples/models/make_*.py`

MODELS = Path(__file__).resolve().parent
DEFAULT_OUT = MODELS.parent / "processors" / "tiny-whisper-15s"


def main() -> None:
    from transformers import AutoProcessor, WhisperFeatureExtractor

    args = parse_args(__doc__, DEFAULT_OUT)
    processor = AutoProcessor.from_pretrained(MODELS / "tiny-whisper", local_files_only=True)
    processor.feature_extractor = WhisperFeatureExtractor(feature_size=80, sampling_rate=16000, hop_length=80, chunk_length=15)
    if args.out.exists():
        shutil.rmtree(args.out)
    processor.save_pretrained(args.out)
    print(json.dumps({"out": str(args.out), "bytes": {p.name: p.stat().st_size for p in sorted(args.out.iterdir())}}, indent=1))


if __name__ == "__main__":
    main()
