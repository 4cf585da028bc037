"""Metrics as text: the one-line summary, the progress cell and the series as rows.

Pure: the CLI (`metrics`, plain, --csv, --json) and the TUI (runs table, curves header)
all word progress the same way through these.
"""

from __future__ import annotations

from dataclasses import replace

from rtrain_tui.core.metrics.metrics import MetricsParser, Summary, format_eta
from rtrain_tui.core.runs.probes import RUNNING

COLUMNS = ("step", "loss", "eval_loss", "learning_rate", "grad_norm")
Row = tuple[int, float | None, float | None, float | None, float | None]


def rows(parser: MetricsParser) -> list[Row]:
    """Every step that has a value, in step order, one column per series."""
    table: dict[int, list[float | None]] = {}
    for column, series in enumerate((parser.losses, parser.eval_losses,
                                      parser.learning_rates, parser.grad_norms)):
        for step, value in series:
            table.setdefault(step, [None] * 4)[column] = value
    return [(step, *values) for step, values in sorted(table.items())]  # type: ignore[misc]


def for_state(s: Summary, state: str) -> Summary:
    """What a run in `state` may show of its metrics: every view (the `metrics` command,
    curves, compare) words a summary through this first.

    Only a running run has a live ETA and steps/s; a stopped, failed, lost or queued one
    keeps its step and losses, never a countdown to an end that will not come or a rate
    it no longer runs at (the runs table already did so). A trainer's own final summary
    (`train_runtime`: finished, its mean rate) is a record, not live, and stays.
    """
    if state == RUNNING or s.finished:
        return s
    return replace(s, eta_seconds=None, steps_per_second=None)


def number(value: float | None) -> str:
    """Losses to 4 places, tiny learning rates in e-notation, nothing for no value."""
    if value is None:
        return ""
    if value != 0 and abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4f}"


def summary_line(s: Summary) -> str:
    """`step 1840/3000 (61%) · loss 1.2340 · eval loss 1.3000 · 0.40 steps/s · ETA 48m58s`."""
    parts = []
    if s.step is not None:
        parts.append(f"step {s.step}/{s.total}" + (f" ({s.fraction:.0%})" if s.fraction is not None else "")
                     if s.total else f"step {s.step}")
    for label, value in (("loss", s.loss), ("eval loss", s.eval_loss),
                         ("lr", s.learning_rate), ("grad norm", s.grad_norm)):
        if value is not None:
            parts.append(f"{label} {number(value)}")
    if s.steps_per_second:
        parts.append(f"{s.steps_per_second:.2f} steps/s")
    if s.finished:
        parts.append("finished" + (f" in {format_eta(s.runtime_seconds)}" if s.runtime_seconds else ""))
    elif s.eta_seconds is not None:
        parts.append(f"ETA {format_eta(s.eta_seconds)}")
    return " · ".join(parts)


def progress_cell(s: Summary, running: bool, bar_width: int = 6) -> str:
    """The runs table's progress: `1840/3000 ▕███   ▏ loss 1.234 · 48m58s`.

    The ETA only while running; an ended run keeps its final step and loss.
    """
    parts = []
    if s.step is not None and s.total:
        filled = round((s.fraction or 0.0) * bar_width)
        parts.append(f"{s.step}/{s.total} ▕{'█' * filled}{' ' * (bar_width - filled)}▏")
    elif s.step is not None:
        parts.append(f"step {s.step}")
    if s.loss is not None:
        parts.append(f"loss {s.loss:.3f}")
    text = " ".join(parts)
    if running and not s.finished and s.eta_seconds is not None and text:
        text += f" · {format_eta(s.eta_seconds)}"
    return text


def to_json(parser: MetricsParser, state: str = RUNNING) -> dict[str, object]:
    """The summary (as a run in `state` may show it, see `for_state`) and every series."""
    s = for_state(parser.summary(), state)
    return {
        "summary": {
            "step": s.step, "total": s.total, "fraction": s.fraction, "loss": s.loss,
            "eval_loss": s.eval_loss, "learning_rate": s.learning_rate, "grad_norm": s.grad_norm,
            "steps_per_second": s.steps_per_second, "eta_seconds": s.eta_seconds,
            "finished": s.finished, "train_loss": s.train_loss,
            "runtime_seconds": s.runtime_seconds,
        },
        "series": {
            "loss": parser.losses, "eval_loss": parser.eval_losses,
            "learning_rate": parser.learning_rates, "grad_norm": parser.grad_norms,
        },
    }
