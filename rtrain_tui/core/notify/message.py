"""The message for a run's transition: the one text the app, the CLI and `watch` send.

Pure: from what a refresh already knows (the state word and its reason, the metrics
summary, the elapsed time, the cost). A message names the run and host, the state and why,
how far it got (step/total, loss, eval loss), how long it ran and what it cost, and the
command to look at it, or to resume it where a resume can help. What came from the host
(a reason, the run id) is made one safe line first: it reaches phones and chat.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Protocol

from rtrain_tui.core.metrics.metrics import Summary, format_eta
from rtrain_tui.core.runs import probes
from rtrain_tui.core.safety.sanitize import safe_line


class Priced(Protocol):
    """A cost as a message words it (runs/cost.py's `Cost`; the host's own send, which has
    no index to cost from, words its figure the same way: notify/host_send.py)."""

    def text(self) -> str: ...


STALLED = "stalled"
_RESUMABLE = ("failed", probes.LOST)  # what went wrong on its own; a stop was meant
_MAX_REASON = 300


@dataclass(frozen=True)
class Message:
    """What is sent: `event` (failed, lost, stalled, completed, stopped) decides whether."""

    event: str
    title: str
    body: str


def event_of(state: str, stalled_for: int | None = None) -> str | None:
    """The notification a state word is (None: not one): an end, or a running run's stall."""
    if state.startswith(probes.FAILED):
        return "failed"
    if state in probes.FINAL_STATES:
        return state
    if state == probes.RUNNING and stalled_for is not None and stalled_for >= 0:
        return STALLED
    return None


def duration(seconds: float) -> str:
    """`1h02m`, `3m05s`, `42s`: as the runs table shows elapsed time."""
    return format_eta(max(0.0, seconds))


def _number(value: float) -> str:
    return f"{value:.4g}"


def progress_line(summary: Summary | None) -> str:
    """`step 40/3000 · loss 2.31 · eval loss 2.4`; '' when the log told nothing."""
    if summary is None:
        return ""
    parts = []
    if summary.step is not None:
        parts.append(f"step {summary.step}/{summary.total}" if summary.total else f"step {summary.step}")
    loss = summary.loss if summary.loss is not None else summary.train_loss
    if loss is not None:
        parts.append(f"loss {_number(loss)}")
    if summary.eval_loss is not None:
        parts.append(f"eval loss {_number(summary.eval_loss)}")
    return " · ".join(parts)


def build(host: str, run_id: str, state: str, *, reason: str = "", stalled_for: int | None = None,
          summary: Summary | None = None, elapsed_s: float | None = None,
          cost: Priced | None = None) -> Message | None:
    """The message for `run_id` on `host` now in `state` (None when the state is not one to
    tell: starting, queued, running and not stalled)."""
    event = event_of(state, stalled_for)
    if event is None:
        return None
    host_s, run_s = safe_line(host), safe_line(run_id)
    shown = probes.stall_reason(stalled_for) if event == STALLED else safe_line(state)
    title = f"rtrain-tui: {run_s} on {host_s} {shown}"
    lines = []
    why = safe_line(reason)[:_MAX_REASON]
    if why and why not in shown:
        lines.append(f"reason: {why}")
    progress = progress_line(summary)
    if progress:
        lines.append(progress)
    facts = []
    if elapsed_s is not None:
        facts.append(f"elapsed {duration(elapsed_s)}")
    if cost is not None:
        facts.append(f"cost {cost.text()}")
    if facts:
        lines.append(" · ".join(facts))
    quoted = f"{shlex.quote(host)} {shlex.quote(run_id)}"
    lines.append(f"look: rtrain-tui tail {safe_line(quoted)}")
    if event in _RESUMABLE:
        lines.append(f"resume: rtrain-tui resume {safe_line(quoted)}")
    elif event == STALLED:
        lines.append(f"stop: rtrain-tui stop {safe_line(quoted)}")
    return Message(event, title, "\n".join(lines))
