"""`genrun signoff SNAPSHOT --decision approve|accept|reject` (or `--revoke RECORD`): append an owner's decision bound to a digest."""

import argparse
from pathlib import Path

from rich.markup import escape

from genrun.runner.signoff import DECISIONS
from genrun.schemas import Signoff, layout
from genrun.snapshot_dir import SnapshotDir

from ._options import add_allowed_signers
from ._output import add_store_lookup, print_json, stderr_console

EPILOG = """\
approve binds the plan digest (before 'genrun execute'); accept and reject bind the snapshot
digest and need a sealed snapshot. Each sign-off is a new file under SNAPSHOT/signoffs/. With
--key (or git's user.signingkey when gpg.format = ssh) it is signed with
'ssh-keygen -Y sign -n <decision>@genrun'; check it with 'genrun verify --allowed-signers FILE'.
--by defaults to the principal the allowed-signers file lists for the key (then git's user.email);
a key that an allowed-signers file exists but does not list is refused, with the line to add.
A record is never changed: '--revoke RECORD' appends a revocation, and verify then shows RECORD as revoked.

example: genrun signoff snapshots/20261129T101500Z-tiny-3fa2c1 --decision approve --key ~/.ssh/genrun_ed25519 --accept-gap "no CUDA numbers"
  signed approve by alice@example.com, plan digest 9b1e4c0d2f7a…
  snapshots/20261129T101500Z-tiny-3fa2c1/signoffs/20261129T101702Z-approve-5c1e9a02.json
example: genrun signoff 20261129T101500Z-tiny --revoke 20261129T101702Z-approve-5c1e9a02.json --key ~/.ssh/genrun_ed25519
  signed revoke by alice@example.com of 20261129T101702Z-approve-5c1e9a02.json"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "signoff",
        help="approve a plan, or accept/reject a finished snapshot (optionally SSH-signed)",
        description="Append an owner sign-off record bound to the snapshot's plan or snapshot digest.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("snapshot", help="snapshot or sweep directory, id, or unique id prefix in the store "
                                         "(a sweep's own sign-off binds its plan / its manifest, which records every item's digest)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--decision", choices=DECISIONS, help="approve a plan; accept or reject results")
    what.add_argument("--revoke", metavar="RECORD", help="supersede an earlier record (its file name under signoffs/)")
    parser.add_argument(
        "--by", metavar="NAME",
        help="who decides (default: the principal the allowed-signers file lists for --key, then git's user.email)",
    )
    add_allowed_signers(parser, "where --by is looked up for the key")
    add_store_lookup(parser)
    parser.add_argument("--key", type=Path, metavar="PATH", help="SSH private key to sign with (default: git's user.signingkey when gpg.format = ssh)")
    parser.add_argument("--note", metavar="TEXT", help="free text kept in the record")
    parser.add_argument(
        "--accept-gap", dest="accepted_gaps", action="append", default=[], metavar="TEXT", help="a known gap you accept (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print {path, signature, record} as one JSON document on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.analysis.signoffs import execution_started_at
    from genrun.runner.signoff import make_signoff
    from ._target import resolve_target

    snapshot, is_sweep = resolve_target(args.snapshot, args.store)
    decision = "revoke" if args.revoke is not None else args.decision
    path = make_signoff(snapshot, decision, args.by, args.key, args.note, args.accepted_gaps,
                        allowed_signers=args.allowed_signers, revokes=args.revoke)
    record = SnapshotDir(snapshot).read(f"{layout.SIGNOFFS_DIR}/{path.name}", Signoff)
    signature = path.with_name(path.name + ".sig") if record.signed else None
    if args.json:
        print_json({"path": str(path), "signature": str(signature) if signature else None, "record": record.model_dump(mode="json")})
        return 0
    how = "signed" if record.signed else "[yellow]unsigned[/]"
    bound = f"of {record.revokes}" if record.revokes else f"{record.digest_kind} digest {record.digest[:12]}…"
    if is_sweep:  # a sweep's own record: it binds the sweep's files, which record every item's digest
        bound = f"sweep {snapshot.name}, {bound}"
    stderr_console.print(f"{how} {record.decision} by {escape(record.by)}, {escape(bound)}", soft_wrap=True)
    stderr_console.print(str(path), markup=False, soft_wrap=True)
    if record.decision == "approve" and (started := execution_started_at(snapshot)) is not None:
        stderr_console.print(f"note: this plan already ran (started {started}): the approval is recorded, but it did not gate that run "
                             "('genrun verify' says so); approve before 'genrun execute' for the gate to hold", markup=False, soft_wrap=True)
    return 0
