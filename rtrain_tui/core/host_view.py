"""What a run's row shows, headless: the one place a refreshed run is worded.

The app's refresher (one host per refresh) and the CLI (`runs --refresh`, `status`) both
refresh through `refresh`, and word a single run through `run_line`, so a run reads the
same in either face: its state word, the progress text beside it (`1840/3000 ▕███   ▏
loss 1.234 · 48m58s`, or the log's last line), why it waits or ended badly (the one
reason function, `run_reason.reason_for`), and the runs a refresh found started elsewhere.

The wording is pure (`waiting_text`, `reason_cell`, `progress_text`, `reached`) and
unit-tested; `refresh` and `run_line` only gather what it words. Reading a run's log costs
an SFTP read, so a refresh words only what can have changed: running runs every time,
an ended run once (its final values and reason; the caller passes back the `settled`
keys), a queued run from what its probe said (it has no log yet).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rtrain_tui.core.errors import RemoteError, StuckError
from rtrain_tui.core.logs.logparse import progress_of
from rtrain_tui.core.logs.logstream import read_tail
from rtrain_tui.core.logs.run_reason import needs_reason, reason_for
from rtrain_tui.core.metrics.metrics import Summary
from rtrain_tui.core.metrics.metrics_format import progress_cell
from rtrain_tui.core.metrics.metrics_sync import sync_metrics
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.probes import RunProbe

RunKey = tuple[str, str, str]
PROGRESS_WIDTH = 28  # the log's last line, when it holds no metrics
REASON_WIDTH = 38  # a failure reason in the runs table (elapsed still fits at 140 columns); the toast and `status --json` have it whole
QUEUE_WAIT = "waiting in the queue"  # a queued run whose scheduler gave no reason
STALL_QUIET = 60.0  # seconds a run whose progress read got no answer is left unread


@dataclass(frozen=True)
class RunLine:
    """One run as a refresh words it. `progress` None: nothing new to show (a host's
    answer that could not be read keeps what was shown before)."""

    key: RunKey
    state: str
    progress: str | None = None
    reason: str = ""  # why it ended badly, whole (the end-of-run toast, `status`)
    waiting: str = ""  # why a queued run waits, as its row says it
    settled: bool = False  # an ended run's final line: not worded again
    queue_place: int | None = None  # a waiting job's place in its queue (1 = next), when probed
    eta_s: float | None = None  # a running run's time left, from its metrics (its projected cost)


@dataclass(frozen=True)
class HostView:
    """One host after a refresh: its runs' states and lines, and the runs found there."""

    host: str
    states: Mapping[RunKey, str] = field(default_factory=dict)
    lines: tuple[RunLine, ...] = ()
    found: tuple[RunRecord, ...] = ()
    # Did the host answer? None: as its states say. Set where they cannot say it: the
    # runs the refresh left alone (settled) keep their final states whatever the host did.
    answered: bool | None = None

    @property
    def reached(self) -> bool:
        return reached(self.states) if self.answered is None else self.answered


def reached(states: Mapping[RunKey, str]) -> bool:
    """Did the host answer? Any run not `unreachable` says so; no runs asked, no verdict."""
    return not states or any(s != probes.UNREACHABLE for s in states.values())


def waiting_text(why: str) -> str:
    """A queued run (Slurm) has no log yet: its row says why it waits. A box's queue
    words its reason itself (`waiting for 2 free GPU(s): …`): not said twice."""
    if why.startswith("waiting for "):
        return why
    return f"waiting: {why}" if why else QUEUE_WAIT


def stall_cell(reason: str, progress: str | None) -> str:
    """`⚠ stalled: no output for 17m · step 40/100 …`: a stalled run's row."""
    return f"⚠ {reason}" + (f" · {progress}" if progress else "")


def reason_cell(reason: str, width: int = REASON_WIDTH) -> str:
    """`✗ CUDA out of memory …`: a failure reason, cut to fit beside the state."""
    short = reason if len(reason) <= width else reason[:width - 1] + "…"
    return f"✗ {short}"


def attempt_cell(cell: str, attempt: int) -> str:
    """A resumed run's cell says which attempt it shows: `attempt 2 · 180/300 ▕██▏ …`."""
    if attempt <= 1:
        return cell
    return f"attempt {attempt} · {cell}" if cell else f"attempt {attempt}"


def progress_text(summary: Summary, running: bool, tail: Sequence[str] | None = None) -> str:
    """The metrics' progress cell; with none in the log, its last line (`tail`)."""
    cell = progress_cell(summary, running=running)
    if not cell and tail is not None:
        cell = progress_of(list(tail), width=PROGRESS_WIDTH)
    return cell


