"""What a run costs: the one rule every face bills by, to the cent.

`status`, `runs`, `costs` (every `--by`), the app's runs table and compare screen, and
every notification (the client's, core/notify/notifier.py, and the host's own,
core/notify/host_send.py) bill through `run_cost` here, or, on the host, through the
same seconds (core/runs/cost_rule.py); tests/unit/test_cost_faces.py holds them to one
figure for any attempt history.

- Time that costs is the time an attempt ran: from its launch to its end, summed over the
  attempts of a resumed or retried run and the runs of a requeued Slurm job (cost_rule.py
  says which seconds those are). Waiting (`queued`, `starting`, a `--queue` run's wait for
  GPUs, a Slurm job's time in the queue, the gaps between attempts) never costs.
- The index keeps what the host told (`recorded`): when the current attempt began
  running (`running_at`), the seconds the attempts before it ran (`earlier_s`), the
  host's retry loop's waits (`retry_wait_s`) and when the run ended (`ended_at`). Billed
  from the index alone a run then costs what its history does, so `runs` and `costs`
  (which ask no host) agree with `status`; and an ended run, its end recorded, costs the
  same tomorrow. For the first attempt of a run that waited and whose launch is not
  known (read from the index before any look at its host saw it launched), the start
  time is taken: an over-estimate, never an under-estimate, of what was held.
- Money is Decimal: seconds are summed exactly (microseconds) and multiplied once, then
  rounded to the cent (half up), so no float drift and no per-attempt rounding.
- With an ETA (the progress summary's), a running run also gets a projection: what it will
  have cost when it ends, `$12.40 → ~$18.10`.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from rtrain_tui.core.runs import cost_rule, probes
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunKey, RunRecord, parse_time

CENT = Decimal("0.01")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
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


def intervals(record: RunRecord, now: datetime, attempts: Sequence[Mapping[str, Any]] = (),
              state: str | None = None) -> list[tuple[int, int]]:
    """The run's running intervals, microseconds since the epoch: from the host's attempt
    history when given (attempts.jsonl, merged by attempt), else from the index alone.
    `state`: the run's state when newer than the record's (a probe's)."""
    state = state or record.state
    if attempts:
        found = cost_rule.spans(attempts, cost_rule.when_us(record.started_at))
    else:
        found = _index_spans(record)
    last = found[-1][0] if found else None
    return cost_rule.closed(found, _end_of_run(record, state, last, now))


def _index_spans(record: RunRecord) -> list[cost_rule.Span]:
    """A run's attempts as the index keeps them: the attempts before the current one as
    their seconds (`earlier_s`, placed from its first start: when in between they ran is
    not kept), then the current one from its launch (`running_at`, once a refresh or
    `status` read it), else its start. The host's retry loop's waits (`retry_wait_s`)
    ran nothing: placed at the current attempt's start (where is not kept either)."""
    first = cost_rule.when_us(record.started_at)
    found: list[cost_rule.Span] = []
    current = cost_rule.when_us(record.running_at)
    if record.attempt_started_at and first is not None:
        found.append((first, first + round(record.earlier_s * cost_rule.US)))
        current = current or cost_rule.when_us(record.attempt_started_at)
    current = current or first
    if current is not None:
        current += round(max(0.0, record.retry_wait_s) * cost_rule.US)
    found.append((current, None))
    return found


def seconds_billed(record: RunRecord, now: datetime, attempts: Sequence[Mapping[str, Any]] = (),
                   state: str | None = None, since: datetime | None = None,
                   until: datetime | None = None) -> Decimal:
    """Seconds the run's attempts ran (exact, to the microsecond); see the module docstring.

    `since`/`until`: only the part of that time inside this window (`costs --since`,
    `--by day`)."""
    got = cost_rule.billed_us(intervals(record, now, attempts, state), _us(since), _us(until))
    return Decimal(got) / cost_rule.US


def _us(when_: datetime | None) -> int | None:
    return None if when_ is None else cost_rule.when_us(when_.isoformat())


def _iso(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=us)).isoformat()


