"""`rtrain-tui preflight HOST`: is the host ready to train."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from rtrain_tui.cli.base import err, refuse_slurm_flags, slurm_options

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


async def cmd_preflight(engine: Engine, args: argparse.Namespace) -> int:
    backend = args.backend or engine.backend_of_host(args.host)
    if backend != "slurm":
        refuse_slurm_flags(args)
    options = slurm_options(engine.hosts, args) if backend == "slurm" else None
    report = await engine.preflight(args.host, args.gpus, args.python, args.workdir,
                                    backend=backend, options=options)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0 if report.ok else 1
    if not report.reachable:
        err(report.error)
        return 1
    marks = {True: "✓", False: "✗"}
    for c in report.checks:
        mark = "!" if c.warning and not c.ok else marks[c.ok]
        print(f"  {mark} {c.name:8} {c.detail}")
    for g in report.gpus:
        print(f"    GPU {g.index}: {g.name}  {g.shown('memory_used_mib')}/"
              f"{g.shown('memory_total_mib')} MiB  {g.shown('utilization_pct')}% busy")
    for job in report.jobs:
        print(f"    job {job.replace('|', '  ').strip()}")
    if report.ok:
        print(f"{args.host} is ready")
        return 0
    err(f"{args.host} is not ready: " + "; ".join(report.why_not))
    return 1