async def _progress(engine: Any, record: RunRecord, running: bool,
                    eta: dict[RunKey, float] | None = None) -> str | None:
    """The run's progress text, reading only new log bytes; None when it cannot be read.
    Its time left goes into `eta`, when given and known.

    Raises StuckError when the host never answered a read (see `lines_for`)."""
    try:
        parser = await sync_metrics(engine, record.host, record.workdir, record.run_id)
        summary = parser.summary()
        if eta is not None and summary.eta_seconds is not None:
            eta[record.key] = summary.eta_seconds
        cell = progress_text(summary, running)
        if not cell:
            tail = await read_tail(engine, record.host, record.workdir, record.run_id)
            cell = progress_text(summary, running, tail)
        return cell
    except StuckError:
        raise
    except (RemoteError, OSError):
        return None
    except Exception as exc:  # noqa: BLE001
        # The parsers never raise on log text (tests/unit/test_props_log_parsers.py); should
        # one still, it costs this run's cell, never the host's refresh (the states of
        # every other run on it), and it says so.
        return f"progress unreadable: {type(exc).__name__}"


async def lines_for(engine: Any, records: Sequence[RunRecord], states: Mapping[RunKey, str],
                    settled: Collection[RunKey] = (),
                    stalled: MutableMapping[RunKey, float] | None = None) -> tuple[RunLine, ...]:
    """The lines a refresh that answered `states` gives `records` (one host's, in order).

    Running runs get their live progress; an ended run not yet in `settled` its final
    values and, when it failed or was lost, why (costs a probe and a log tail); a queued
    run why it waits, from the scheduler's word the refresh heard (`engine.reasons`).

    `stalled` (the caller's memory, {key: time.monotonic() until which}): a running run
    whose read got no answer (its log on a hung NFS mount) is not read again for
    `STALL_QUIET` seconds; each try waited the whole SFTP bound (20 s), and the host's
    next refresh waited behind it.
    """
    lines: dict[RunKey, RunLine] = {}
    etas: dict[RunKey, float] = {}
    for r in records:
        if states.get(r.key) == probes.RUNNING:
            if stalled is not None and stalled.get(r.key, 0.0) > time.monotonic():
                continue
            try:
                cell = await _progress(engine, r, running=True, eta=etas)
            except StuckError:
                if stalled is not None:
                    stalled[r.key] = time.monotonic() + STALL_QUIET
                continue
            if stalled is not None:
                stalled.pop(r.key, None)
            # A stall the host's watchdog saw (`stalled: no output for 17m`) goes first:
            # the run keeps its word, the reason says why to look.
            why = engine.reasons.get(r.key, "")
            if why.startswith(probes.STALL_WORDS):
                lines[r.key] = RunLine(r.key, probes.RUNNING, stall_cell(why, cell), reason=why,
                                       eta_s=etas.get(r.key))
            elif cell is not None:
                lines[r.key] = RunLine(r.key, probes.RUNNING, cell, eta_s=etas.get(r.key))
    # An ended run shows its final values (and why it failed) once, not what the last
    # poll before its end happened to catch.
    ended = [r for r in records if r.key not in settled and probes.is_final(states.get(r.key, ""))]
    for r in ended:
        try:
            cell = await _progress(engine, r, running=False)
        except StuckError:
            cell = None
        lines[r.key] = RunLine(r.key, states[r.key], cell, settled=True)
    for r in ended:
        if needs_reason(states[r.key]):
            try:
                reason = await reason_for(engine, r.host, r.workdir, r.run_id)
            except RemoteError:
                continue
            if reason:
                lines[r.key] = RunLine(r.key, states[r.key], reason_cell(reason), reason=reason,
                                       settled=True)
    for r in records:
        if states.get(r.key) == probes.QUEUED:
            why = waiting_text(engine.reasons.get(r.key, ""))
            lines[r.key] = RunLine(r.key, probes.QUEUED, why, waiting=why)
    attempts = {r.key: r.attempt for r in records if r.attempt > 1}
    return tuple(replace(line, progress=attempt_cell(line.progress, attempts[key]))
                 if key in attempts and line.progress is not None else line
                 for key, line in lines.items())


