"""`rtrain-tui metrics HOST RUN`: the loss curve, progress and ETA from the log."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rtrain_tui.core.metrics import metrics_format

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


async def cmd_metrics(engine: Engine, args: argparse.Namespace) -> int:
    from rtrain_tui.core.metrics.metrics_sync import sync_metrics

    parser = await sync_metrics(engine, args.host, args.workdir, args.run_id)
    # Its state decides whether the ETA and steps/s are live (metrics_format.for_state).
    state = (await engine.probe(args.host, args.workdir, args.run_id)).state
    if args.json:
        print(json.dumps({"host": args.host, "run_id": args.run_id, "state": state,
                          **metrics_format.to_json(parser, state)}, indent=2))
        return 0
    rows = metrics_format.rows(parser)
    if args.csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(metrics_format.COLUMNS)
        writer.writerows([[step, *("" if v is None else repr(v) for v in values)]
                          for step, *values in rows])
        return 0
    print(metrics_format.summary_line(metrics_format.for_state(parser.summary(), state))
          or f"no metrics in the log of {args.run_id} yet")
    if rows:
        table = [("STEP", "LOSS", "EVAL_LOSS", "LR", "GRAD_NORM")] + [
            (str(step), *(metrics_format.number(v) for v in values)) for step, *values in rows]
        widths = [max(len(r[i]) for r in table) for i in range(5)]
        for r in table:
            print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    return 0
