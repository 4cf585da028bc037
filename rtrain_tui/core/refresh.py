"""Refresh: the index brought up to date from the hosts, all hosts at once, one probe per
host (settled runs are not probed again); the runs started elsewhere found and added
(discovery); a `starting` entry whose start is over settled (launched, or its run dir
removed); a run lost to a reboot with retries left resumed (resume.py), as its wrapper
would have retried it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from rtrain_tui.core import resume
from rtrain_tui.core.context import running_since
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.local_locks import start_in_progress
from rtrain_tui.core.notify import notifier
from rtrain_tui.core.probing import Prober
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.index import utc_now as index_now
from rtrain_tui.core.runs.probes import RunProbe
from rtrain_tui.core.safety import validate


def settled(record: RunRecord) -> bool:
    """Final is final: a run whose state is final and whose end time is recorded can
    change no more, and a refresh does not probe it again.

    A stale record is not settled: its host did not answer when last asked, so the state
    it shows is one kept, not one read (its row says `?stale`), and only an answer from
    the host clears that. A final run without its end time is probed until a probe gives
    it one.
    """
    return probes.is_final(record.state) and bool(record.ended_at) and not record.stale


# What `_settle_start` answers for an entry to drop; never a state word, never stored.
_FORGOTTEN = "forgotten"


def _iso_epoch(iso: str) -> int | None:
    """An index time as epoch seconds (None when it does not parse)."""
    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except (ValueError, OverflowError, OSError):
        return None


async def refresh(ctx: Prober, records: Sequence[RunRecord] | None = None,
                  sample_gpus: bool = False,
                  on_found: Callable[[str, list[RunRecord]], None] | None = None,
                  *, all_runs: bool = False,
                  went_on: bool = False) -> dict[tuple[str, str, str], str]:
    """Update the index from the hosts, all hosts at once, one probe per host.

    Final is final: a run `settled` (see there) is not probed again, so a refresh
    costs the live runs, not a year of ended ones; `all_runs` probes every run all
    the same (`runs --refresh --all`; `status HOST RUN` always asks the host).

    With `sample_gpus`, each host's probe also samples its GPUs into `gpu_history`.
    With `on_found`, each host's probe also lists its workdirs (`probe_host(find=True)`);
    the runs started elsewhere join the index and are passed to `on_found(host, runs)`.
    That listing (or, with `went_on`, the listing alone: `runs --refresh`) also tells
    which settled runs went on after their recorded end, and those are probed in one
    more round trip: a run resumed from another laptop, or retried by its host, is
    never `failed` here forever (only the newest names of a workdir are looked at;
    a resume moves its run dir's time there). A host whose runs are all settled is
    still asked for those; whether it answered is in `answered`.

    Returns {record key: state} for the runs it probed; a host that cannot be reached
    yields `unreachable` for its runs, whose last known state stays in the index,
    stale. A state that changed after this refresh began (a stop's verdict) is kept.
    """
    observed_at = index_now()
    records = list(await asyncio.to_thread(ctx.index.load) if records is None else records)
    by_host: dict[str, list[RunRecord]] = {}
    # The listing is told every run the host has, probed or not: a settled run is
    # known, never "found" again; with its end, so that one that went on is seen.
    listed: dict[str, list[tuple[str, str]]] = {}
    rest: dict[str, list[RunRecord]] = {}  # the settled runs, not probed
    listing = on_found is not None or went_on
    for rec in records:
        listed.setdefault(rec.host, []).append((rec.workdir, rec.run_id))
        if all_runs or not settled(rec):
            by_host.setdefault(rec.host, []).append(rec)
        else:
            rest.setdefault(rec.host, []).append(rec)
            if sample_gpus or listing:
                by_host.setdefault(rec.host, [])

    ended: dict[tuple[str, str, str], str] = {}
    rebooted: list[tuple[str, str, str]] = []  # lost to a reboot: retried below
    forget: dict[tuple[str, str, str], str] = {}  # unlaunched starts the host removed
    went: dict[tuple[str, str, str], int] = {}  # settled runs that went on: attempts
    running: dict[tuple[str, str, str], tuple[int, str, int | None]] = {}  # attempts' launch times
    resolved: dict[tuple[str, str, str], str] = {}  # backends to record (older entries)
    seen: list[notifier.Seen] = []  # what notifications look at (core/notify)

    async def one_host(host: str, recs: list[RunRecord]) -> dict[tuple[str, str, str], str]:
        # Which `starting` entries had no start in progress before the probe was sent:
        # only a probe taken after its start was over can tell that it never launched.
        over = {r.key for r in recs if r.state == probes.STARTING
                and not start_in_progress(ctx.index, r.token)}
        try:
            kinds = {r.key: ctx.backend_of(r) for r in recs}
            ctx.kinds.update(kinds)  # probe_many reads them
            # A found run an older version recorded with no backend gets the one it
            # is probed as written down, so a later change of config.toml cannot move it.
            resolved.update({r.key: kinds[r.key] for r in recs if not r.backend and r.origin == "found"})
            runs = [(r.workdir, r.run_id) for r in recs]
            need_end = [i for i, r in enumerate(recs) if not r.ended_at]
            added: list[RunRecord] = []
            if sample_gpus or listing:
                # With its attempts: a resume in the second it ended is told by them.
                ends = {(r.workdir, r.run_id): (e, r.attempt) for r in rest.get(host, ())
                        if listing and (e := _iso_epoch(r.ended_at)) is not None}
                found, sample, added, moved = await ctx.probe_host(
                    host, runs, need_end, gpus=sample_gpus, find=listing,
                    known=listed[host], ended=ends, add_found=on_found is not None)
                again = _went_on(ctx, host, rest.get(host, ()), moved)
                if again and (probed := await _probe_again(ctx, host, [r for r, _ in again])):
                    recs, found = recs + [r for r, _ in again], found + probed
                    went.update({r.key: n for r, n in again})
            else:  # probe_many is the seam fault tests slow down; keep going through it
                found, sample = await ctx.probe_many(host, runs, need_end), None
        except RemoteError:
            ctx.answered[host] = False
            return {r.key: probes.UNREACHABLE for r in recs}
        ctx.answered[host] = True
        if added and on_found is not None:
            on_found(host, added)
        if sample is not None:
            ctx.remember_gpus(host, sample, recs, found)
        states = {}
        for r, p in zip(recs, found):
            if p.ended_at is not None and probes.is_final(p.state):
                ended[r.key] = datetime.fromtimestamp(p.ended_at, UTC).isoformat()
            running.update(running_since(r.key, p))
            if p.reason:
                ctx.reasons[r.key] = p.reason
            else:
                ctx.reasons.pop(r.key, None)
            if p.rebooted and p.state == probes.LOST:
                rebooted.append(r.key)
            if r.state != probes.STARTING:
                seen.append(notifier.Seen(r, p.state, p.stalled_for, p.reason, ended.get(r.key, "")))
            if r.state != probes.STARTING:
                states[r.key] = p.state
            elif r.key not in over:
                states[r.key] = probes.STARTING  # this probe may predate the launch
            else:
                states[r.key] = await _settle_start(ctx, r, p)
                if states[r.key] == _FORGOTTEN:
                    forget[r.key] = r.token
                    states[r.key] = probes.UNKNOWN
        return states

    results: dict[tuple[str, str, str], str] = {}
    for part in await asyncio.gather(*(one_host(h, rs) for h, rs in by_host.items())):
        results.update(part)
    now = index_now()
    await asyncio.to_thread(
        ctx.index.set_states,
        {k: (s, s == probes.UNREACHABLE, now) for k, s in results.items()
         if s != probes.STARTING and k not in forget},
        observed_at=observed_at, ended=ended, forget=forget, backends=resolved, went_on=went,
        running=running,
    )
    # Before a reboot's retry: the loss is a transition of its attempt all the same.
    ctx.tell(seen)
    for key in rebooted:
        if results.get(key) == probes.LOST:
            await _retry_after_reboot(ctx, key, results)
    return results


async def _retry_after_reboot(ctx: Prober, key: tuple[str, str, str],
                              results: dict[tuple[str, str, str], str]) -> None:
    """A run lost to a reboot with retries left is resumed (the wrapper that would have
    retried it died with the host); says so in `notices`. Another client resuming it
    at the same time takes the attempt once (the host's claim); this one then says
    nothing."""
    host, workdir, run_id = key
    try:
        got = await resume.retry_after_reboot(ctx, host, workdir, run_id)
    except (RemoteError, validate.ValidationError):
        return
    if got is not None:
        results[key] = got.started.record.state
        ctx.reasons.pop(key, None)
        ctx.notices.append(
            f"{run_id} on {host} was lost to a reboot of the host; resumed it: attempt "
            f"{got.attempt}, {'from ' + got.checkpoint if got.checkpoint else 'from the start'}")


def _went_on(ctx: Prober, host: str, rest: Sequence[RunRecord],
             moved: Sequence[tuple[str, str, int | None]]) -> list[tuple[RunRecord, int]]:
    """The settled records of `host` that a listing said went on (`HostProbe.went_on`),
    each with its count of attempts (its own where the host did not say)."""
    if not moved:
        return []
    places = {(ctx.place(host, w), r): n for w, r, n in moved}
    out = []
    for rec in rest:
        place = (ctx.place(host, rec.workdir), rec.run_id)
        if place in places:
            out.append((rec, places[place] or rec.attempt))
    return out


async def _probe_again(ctx: Prober, host: str, recs: Sequence[RunRecord]) -> list[RunProbe]:
    """Probe settled runs that went on, asking when they ended: one round trip. A host
    that does not answer now leaves them as they were; the next listing sees them again."""
    ctx.kinds.update({r.key: ctx.backend_of(r) for r in recs})
    try:
        return await ctx.probe_many(host, [(r.workdir, r.run_id) for r in recs], range(len(recs)))
    except RemoteError:
        return []


async def discover(ctx: Prober, host: str) -> list[RunRecord]:
    """Add to the index the runs on `host` it does not know; returns those added.

    Runs started elsewhere — by `praisonai train remote`, from another laptop, by a
    teammate on the same account — live in the same run directories. The default
    workdir and every workdir the index has for the host are listed in one round
    trip, the unknown runs probed in one more; each is recorded with its state and
    start time and marked `origin = "found"`. Known runs are matched by their
    resolved directory, so `~/x` and `/home/me/x` are one place. Asked for, so every
    name is looked at (the app's refresh looks at the newest ones only).
    """
    records = await asyncio.to_thread(ctx.index.load)
    runs = [(r.workdir, r.run_id) for r in records if r.host == host]
    workdirs, script = ctx.find_script(host, runs, limit=None)
    return await ctx.add_found(host, workdirs, await ctx.host(host).run(script))


async def _settle_start(ctx: Prober, record: RunRecord, probe: RunProbe) -> str:
    """The true state of a `starting` entry whose start was over before `probe` was
    taken (a probe from before could predate the launch).

    Launched: whatever the host says. Never launched: its start died (a killed
    client) or was cut off, so its run dir is removed; `_FORGOTTEN` (the entry is to
    go) only once the host said it removed it, or that there is none. Else it stays
    `starting`, and the next refresh looks again.
    """
    if start_in_progress(ctx.index, record.token):
        return probes.STARTING
    if probe.launched:
        if record.attempt > 1:
            await _settle_attempt(ctx, record)
        return probe.state
    if not record.token:  # written before starts had tokens: nothing to match on the
        return _FORGOTTEN  # host, so its dir is left there, as it always was
    try:
        out = await ctx.host(record.host).run(
            remote_sh.remove_unlaunched(record.workdir, record.run_id, record.token))
    except RemoteError:
        return probes.STARTING  # try again next refresh
    removed = dict(probes.parse_key_values(out)).get("removed")
    if removed == "kept":
        # A resume's attempt, claimed and never launched (core/resume.py): the run and
        # its attempts stay; it reads as what the host says (`unknown`), and `resume`
        # takes it again.
        return probe.state
    return _FORGOTTEN if removed in ("1", "gone") else probes.STARTING


async def _settle_attempt(ctx: Prober, record: RunRecord) -> None:
    """A resume's entry, launched: its claim may never have reached the host (the
    resume was cut off before it, and attempt 1's pid file says launched), so the
    index keeps the host's count of attempts, not the one it was about to claim."""
    try:
        out = await ctx.host(record.host).run(
            remote_sh.resume_facts(record.workdir, record.run_id))
    except RemoteError:
        return  # the count stays; the state is read as ever
    said = dict(probes.parse_key_values(out)).get("attempts", "")
    if not (said.isdigit() and len(said) < 6) or int(said) == record.attempt:
        return
    attempt = int(said)
    await asyncio.to_thread(ctx.index.update, lambda runs: [
        replace(r, attempt=attempt) if r.key == record.key and r.token == record.token
        else r for r in runs])
