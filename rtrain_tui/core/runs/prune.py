"""`runs --prune`: which ended runs are old enough to forget (the index never forgets a run
by itself)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.run_record import RunRecord, parse_time

PRUNABLE = ("completed", "failed", "stopped", "lost")  # `failed` covers `failed (exit N)`


def parse_age(text: str) -> timedelta:
    """`90d`, `12w`, `36h` as a duration; ValidationError otherwise."""
    match = re.fullmatch(r"(\d{1,6})([hdw])", text.strip())
    if not match:
        raise ValidationError(f"--older-than {text!r} is not an age: a number and h, d or w "
                              "(hours, days, weeks), e.g. 90d.")
    hours = {"h": 1, "d": 24, "w": 24 * 7}[match.group(2)]
    return timedelta(hours=int(match.group(1)) * hours)


def prunable(records: Sequence[RunRecord], older_than: timedelta,
             states: Sequence[str] = PRUNABLE, now: datetime | None = None) -> list[RunRecord]:
    """The runs whose state is final and one of `states`, that ended more than
    `older_than` before `now`: by their end time, else when their state last changed,
    else when they started. A run with none of those times is never pruned."""
    for state in states:
        if state not in PRUNABLE:
            raise ValidationError(f"--state {state!r}: only runs that ended can be pruned "
                                  f"({', '.join(PRUNABLE)}).")
    cutoff = (now or datetime.now(UTC)) - older_than
    out = []
    for rec in records:
        word = "failed" if rec.state.startswith("failed") else rec.state
        if word not in states or not probes.is_final(rec.state):
            continue
        when = next((t for t in map(parse_time, (rec.ended_at, rec.updated_at, rec.started_at))
                     if t is not None), None)
        if when is not None and when < cutoff:
            out.append(rec)
    return out
