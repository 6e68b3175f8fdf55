"""`genrun signoff SNAPSHOT --decision approve|accept|reject`: append an owner's decision bound to a digest."""

import argparse
from pathlib import Path

from rich.markup import escape

from genrun.schemas import Signoff

from ._output import print_json, stderr_console

EPILOG = """\
approve binds the plan digest (before 'genrun execute'); accept and reject bind the snapshot
digest and need a sealed snapshot. Each sign-off is a new file under SNAPSHOT/signoffs/. With
--key (or git's user.signingkey when gpg.format = ssh) it is signed with
'ssh-keygen -Y sign -n <decision>@genrun'; check it with 'genrun verify --allowed-signers FILE'.

example: genrun signoff snapshots/20261129T101500Z-tiny-3fa2c1 --decision approve --key ~/.ssh/id_ed25519 --accept-gap "no CUDA numbers"
  signed approve by alice@example.com, plan digest 9b1e4c0d2f7a…
  snapshots/20261129T101500Z-tiny-3fa2c1/signoffs/20261129T101702Z-approve-5c1e9a02.json"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "signoff",
        help="approve a plan, or accept/reject a finished snapshot (optionally SSH-signed)",
        description="Append an owner sign-off record bound to the snapshot's plan or snapshot digest.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("snapshot", help="snapshot directory")
    parser.add_argument(
        "--decision", required=True, choices=("approve", "accept", "reject"), help="approve a plan; accept or reject results"
    )
    parser.add_argument("--by", metavar="NAME", help="who decides; the principal in the allowed-signers file (default: git's user.email)")
    parser.add_argument("--key", type=Path, metavar="PATH", help="SSH private key to sign with (default: git's user.signingkey when gpg.format = ssh)")
    parser.add_argument("--note", metavar="TEXT", help="free text kept in the record")
    parser.add_argument(
        "--accept-gap", dest="accepted_gaps", action="append", default=[], metavar="TEXT", help="a known gap you accept (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print {path, signature, record} as one JSON document on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.signoff import make_signoff
    from genrun.runner.store import open_snapshot

    snapshot = open_snapshot(args.snapshot)
    path = make_signoff(snapshot, args.decision, args.by, args.key, args.note, args.accepted_gaps)
    record = Signoff.model_validate_json(path.read_bytes())
    signature = path.with_name(path.name + ".sig") if record.signed else None
    if args.json:
        print_json({"path": str(path), "signature": str(signature) if signature else None, "record": record.model_dump(mode="json")})
        return 0
    how = "signed" if record.signed else "[yellow]unsigned[/]"
    stderr_console.print(f"{how} {record.decision} by {escape(record.by)}, {record.digest_kind} digest {record.digest[:12]}…")
    stderr_console.print(str(path), markup=False, soft_wrap=True)
    return 0
