"""The one cost rule's core: which seconds of a run's attempt history ran, and so cost.

Stdlib only, and it imports nothing of ours: the run's host runs it too, inside
notify.pyz (core/notify/host_send.py), so the message the host sends bills exactly as
the client's `status`, `runs`, `costs`, the app and the client's notifications do
(core/runs/cost.py, which turns these seconds into money; a property test holds them
to one figure: tests/unit/test_cost_faces.py).

Times are whole microseconds (ints), so summing is exact: the host writes epoch seconds,
the index ISO text with microseconds; a float epoch near 1.7e9 keeps only ~16 digits.

The rule, over attempts.jsonl's records merged by attempt number:
- an attempt runs from its launch (`launched`: a `--queue` attempt got its GPUs, a Slurm
  job left the queue) or, never launched by a queue, its `started`; attempt 1 with
  neither from the run's own start. Time before the launch is a wait: never billed.
- a requeued Slurm job (preemption, a node failure) runs its batch script again as the
  same attempt: its `launched` is then the new start and `ran` the seconds the attempt
  already ran before it, so the earlier running time is billed and the wait between is
  not (core/backends/slurm/run.sbatch.sh).
- an attempt ends at its `ended`, else when the next one began (its `started`, before
  any wait of its own); the last one where its run ended (the caller says: the host's
  end time, now for a live run, its start for one still waiting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Optional, Tuple  # noqa: UP035 (the host's Python 3.8: see Span)

US = 1_000_000
# Host text: an attempt number past this is not one (a bound, R09). The same bound as
# attempt_layout.MAX_ATTEMPT (this module imports nothing of ours, as it runs on the host;
# tests/unit/test_cost.py holds the two equal).
MAX_ATTEMPT = 1000
# (start, end) in microseconds since the epoch. Spelled with typing's names: this line runs
# when notify.pyz imports the module on the host's Python, 3.8 included, where
# `tuple[int | None, ...]` raises TypeError.
Span = Tuple[Optional[int], Optional[int]]  # noqa: UP006, UP045


def when_us(value: object) -> int | None:
    """A time as the host (epoch seconds) or the index (ISO text) writes it, in
    microseconds since the epoch; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 < value < 2**40:
        return value * US
    if isinstance(value, float) and 0 < value < 2**40:
        return round(value * US)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)  # noqa: UP017 (the host's Python may be old)
        delta = parsed - datetime(1970, 1, 1, tzinfo=timezone.utc)  # noqa: UP017
        return (delta.days * 86400 + delta.seconds) * US + delta.microseconds
    return None


def _seconds(value: object) -> int:
    """`ran`: whole seconds an attempt ran before its last launch (0 when not said)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**40:
        return value * US
    return 0


def merged(attempts: Sequence[Mapping[str, object]]) -> dict[int, dict[str, object]]:
    """attempts.jsonl's records by attempt number, later lines winning (as they are written)."""
    by_number: dict[int, dict[str, object]] = {}
    for a in attempts:
        n = a.get("attempt")
        if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_ATTEMPT:
            by_number.setdefault(n, {}).update(a)
    return by_number


def spans(attempts: Sequence[Mapping[str, object]], run_start: int | None) -> list[Span]:
    """Each attempt's (start, end) in microseconds, oldest first: its end as recorded, or
    (None when not) when the next one began (its `started`: before any wait of its own)."""
    by_number = merged(attempts)
    found: list[Span] = []
    began: list[int | None] = []
    for n in sorted({1, *by_number}):
        one = by_number.get(n, {})
        launched = when_us(one.get("launched"))
        started = when_us(one.get("started"))
        start = launched - _seconds(one.get("ran")) if launched is not None else started
        if n == 1 and start is None:
            start = run_start
        began.append(started if started is not None else start)
        if never_launched(one) and n != max(by_number, default=1):
            start = None  # claimed by a resume, never launched: nothing of it ran
        found.append((start, when_us(one.get("ended"))))
    # An attempt whose end was not recorded ended as the next one began.
    return [(start, ended if ended is not None or i == len(found) - 1 else began[i + 1])
            for i, (start, ended) in enumerate(found)]


def never_launched(record: Mapping[str, object]) -> bool:
    """An attempt a resume claimed and the next resume found never launched: the probe
    said `unknown`, with no exit code and no launch recorded."""
    return (record.get("state") == "unknown" and record.get("exit") is None
            and record.get("launched") is None)


def closed(found: Sequence[Span], last_end: int | None) -> list[tuple[int, int]]:
    """`found` with the last one's end decided (`last_end`); spans with no start, or no
    time after it, dropped."""
    out = []
    for i, (start, ended) in enumerate(found):
        end = last_end if i == len(found) - 1 else ended
        if start is not None and end is not None and end > start:
            out.append((start, end))
    return out


def billed_us(intervals: Sequence[tuple[int, int]], since: int | None = None,
              until: int | None = None) -> int:
    """The microseconds of `intervals` inside [since, until) (all of them without)."""
    total = 0
    for start, end in intervals:
        start = max(start, since) if since is not None else start
        end = min(end, until) if until is not None else end
        total += max(0, end - start)
    return total
