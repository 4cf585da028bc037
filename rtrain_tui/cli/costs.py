"""`rtrain-tui costs`: what the runs in the index spent, by host, day or run; asks no host."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from rtrain_tui.cli.base import err
from rtrain_tui.cli.runs import runs_report
from rtrain_tui.core.runs import hostconfig
from rtrain_tui.core.runs.index import RunIndex, parse_age
from rtrain_tui.core.safety import validate


def list_costs(index: RunIndex, hosts: hostconfig.HostConfig, args: argparse.Namespace) -> int:
    """`costs`: what the runs in the index spent, by host, day or run; asks no host."""
    from rtrain_tui.core.runs import cost

    now = datetime.now(UTC)
    try:
        since = now - parse_age(args.since) if args.since is not None else None
    except validate.ValidationError:
        raise validate.ValidationError(f"--since {args.since!r} is not an age: a number and h, "
                                       "d or w (hours, days, weeks), e.g. 7d.") from None
    report = runs_report(index)
    rows, unpriced = cost.spent_by(report.records, lambda h: hosts.for_host(h).price, now,
                                   by=args.by, since=since)
    totals: dict[str, Any] = {}
    for row in rows:
        totals[row.currency] = totals.get(row.currency, 0) + row.amount
    if args.json:
        print(json.dumps({
            "since": since.isoformat() if since else None, "by": args.by,
            "rows": [{args.by: row.key, "runs": row.runs, "cost": float(row.amount),
                      "currency": row.currency} for row in rows],
            "total": [{"cost": float(amount), "currency": c} for c, amount in totals.items()],
            "unpriced_runs": unpriced}, indent=2))
        return 0
    if unpriced:
        err(f"{unpriced} run{'' if unpriced == 1 else 's'} left out: their host has no price "
             f"(price_per_hour or price_per_gpu_hour in {hostconfig.default_config_path()}).")
    window = f" in the last {args.since.strip()}" if args.since else ""
    if not rows:
        print(f"nothing spent{window}.")
        return 0
    table: list[tuple[str, ...]] = [(args.by.upper(), "RUNS", "COST")]
    table += [(row.key, str(row.runs), cost.money(row.amount, row.currency)) for row in rows]
    table += [(f"total{window}", "", " + ".join(cost.money(a, c) for c, a in totals.items()))]
    if args.by == "run":  # a row per run: RUNS would read 1 on every row
        table = [(key, money) for key, _runs, money in table]
    line = "  ".join(f"{{:<{max(map(len, column))}}}" for column in zip(*table))
    print("\n".join(line.format(*row).rstrip() for row in table))
    return 0
