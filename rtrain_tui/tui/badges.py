"""How states look: one colour per run state and host badge, and elapsed-time text."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from rtrain_tui.core.metrics.metrics import format_eta

RUN_STYLES = {
    "starting": "italic cyan",  # in the index, not yet launched (or not yet known to be)
    "queued": "bold cyan",  # waiting for a scheduler (Slurm)
    "running": "bold green",
    "completed": "bold blue",
    "stopped": "yellow",
    "lost": "bold magenta",
    "unknown": "dim",
}
HOST_STYLES = {
    "not checked": "dim",
    "checking": "italic cyan",
    "ready": "bold green",
    "not ready": "bold yellow",
    "unreachable": "bold red",
}


def run_badge(state: str, stale: bool = False) -> Text:
    style = "bold red" if state.startswith("failed") else RUN_STYLES.get(state, "")
    if stale:
        return Text.assemble((f"{state}", f"dim {style}"), (" ?stale", "dim italic"))
    return Text(state, style=style)


def host_badge(status: str) -> Text:
    return Text(status, style=HOST_STYLES.get(status, ""))


def elapsed(started_at: str, now: datetime, ended_at: str = "") -> str:
    """`1h02m`, `3m05s`, `42s`; blank when the start time is unknown."""
    try:
        start = datetime.fromisoformat(started_at)
        end = datetime.fromisoformat(ended_at) if ended_at else now
    except ValueError:
        return ""
    return format_eta(max(0.0, (end - start).total_seconds()))


def started_text(started_at: str) -> str:
    try:
        return datetime.fromisoformat(started_at).strftime("%m-%d %H:%M")
    except ValueError:
        return ""