def _end_of_run(record: RunRecord, state: str, start: int | None, now: datetime) -> int | None:
    if state in _WAITING:
        return start  # waiting: the attempt has cost nothing yet
    if state == probes.RUNNING:
        return _us(now)
    if state == probes.UNKNOWN and not record.ended_at:
        return start  # never launched, or nothing can be told: nothing is billed
    # Ended: by the host's clock when known, else when we saw it change (an upper bound);
    # recorded, so an ended run's cost never grows (`recorded` below writes it down).
    return cost_rule.when_us(record.ended_at) or cost_rule.when_us(record.updated_at) or _us(now)


def recorded(record: RunRecord, attempts: Sequence[Mapping[str, Any]], state: str,
             ended: datetime | None, now: datetime) -> RunRecord:
    """`record` with what a look at its host taught (its attempt history, its state and,
    ended, when), folded into the index's cost fields: billed from the index alone it
    then costs exactly what the history does (to the microsecond), in every face. An end
    already recorded is never moved; an ended run with none gets `ended`, else `now`."""
    changed = replace(record, state=state)
    if probes.is_final(state) and not record.ended_at:
        changed = replace(changed, ended_at=(ended or now).isoformat())
    by_number = cost_rule.merged(attempts)
    if not by_number:
        return changed
    found = cost_rule.spans(attempts, cost_rule.when_us(record.started_at))
    last = found[-1][0]
    first = cost_rule.when_us(record.started_at)
    if last is None or first is None:
        return changed
    before = cost_rule.billed_us(cost_rule.closed(found, None))  # the last is left out
    several = len(found) > 1
    return replace(changed, earlier_s=before / cost_rule.US if several else 0.0,
                   attempt_started_at=_iso(last) if several else "",
                   running_at=_iso(last) if last != first else "", retry_wait_s=0.0,
                   # The host's count: a refresh then takes its later launch times as
                   # this attempt's, and the retry waits already left out stay out.
                   attempt=max(record.attempt, max(by_number)))


def next_attempt(old: RunRecord, ended: int | None, now: str) -> dict[str, Any]:
    """The index's cost fields for a new attempt starting `now` (a resume): the attempt
    before ran from its launch (`running_at`: a `--queue` attempt's wait for GPUs is not
    billed) or start to `ended` (the host's clock), less its retry loop's waits. With no
    end known they stay as they were: the run then counts from its first start, gaps and
    all (an over-estimate, never a lost attempt)."""
    if ended is None or not (old.running_at or old.attempt_started_at or old.started_at):
        return {}
    current = _index_spans(old)[-1][0]
    if current is None:
        return {}
    ran = max(0, ended * cost_rule.US - current)
    return {"attempt_started_at": now, "earlier_s": round(old.earlier_s + ran / cost_rule.US, 6),
            "retry_wait_s": 0.0}


def with_running(record: RunRecord, running: tuple[int, str, int | None] | None) -> RunRecord:
    """`record` as the index will keep it once a probe said when an attempt began
    running (`(attempt, ISO time, retry waits)`, engine's `_running`): the same rule as
    the index's `set_states(running=...)`, for a message composed before that write."""
    if running is None:
        return record
    attempt, at, waited = running
    if attempt == record.attempt and at:
        record = replace(record, running_at=at)
    if waited is not None and attempt > record.attempt:
        record = replace(record, retry_wait_s=float(waited))
    return record


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
    ran = intervals(record, now)
    if not ran:
        return []
    start, end = (_EPOCH + timedelta(microseconds=us) for us in (ran[0][0], ran[-1][1]))
    day = max(start, since or start).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days: list[datetime] = []
    while day <= end and len(days) < 3660:
        days.append(day)
        day += timedelta(days=1)
    return days
