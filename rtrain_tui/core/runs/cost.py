"""What a run costs: the one rule the CLI (`status --json`, `runs`, `costs`) and the app use.

Pure: from the run's record (GPUs held, start, end, state), its attempts (attempts.jsonl,
when the host was asked), the host's price (config.toml) and "now" for a live run.

- Time that costs is the time an attempt ran: from its launch to its end, summed over the
  attempts of a resumed or retried run (the gaps between them cost nothing).
- A run waiting (`queued`, `starting`) costs nothing while it waits: its current attempt
  counts from its launch. The launch time is an attempt's `launched` when the host
  recorded one (the direct wrapper once a `--queue` run got its GPUs, a Slurm job as it
  starts); else its `started` (a resume or retry writes it as it launches). The index
  keeps the current attempt's launch once a refresh read it (`running_at`), so `runs`
  and `costs` count as `status --json` does; likewise the seconds the host's retry loop
  waited between attempts once a refresh read them (`retry_wait_s`). For the first
  attempt of a run that waited and whose launch is not known (read from the index before
  any refresh saw it launched), the start time is taken: the wait is then counted (an
  over-estimate, never an under-estimate, of what was held).
- An attempt with no end time recorded (a retry's ended record before it carried one)
  is taken to have ended when the next one started.
- Money is Decimal: seconds are summed exactly (microseconds) and multiplied once, then
  rounded to the cent (half up), so no float drift and no per-attempt rounding.
- With an ETA (the progress summary's), a running run also gets a projection: what it will
  have cost when it ends, `$12.40 → ~$18.10`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunKey, RunRecord, parse_time

CENT = Decimal("0.01")
_US = timedelta(microseconds=1)
_WAITING = (probes.QUEUED, probes.STARTING)


@dataclass(frozen=True)
class Cost:
    """A run's cost so far, and (running, with an ETA) what it will be at its end."""

    spent: Decimal
    at_end: Decimal | None = None
    currency: str = "$"

    def text(self) -> str:
        """`$12.40`, or `$12.40 → ~$18.10` with a projection."""
        spent = money(self.spent, self.currency)
        return spent if self.at_end is None else f"{spent} → ~{money(self.at_end, self.currency)}"


def money(amount: Decimal, currency: str = "$") -> str:
    """`$1,234.50`: to the cent, thousands grouped."""
    return f"{currency}{amount.quantize(CENT, ROUND_HALF_UP):,.2f}"