async def refresh(engine: Any, records: Sequence[RunRecord], settled: Collection[RunKey] = (),
                  *, words: bool = True, sample_gpus: bool = False,
                  find: bool = False, all_runs: bool = False,
                  went_on: bool = False) -> dict[str, HostView]:
    """Refresh `records` (one probe per host, all hosts at once) into one view per host.

    `words=False` only refreshes states (the index and `states`), reading no log;
    `sample_gpus`, `find`, `all_runs` and `went_on` are `Engine.refresh`'s (`find`: the
    runs started elsewhere join the index and each view's `found`, and the settled runs
    that went on since are probed, as with `went_on`; `all_runs`: the settled runs are
    probed too). A settled run the refresh did not probe keeps its index state in `states`.
    """
    found: dict[str, list[RunRecord]] = {}

    def on_found(host: str, added: list[RunRecord]) -> None:
        found.setdefault(host, []).extend(added)

    states = await engine.refresh(records, sample_gpus=sample_gpus,
                                  on_found=on_found if find else None, all_runs=all_runs,
                                  went_on=went_on)
    by_host: dict[str, list[RunRecord]] = {}
    for r in records:
        by_host.setdefault(r.host, []).append(r)
    views = {}
    for host, recs in by_host.items():
        probed = {r.key: states[r.key] for r in recs if r.key in states}
        # Asked about none of its runs, the host answered (or not) the GPU sample or the
        # listing it was still asked for; asked nothing, there is no verdict.
        answered = (reached(probed) if probed else
                    engine.answered.get(host) if sample_gpus or find or went_on else None)
        # A settled run keeps its index state; not from a host that did not answer: its
        # final line (a log read) would fail there and never be read again.
        host_states = probed if answered is False else {
            r.key: probed.get(r.key, r.state) for r in recs}
        lines = await lines_for(engine, recs, host_states, settled) if words else ()
        views[host] = HostView(host, host_states, lines, tuple(found.get(host, ())), answered)
    return views


async def run_line(engine: Any, host: str, workdir: str, run_id: str,
                   probe: RunProbe | None = None) -> RunLine:
    """One run as `status` says it: state word, why it waits or ended badly, its place
    in the queue. Probes it when no probe is given; reads no progress."""
    if probe is None:
        probe = await engine.probe(host, workdir, run_id)
    reason = await reason_for(engine, host, workdir, run_id, probe)
    state = probe.state
    return RunLine((host, workdir, run_id), state, reason=reason,
                   waiting=waiting_text(reason) if state == probes.QUEUED else "",
                   settled=probes.is_final(state), queue_place=probe.queue_place)


async def status_cost(engine: Any, host: str, workdir: str, run_id: str, state: str,
                      ended: int | None, attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`cost` (so far), `cost_at_end` (a running run's, from its ETA; an ended run's cost)
    and `currency` for `status --json`: null on a host with no price in config.toml.

    What the look at the host taught (its attempt history, its end) is recorded in the
    index first (core/runs/cost.py, `recorded`), and the cost billed from that record:
    the one rule `runs`, `costs`, the app and the notifications bill by, so they agree
    to the cent, and an ended run costs the same at every later look."""
    from datetime import UTC, datetime

    from rtrain_tui.core.runs import cost

    price = engine.hosts.for_host(host).price
    if price is None:
        return {"cost": None, "cost_at_end": None, "currency": None}
    now = datetime.now(UTC)
    end = datetime.fromtimestamp(ended, UTC) if ended is not None and probes.is_final(state) else None
    known = await asyncio.to_thread(engine.index.get, host, run_id)
    mine = known is not None and known.workdir == workdir
    base = known if mine and known is not None else RunRecord(host, run_id, workdir)
    record = cost.recorded(base, attempts, state, end, now)
    if mine and record != base:
        key = record.key

        def change(runs: list[RunRecord]) -> list[RunRecord]:
            # Re-read under the index's lock: a refresh may have written it since.
            return [cost.recorded(r, attempts, state, end, now) if r.key == key else r
                    for r in runs]

        try:
            await asyncio.to_thread(engine.index.update, change)
            record = await asyncio.to_thread(engine.index.get, host, run_id) or record
        except RemoteError:
            pass  # a busy index: billed from what was taught all the same
    eta = None
    if state == probes.RUNNING:
        eta = (await sync_metrics(engine, host, workdir, run_id)).summary().eta_seconds
    got = cost.run_cost(record, price, now, state=state, eta_s=eta)
    assert got is not None
    # At its end: the projection of a running run with an ETA; what an ended run cost.
    at_end = got.at_end if got.at_end is not None else got.spent if probes.is_final(state) else None
    return {"cost": float(got.spent), "cost_at_end": None if at_end is None else float(at_end),
            "currency": got.currency}
