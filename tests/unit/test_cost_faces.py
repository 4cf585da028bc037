"""One cost rule, every face (issue 26, item 5): for any attempt history (resumes, the
host's retries, `--queue` waits, requeued Slurm jobs, gaps), what each face bills is the
same figure, to the cent: `status --json` (the history read from the host, recorded in
the index), `runs` and the app's table (the index alone, through its TOML), `costs` by
host, run and day, the client's notification and the host's own (notify.pyz)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtrain_tui.core.notify import host_send, notifier
from rtrain_tui.core.runs import cost, hostconfig
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunIndex, RunRecord

T0 = 1_790_000_000  # epoch seconds: the run's start
PRICE = Price(Decimal("3.17"))


def _config() -> hostconfig.HostConfig:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.toml"
        path.write_text("[hosts.gpu]\nprice_per_hour = 3.17\n", encoding="utf-8")
        return hostconfig.load(path)


CONFIG = _config()


@dataclass(frozen=True)
class Attempt:
    gap: int  # seconds between the attempt before's end and this one's start (a resume, a retry)
    wait: int  # seconds it waited for GPUs or in Slurm's queue before it ran
    pieces: tuple[tuple[int, int], ...]  # (seconds it ran, then waited requeued) per run of its job
    end_recorded: bool  # attempts.jsonl has its end (a resume or retry wrote it)


attempt = st.builds(
    Attempt, gap=st.integers(0, 5_000), wait=st.integers(0, 5_000),
    pieces=st.lists(st.tuples(st.integers(1, 40_000), st.integers(0, 3_000)), min_size=1,
                    max_size=3).map(tuple),
    end_recorded=st.booleans())


def history(attempts: list[Attempt]) -> tuple[list[dict[str, Any]], int, int]:
    """attempts.jsonl as the host writes it for these attempts, the run's end (epoch
    seconds) and the seconds that truly ran."""
    lines: list[dict[str, Any]] = []
    at, ran_total = T0, 0
    for n, a in enumerate(attempts, 1):
        at += a.gap if n > 1 else 0
        if n > 1:
            lines.append({"attempt": n, "started": at})
        at += a.wait
        ran = 0
        for i, (runs, requeued) in enumerate(a.pieces):
            line: dict[str, Any] = {"attempt": n, "launched": at}
            if ran:
                line["ran"] = ran
            if a.wait or i or n == 1:  # a queue's launch, a requeue's, a Slurm job's first
                lines.append(line)
            at += runs
            ran += runs
            if i < len(a.pieces) - 1:
                at += requeued
        ran_total += ran
        if n < len(attempts) and a.end_recorded:
            lines.append({"attempt": n, "ended": at, "state": "failed (exit 1)", "exit": 1})
        elif n < len(attempts):  # no end recorded: the next attempt starts as it ends
            attempts[n] = replace(attempts[n], gap=0)
    return lines, at, ran_total


def cents(seconds: int) -> str:
    exact = PRICE.amount * seconds / 3600
    return cost.money(exact.quantize(Decimal("0.01"), ROUND_HALF_UP))


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def host_message_cost(lines: list[dict[str, Any]], ended: int, record: RunRecord) -> str:
    """What the run's own host sends (notify.pyz's compose), from its run dir."""
    with tempfile.TemporaryDirectory() as run_dir:
        here = os.getcwd()
        os.chdir(run_dir)
        try:
            Path("attempts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
            Path("status").write_text("0\n")
            os.utime("status", (ended, ended))
            config = json.loads(host_send.settings(
                "gpu", "r", ["json://localhost/hook"], T0, cost.rate_per_hour(PRICE, 1)))
            got = host_send.compose(config, "completed", 0, ended + 3.5)  # sent a moment later
        finally:
            os.chdir(here)
    assert got is not None
    return got.body.split("cost ")[1].split("\n")[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(attempt, min_size=1, max_size=4), st.integers(0, 400_000))
def test_any_attempt_history_costs_the_same_in_every_face(attempts: list[Attempt], later: int) -> None:
    lines, ended, ran = history(list(attempts))
    want = cents(ran)
    now = datetime.fromtimestamp(ended + 60 + later, UTC)  # a minute or days after it ended
    end = datetime.fromtimestamp(ended, UTC)
    live = RunRecord("gpu", "r", "~/w", state="running", started_at=iso(T0),
                     updated_at=iso(T0), attempt=len(attempts))

    # `status --json`: the history from the host, recorded, then billed from the record.
    status = cost.recorded(live, lines, "completed", end, now)
    assert cost.run_cost(status, PRICE, now) is not None
    assert cost.run_cost(status, PRICE, now).text() == want  # type: ignore[union-attr]
    # ...and billed straight from the history, as the rule reads it.
    assert cost.run_cost(replace(live, state="completed", ended_at=iso(ended)), PRICE, now,
                         lines).text() == want  # type: ignore[union-attr]

    # `runs`, the app's table and compare: the record as the index keeps it (TOML and back).
    with tempfile.TemporaryDirectory() as tmp:
        index = RunIndex(Path(tmp) / "runs.toml")
        index.add(status)
        kept = index.get("gpu", "r")
    assert kept is not None
    assert cost.run_cost(kept, PRICE, now).text() == want  # type: ignore[union-attr]
    assert cost.run_cost(kept, PRICE, now, state=kept.state, eta_s=None).text() == want  # type: ignore[union-attr]

    # `costs` by host and by run, and by day to the cent of each day.
    for by in ("host", "run"):
        rows, unpriced = cost.spent_by([kept], lambda _h: PRICE, now, by=by)
        assert unpriced == 0 and [cost.money(r.amount) for r in rows] == [want]
    days, _ = cost.spent_by([kept], lambda _h: PRICE, now, by="day")
    assert abs(sum(r.amount for r in days) - Decimal(want[1:].replace(",", ""))) <= Decimal("0.005") * len(days)

    # The client's notification, composed as a refresh sees the end (before it is recorded).
    seen = notifier.Seen(replace(status, state="running", ended_at=""), "completed", ended_at=iso(ended))
    message = notifier.compose(seen, CONFIG, now)
    assert message is not None and f"cost {want}" in message.body

    # The host's own message (notify.pyz), from its run dir's attempts.jsonl.
    assert host_message_cost(lines, ended, status) == want

