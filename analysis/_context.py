"""What checks may use besides the loaded snapshot (prepared once by verify, outside the checks)."""

from pathlib import Path
from typing import NamedTuple

from ._tokenizer import DecoderUnavailable, TextDecoder


class CheckContext(NamedTuple):
    """Inputs that come from outside the snapshot directory."""

    decoder: TextDecoder | DecoderUnavailable
    """The verified tokenizer of the snapshot's model, or why there is none."""
    allowed_signers: Path | None = None
    """SSH allowed-signers file for sign-off signatures (`None`: git's `gpg.ssh.allowedSignersFile`)."""
