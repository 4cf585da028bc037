"""What a refresh saw, turned into messages sent once: the client side of notifications.

The engine hands over each run a refresh probed (its record before, its state now); a
run whose state became an event the user wants (`[notify] on`), for a host with URLs,
is claimed on its host (claims.py: one round trip per host) and, if this client won the
claim, sent (send.py, in a thread: apprise blocks). What failed comes back as one line
each, masked, for the face to say once (the CLI on stderr, the app as a toast).

With `[notify] on_host` a run's host tells its end itself (host_send.py), to the URLs it
can reach (webhooks), claiming the event's own marker. The URLs only apprise reaches
(mailto://, a bot token…) then go under a marker of their own, `aN-EVENT-apprise`, that
only clients claim: each URL is told once, by whoever claimed its share first.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.logs.reasons import why_it_ended
from rtrain_tui.core.logs.run_reason import needs_reason
from rtrain_tui.core.metrics.metrics import parse_text
from rtrain_tui.core.notify import claims, host_send, message, send
from rtrain_tui.core.runs import cost, hostconfig
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.safety.mask import mask_text


@dataclass(frozen=True)
class Seen:
    """One run as a refresh saw it: its record from before, and what the host said now."""

    record: RunRecord
    state: str
    stalled_for: int | None = None
    reason: str = ""
    ended_at: str = ""  # ISO, the host's end time when it told one
    # When an attempt began running, as the probe read it (engine's `_running`): billed
    # from there, as the index will keep it (core/runs/cost.py, `with_running`).
    running: tuple[int, str, int | None] | None = None


def wanted(seen: Seen, config: hostconfig.HostConfig) -> str | None:
    """The event to tell for `seen` (None: nothing): a change into an event the user asked
    for, on a host with somewhere to send it. A stall is told while it lasts: its marker
    keeps that to one message."""
    event = message.event_of(seen.state, seen.stalled_for)
    if event is None or event not in config.notify.on or not config.notify_urls(seen.record.host):
        return None
    if event != message.STALLED and message.event_of(seen.record.state) == event:
        return None  # the index already had it: not a transition (an old run, `--all`)
    return event


def compose(seen: Seen, config: hostconfig.HostConfig, now: datetime, log_tail: str = "") -> message.Message | None:
    """The message for `seen`, its step and loss from the tail of its log."""
    # The record as the index keeps it after this look (the one cost rule bills from it):
    # its end, and when its attempt began running (a `--queue` wait is not billed).
    record = cost.with_running(replace(seen.record, state=seen.state,
                                       ended_at=seen.record.ended_at or seen.ended_at), seen.running)
    start = cost.when(record.started_at)
    end = cost.when(record.ended_at) if seen.state != "running" else None
    elapsed = ((end or now) - start).total_seconds() if start is not None else None
    spent = cost.run_cost(record, config.price_of(record.host), now, state=seen.state)
    summary = parse_text(log_tail).summary() if log_tail else None
    reason = seen.reason
    if not reason and needs_reason(seen.state):  # as the app's toast and `status` word it
        code = re.search(r"exit (-?[0-9]+)", seen.state)
        reason = why_it_ended(seen.state, int(code.group(1)) if code else None, False,
                              log_tail.splitlines(), record.host)
    return message.build(record.host, record.run_id, seen.state, reason=reason,
                         stalled_for=seen.stalled_for, summary=summary, elapsed_s=elapsed, cost=spent)


Runner = Callable[[str, str], Awaitable[str]]  # (host, script) -> its output
APPRISE_ONLY = "-apprise"  # the marker's suffix for the URLs a host cannot send


def shares(event: str, config: hostconfig.HostConfig, host: str) -> list[tuple[str, tuple[str, ...]]]:
    """[(the marker's event, the URLs its claimer sends)] for a run on `host`: one share
    of every URL, or, when the host sends some itself and not all, the host's (the event's
    marker, which its wrapper claims too) and apprise's (`EVENT-apprise`, clients only)."""
    urls = config.notify_urls(host)
    hostable = tuple(host_send.host_urls(urls)) if config.notify.on_host else ()
    rest = tuple(u for u in urls if u not in hostable)
    if not hostable or not rest:
        return [(event, urls)]
    return [(event, hostable), (event + APPRISE_ONLY, rest)]


Item = tuple[Seen, str, tuple[str, ...]]  # what is claimed: the run, its marker, its URLs
Unclaimed = claims.Pending[tuple[tuple[str, str, str], str], Item]  # kept for the next look


async def notify(seen: Sequence[Seen], config: hostconfig.HostConfig, run: Runner,
                 now: datetime, pending: Unclaimed | None = None) -> list[str]:
    """Claim and send what `seen` calls for; returns one line per failure (masked).
    With `pending`, the claims that could not reach their host before are claimed again
    (with their token), and those that cannot reach it now are kept there."""
    todo: dict[str, list[tuple[Item, str]]] = {}
    again = pending.take() if pending is not None else []
    retried = {key for key, _, _ in again}
    for _, item, token in again:
        todo.setdefault(item[0].record.host, []).append((item, token))
    for s in seen:
        event = wanted(s, config)
        if event is not None:
            todo.setdefault(s.record.host, []).extend(
                ((s, marked, urls), claims.new_token()) for marked, urls in shares(event, config, s.record.host)
                if (s.record.key, marked) not in retried)
    if not todo:
        return []
    parts = await asyncio.gather(*(_host(h, items, config, run, now, pending) for h, items in todo.items()))
    return [line for part in parts for line in part]


async def _host(host: str, items: list[tuple[Item, str]], config: hostconfig.HostConfig,
                run: Runner, now: datetime, pending: Unclaimed | None) -> list[str]:
    lines = []
    # One round trip per token: a retried claim goes with the token it was first sent with.
    for token in dict.fromkeys(t for _, t in items):
        mine = [item for item, t in items if t == token]
        script = claims.claim_script([(s.record.workdir, s.record.run_id, m) for s, m, _ in mine], token)
        try:
            got = claims.parse_claims(await run(host, script), len(mine))
        except RemoteError as exc:
            # Unreachable now: claimed again (same token) by this client's next look.
            for item in mine:
                if pending is not None:
                    pending.keep((item[0].record.key, item[1]), item, token)
                later = " (the app's or `watch`'s next refresh tries again)" if pending is not None else ""
                lines.append(mask_text(
                    f"notification for {item[0].record.run_id} on {host} not sent: could not reach "
                    f"{host} to claim it ({' '.join(str(exc).split())}){later}", item[2]))
            continue
        lines += await _send_claimed(host, mine, got, config, now)
    return lines


async def _send_claimed(host: str, items: list[Item], got: dict[int, claims.Claim],
                        config: hostconfig.HostConfig, now: datetime) -> list[str]:
    lines = []
    for i, (s, _, urls) in enumerate(items):
        claim = got.get(i)
        if claim is None or not claim.claimed:
            continue
        composed = compose(s, config, now, claim.log_tail)
        if composed is None:
            continue
        results = await asyncio.to_thread(send.send_all, urls, composed.title, composed.body)
        lines += [mask_text(f"notification for {s.record.run_id} on {host} not sent: {why}", urls)
                  for why in results.values() if why]
    return lines
