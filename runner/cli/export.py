"""`genrun export SNAPSHOT --mlflow`: one MLflow run per snapshot, after the fact (nothing is logged during generation)."""

import argparse

from ._output import add_store_lookup, counted, print_json, stderr_console, working

EPILOG = """\
Params: the request and the effective generation config (with each limit's source). Metrics: every
progress record at its real time (step = units generated), then result.json's summary. Tags:
genrun.state, genrun.stop_reasons, genrun.snapshot_digest, genrun.plan_digest, ... Artifacts: every
file docs/snapshot-format.md lists, under snapshot/ (others are named, not uploaded). Needs: pip install 'genrun[mlflow]'.

example: genrun export snapshots/20261129T101500Z-tiny-3fa2c1 --mlflow --tracking-uri sqlite:///mlflow.db
  exported 20261129T101500Z-tiny-3fa2c1 as MLflow run 6f0c… in experiment genrun (41 params, 36 metrics, 14 files)
  artifacts stored at file:///home/alice/proj/mlruns/1/6f0c…/artifacts (choose the place with --artifact-location when the experiment is new)"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="export a finished snapshot to MLflow (one run per snapshot)",
        description="Create one MLflow run from SNAPSHOT: params, metrics with their real timestamps, tags, artifacts.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("snapshot", metavar="SNAPSHOT", help="snapshot directory, id, or unique id prefix in the store")
    add_store_lookup(parser)
    parser.add_argument("--mlflow", action="store_true", required=True, help="export to MLflow (the only target for now)")
    parser.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else MLflow's default)")
    parser.add_argument("--experiment", default="genrun", metavar="NAME", help="MLflow experiment (created if missing; default genrun)")
    parser.add_argument("--artifact-location", metavar="DIR_OR_URI",
                        help="where a new experiment stores the uploaded files (MLflow's default: ./mlruns in the current directory); "
                             "fixed by MLflow when the experiment is created")
    parser.add_argument("--again", action="store_true", help="export even if this snapshot already has a run in the experiment")
    parser.add_argument("--json", action="store_true", help="print {run_id, experiment_id, tracking_uri, ...} on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.mlflow_export import export_to_mlflow
    from ._target import list_items_command, refuse_sweep, resolve_target

    snapshot, is_sweep = resolve_target(args.snapshot, args.store)
    if is_sweep:
        refuse_sweep(snapshot, "export", f"Export its items one by one ('{list_items_command(snapshot)}' lists them): genrun export ITEM --mlflow")
    with working(f"exporting {snapshot.name} to MLflow (importing mlflow, then logging params, metrics and files)"):
        exported = export_to_mlflow(snapshot, args.tracking_uri, args.experiment, again=args.again, artifact_location=args.artifact_location)
    if args.json:
        print_json(exported._asdict())
    else:
        stderr_console.print(f"exported {snapshot} as MLflow run {exported.run_id} in experiment {args.experiment} at "
                             f"{exported.tracking_uri} ({counted(exported.params, 'param')}, {counted(exported.metrics, 'metric')}, {counted(exported.artifacts, 'file')})",
                             markup=False, highlight=False, soft_wrap=True)
        stderr_console.print(f"artifacts stored at {exported.artifact_uri} (choose the place with --artifact-location when the "
                             "experiment is new)", markup=False, highlight=False, soft_wrap=True)
        if exported.skipped:
            stderr_console.print(f"not uploaded (no snapshot file of that name in the format): {', '.join(exported.skipped)}",
                                 markup=False, highlight=False, soft_wrap=True)
    return 0