def when(value: object) -> datetime | None:
    """A time as the index (ISO text) or the host (epoch seconds) writes it; None if none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and 0 < value < 2**40:
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str) and value:
        return parse_time(value)
    return None


def seconds_billed(record: RunRecord, now: datetime, attempts: Sequence[Mapping[str, Any]] = (),
                   state: str | None = None, since: datetime | None = None,
                   until: datetime | None = None) -> Decimal:
    """Seconds the run's attempts ran (exact, to the microsecond); see the module docstring.

    `state`: the run's state when newer than the record's (a probe's); `since`/`until`:
    only the part of that time inside this window (`costs --since`, `--by day`)."""
    state = state or record.state
    spans = _attempt_starts(record, attempts or _from_index(record))
    total = 0
    for i, (start, ended) in enumerate(spans):
        last = i == len(spans) - 1
        if last:
            end = _end_of_run(record, state, start, now)
        else:
            end = ended or spans[i + 1][0]
        if start is None or end is None:
            continue
        start = max(start, since) if since is not None else start
        end = min(end, until) if until is not None else end
        if end > start:
            total += (end - start) // _US
    if not attempts and since is None and until is None:
        # The index alone: the host's retry loop's waits (`retry_wait_s`) ran nothing.
        # (Where in the run they fell is not kept, so a window keeps them: an over-estimate.)
        total = max(0, total - round(record.retry_wait_s * 1_000_000))
    return Decimal(total) / 1_000_000


def _attempt_starts(record: RunRecord,
                    attempts: Sequence[Mapping[str, Any]]) -> list[tuple[datetime | None, datetime | None]]:
    """(launch, end) of each attempt, oldest first; one attempt when none are recorded."""
    by_number = {a["attempt"]: a for a in attempts if isinstance(a.get("attempt"), int)}
    spans = []  # the index alone (no attempts): one span, from the run's start
    for n in range(1, max(by_number, default=1) + 1):
        one = by_number.get(n, {})
        start = when(one.get("launched")) or when(one.get("started"))
        if n == 1 and start is None:
            start = parse_time(record.started_at)
        spans.append((start, when(one.get("ended"))))
    return spans


def _from_index(record: RunRecord) -> list[dict[str, Any]]:
    """A run's attempts as the index keeps them: for a resumed one, the earlier ones'
    seconds (placed from its first start: when in between they ran is not kept) and the
    current one's start; the current one's launch once a refresh read it (`running_at`).
    [] for a run never resumed here whose launch is not kept."""
    first = parse_time(record.started_at)
    launched = {"launched": record.running_at} if record.running_at else {}
    if not record.attempt_started_at or first is None:
        return [{"attempt": 1, "started": record.started_at, **launched}] if launched else []
    earlier = first + timedelta(seconds=record.earlier_s)
    return [{"attempt": 1, "started": record.started_at, "ended": earlier.isoformat()},
            {"attempt": 2, "started": record.attempt_started_at, **launched}]


def _end_of_run(record: RunRecord, state: str, start: datetime | None,
                now: datetime) -> datetime | None:
    if state in _WAITING:
        return start  # waiting: the attempt has cost nothing yet
    if state == probes.RUNNING:
        return now
    if state == probes.UNKNOWN and not record.ended_at:
        return start  # never launched, or nothing can be told: nothing is billed
    # Ended: by the host's clock when known, else when we saw it change (an upper bound).
    return parse_time(record.ended_at) or parse_time(record.updated_at) or now


def rate_per_hour(price: Price, gpus: int) -> Decimal:
    """What the run pays an hour: the box's price, or the GPU-hour price × GPUs held
    (every node's: `gpus_held`)."""
    return price.amount * max(0, gpus) if price.per_gpu else price.amount


def gpus_held(record: RunRecord) -> int:
    """The GPUs a run holds while it runs: each of its nodes holds `gpus`."""
    return max(0, record.gpus) * max(1, record.nodes)


def run_cost(record: RunRecord, price: Price | None, now: datetime,
             attempts: Sequence[Mapping[str, Any]] = (), state: str | None = None,
             eta_s: float | None = None, since: datetime | None = None,
             until: datetime | None = None) -> Cost | None:
    """The run's cost (None when its host has no price); with `eta_s` (seconds left, from
    the metrics) and a running run, the projection at its end too. `since`/`until`: what
    it spent inside that window only (no projection then)."""
    if price is None:
        return None
    state = state or record.state
    rate = rate_per_hour(price, gpus_held(record))
    spent_s = seconds_billed(record, now, attempts, state, since, until)
    spent = _cents(rate * spent_s / 3600)
    at_end = None
    if state == probes.RUNNING and eta_s is not None and eta_s >= 0 and since is None and until is None:
        at_end = _cents(rate * (spent_s + Decimal(round(eta_s))) / 3600)
    return Cost(spent, at_end, price.currency)


def _cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, ROUND_HALF_UP)


# -- what was spent (`rtrain-tui costs`) -------------------------------------------------
BY = ("host", "day", "run")


@dataclass(frozen=True)
class Spent:
    """One row of `costs`: a host, a day (UTC, `2026-11-30`) or a run (`host/run`), in one
    currency, with how many runs spent there."""

    key: str
    currency: str
    amount: Decimal
    runs: int


def spent_by(records: Sequence[RunRecord], price_of: Callable[[str], Price | None], now: datetime,
             by: str = "host", since: datetime | None = None) -> tuple[list[Spent], int]:
    """What the runs of the index spent since `since`, grouped `by` host, day or run;
    and how many runs were left out because their host has no price. From the index
    alone (no host is asked): one span per run, from its start to its end.

    A run is cut at each UTC midnight for `by="day"`, so each day gets its own share.
    """
    sums: dict[tuple[str, str], tuple[Decimal, set[RunKey]]] = {}
    unpriced = 0
    for r in records:
        price = price_of(r.host)
        if price is None:
            unpriced += 1
            continue
        pieces: list[tuple[str, Cost | None]]
        if by == "day":
            pieces = [(day.date().isoformat(), run_cost(r, price, now, since=max(day, since or day),
                                                        until=day + timedelta(days=1)))
                      for day in _days(r, now, since)]
        else:
            pieces = [(r.host if by == "host" else f"{r.host}/{r.run_id}",
                       run_cost(r, price, now, since=since))]
        for key, cost in pieces:
            if cost is None or (not cost.spent and (by == "day" or since is not None)):
                continue  # nothing spent in the window: not one of its runs
            amount, runs = sums.get((key, price.currency), (Decimal(0), set()))
            runs.add(r.key)
            sums[key, price.currency] = (amount + cost.spent, runs)
    rows = [Spent(k, c, a, len(runs)) for (k, c), (a, runs) in sums.items()]
    return sorted(rows, key=lambda s: (s.key, s.currency)), unpriced


def _days(record: RunRecord, now: datetime, since: datetime | None) -> list[datetime]:
    """The UTC midnights of the days the run's span touches (within `since`)."""
    start = parse_time(record.started_at)
    if start is None:
        return []
    end = _end_of_run(record, record.state, start, now) or start
    day = max(start, since or start).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days: list[datetime] = []
    while day <= end and len(days) < 3660:
        days.append(day)
        day += timedelta(days=1)
    return days
