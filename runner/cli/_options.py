"""Options several subcommands take, spelled once: `--store DIR` and `--allowed-signers FILE`, with their defaults.

Imports nothing but argparse and pathlib: `ls` builds its parser from here without waiting for rich.
"""

import argparse
from pathlib import Path

STORE_DEFAULT = "$GENRUN_STORE, else ./snapshots"
"""Where `store.locate_store` looks when --store is not given."""
ALLOWED_SIGNERS_DEFAULT = "$GENRUN_ALLOWED_SIGNERS, else git's gpg.ssh.allowedSignersFile"
"""Where `analysis.signoffs.resolve_allowed_signers` looks when --allowed-signers is not given."""


def add_store(parser: argparse.ArgumentParser, purpose: str = "snapshot store directory", default: str = STORE_DEFAULT) -> None:
    """`--store DIR`: `purpose (default: ...)`."""
    parser.add_argument("--store", metavar="DIR", help=f"{purpose} (default: {default})")


def add_allowed_signers(parser: argparse.ArgumentParser, purpose: str) -> None:
    """`--allowed-signers FILE`: `purpose (default: $GENRUN_ALLOWED_SIGNERS, else git's setting)`."""
    parser.add_argument("--allowed-signers", type=Path, metavar="FILE", help=f"{purpose} (default: {ALLOWED_SIGNERS_DEFAULT})")
