"""`rtrain-tui runs`: the index's runs (alone, or after --refresh / --discover), and --prune."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rtrain_tui.cli.base import ALL_HOSTS, demo_needs_flag, err
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import hostconfig
from rtrain_tui.core.runs.index import (
    PRUNABLE,
    IndexReport,
    RunIndex,
    parse_age,
    parse_time,
    prunable,
)
from rtrain_tui.core.safety import validate

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


async def _discover(engine: Engine, host: str, args: argparse.Namespace) -> int:
    """Add the runs found on one host or all; 1 when there is no host to look at.

    A named host that cannot be reached is an error (raised); with every host, one that
    is down is a warning, so the others' runs still come in.
    """
    if host == ALL_HOSTS:
        hosts = sorted({r.host for r in engine.index.load()})
        if not hosts:
            err("no hosts in the run index yet; name one: rtrain-tui runs --discover HOST")
            return 1
        if "demo" in hosts and demo_needs_flag(args):
            hosts.remove("demo")  # as with --refresh: not served, so not looked at
            err("the demo host was not looked at: add --demo (rtrain-tui --demo runs --discover).")
    else:
        hosts = [host]  # the engine checks the name before it connects
    for name in hosts:
        try:
            added = await engine.discover(name)
        except RemoteError as exc:
            if host != ALL_HOSTS:
                raise
            err(f"warning: {exc}")  # one host down does not hide the others' runs
            continue
        ids = ", ".join(r.run_id for r in added)
        err(f"{name}: found {len(added)} run{'' if len(added) == 1 else 's'} started elsewhere"
             + (f": {ids}" if ids else ""))
    return 0


_NEVER = datetime.min.replace(tzinfo=UTC)


def json_rows(rows: list[dict[str, str | bool | float | None]]) -> str:
    """`json.dumps(rows, indent=2)`, byte for byte, through the C encoder: with `indent`
    json takes its Python one, ~40 µs a run (0.4 s for 10,000). The values are scalars,
    so the item separator only ever falls between two fields. One encoder for all rows:
    `json.dumps` with separators builds a new one per call (a third of the time)."""
    if not rows:
        return "[]"
    encode = json.JSONEncoder(separators=(",\n    ", ": ")).encode
    return "[\n" + ",\n".join("  {\n    " + encode(row)[1:-1] + "\n  }" for row in rows) + "\n]"


def _prune(index: RunIndex, args: argparse.Namespace) -> int:
    """`runs --prune`: list the runs it will forget, then forget exactly those."""
    if args.older_than is None:
        raise validate.ValidationError("--prune needs --older-than, e.g. --older-than 90d.")
    if args.refresh or args.discover is not None or args.json or args.all_runs:
        raise validate.ValidationError("--prune goes alone: not with --refresh, --all, --discover or --json.")
    states = [s.strip() for s in (args.state or ",".join(PRUNABLE)).split(",") if s.strip()]
    age = parse_age(args.older_than)
    report = index.load_report()
    for problem in report.problems:
        err(f"warning: {problem}")
    listed = prunable(report.records, age, states)
    what = f"{'/'.join(states)} runs that ended more than {args.older_than.strip()} ago"
    if not listed:
        print(f"nothing to prune: no {what}.")
        return 0
    n = f"{len(listed)} run{'' if len(listed) == 1 else 's'}"
    print(f"{'would remove' if args.dry_run else 'removing'} {n} from the index "
          f"({what}; nothing on any host is touched):")
    rows = [("HOST", "RUN", "STATE", "ENDED")] + [
        (r.host, r.run_id, r.state, _to_the_second(r.ended_at or r.updated_at or r.started_at))
        for r in listed]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if args.dry_run:
        print("dry run: nothing was removed.")
        return 0
    removed = index.remove_records(listed)
    kept = len(listed) - len(removed)
    print(f"removed {len(removed)} run{'' if len(removed) == 1 else 's'} from {index.path}"
          + (f"; {kept} changed since they were listed and were kept." if kept else "."))
    return 0


def reads_index_only(args: argparse.Namespace) -> bool:
    """`runs` without --refresh or --discover asks no host: it needs no engine, no event
    loop and no SSH library, so `_main` serves it with `list_runs` alone."""
    return args.command == "runs" and not args.refresh and args.discover is None


def list_runs(index: RunIndex, hosts: hostconfig.HostConfig, args: argparse.Namespace) -> int:
    """`runs` (or `runs --prune`) from the local index alone."""
    if args.prune:
        return _prune(index, args)
    _refuse_prune_flags(args)
    return _print_runs(index, hosts, runs_report(index), args)


def _refuse_prune_flags(args: argparse.Namespace) -> None:
    if args.older_than is not None or args.state is not None or args.dry_run:
        raise validate.ValidationError("--older-than, --state and --dry-run go with --prune.")
    if args.all_runs and not args.refresh:
        raise validate.ValidationError("--all goes with --refresh: rtrain-tui runs --refresh --all.")


def runs_report(index: RunIndex) -> IndexReport:
    report = index.load_report()
    for problem in report.problems:  # every mode: `--json` keeps stdout for the runs alone
        err(f"warning: {problem}")
    return report


async def cmd_runs(engine: Engine, args: argparse.Namespace) -> int:
    """`runs --refresh` / `--discover`: ask the hosts, then list as `list_runs` does."""
    from rtrain_tui.core import host_view

    if args.prune:
        return _prune(engine.index, args)  # which says it goes alone
    _refuse_prune_flags(args)
    if args.discover is not None:
        code = await _discover(engine, args.discover, args)
        if code:
            return code
    report = runs_report(engine.index)
    if args.refresh:
        records = report.records
        if demo_needs_flag(args):
            # Without --demo the demo host is not served: probing it would go to DNS and
            # mark every demo run stale. Say what to add instead.
            records = [r for r in records if r.host != "demo"]
            left = len(report.records) - len(records)
            if left:
                err(f"{left} run{'' if left == 1 else 's'} on the demo host not refreshed: "
                     "add --demo (rtrain-tui --demo runs --refresh).")
        # The app's refresh, without the progress column this table does not have.
        # The workdirs' listing rides with each host's probe: an ended run resumed from
        # another laptop, or retried by its host, is probed again (no extra round trip
        # when none did).
        await host_view.refresh(engine, records, words=False, all_runs=args.all_runs,
                                went_on=not args.all_runs)
        await engine.notified()  # what it sends, so that a failure is said here
        for line in engine.notices:  # e.g. a run lost to a reboot, resumed
            err(line)
        report = engine.index.load_report()
    return _print_runs(engine.index, engine.hosts, report, args)


def _print_runs(index: RunIndex, hosts: hostconfig.HostConfig, report: IndexReport,
                args: argparse.Namespace) -> int:
    # Oldest first, as they were started: the index keeps ended runs in monthly
    # archives, so its file order no longer is that (a run with no start time leads).
    runs = sorted(report.records, key=lambda r: parse_time(r.started_at) or _NEVER)
    costs = _index_costs(hosts, runs)
    if args.json:
        print(json_rows([
            {"host": r.host, "run_id": r.run_id, "state": r.state, "stale": r.stale,
             "started_at": r.started_at, "updated_at": r.updated_at, "ended_at": r.ended_at,
             "workdir": r.workdir, "origin": r.origin or "started", "gpu_ids": r.gpu_ids,
             "backend": hosts.backend_of(r), "slurm_job_id": r.job_id or None,
             "cost": float(c.spent) if c is not None else None,
             "currency": c.currency if c is not None else None}
            for r, c in zip(runs, costs, strict=True)
        ]))
        return 0
    if not runs and report.problems:
        err(f"no usable runs: the index holds {len(report.problems)} that were skipped (above); "
             f"fix or remove them in {index.path}.")
        return 0
    if not runs:
        print("no runs yet; start one with: rtrain-tui start HOST -c CONFIG -d DATASET "
              "(or find those started elsewhere: rtrain-tui runs --discover HOST)")
        return 0
    rows: list[tuple[str, ...]] = [("HOST", "RUN", "STATE", "STARTED")]
    rows += [(r.host, r.run_id, r.state + (" (stale)" if r.stale else "")
              + (" (found)" if r.origin == "found" else ""), _to_the_second(r.started_at)) for r in runs]
    if any(c is not None for c in costs):  # a COST column once some host has a price
        rows = [(*rows[0], "COST")] + [(*row, c.text() if c is not None else "-")
                                       for row, c in zip(rows[1:], costs, strict=True)]
    # One format string and one write, not a join per row and a print per run (10,000).
    line = "  ".join(f"{{:<{max(map(len, column))}}}" for column in zip(*rows))
    print("\n".join(line.format(*row).rstrip() for row in rows))
    return 0


def _to_the_second(when: str) -> str:
    """An index time for people: the index keeps microseconds (they order its events)."""
    parsed = parse_time(when)
    return parsed.replace(microsecond=0).isoformat() if parsed is not None else when


def _index_costs(hosts: hostconfig.HostConfig, runs: list[Any]) -> list[Any]:
    """Each run's cost from the index alone (None where its host has no price): no host
    is asked, so a resumed run counts from its first start and a live run until now."""
    prices = {h: hosts.for_host(h).price for h in {r.host for r in runs}}
    if not any(prices.values()):
        return [None] * len(runs)  # no price anywhere: the cost rule is not even imported
    from rtrain_tui.core.runs import cost

    now = datetime.now(UTC)
    return [cost.run_cost(r, prices[r.host], now) for r in runs]
