"""Metrics as text: the one-line summary, the progress cell and the series as rows.

Pure: the CLI (`metrics`, plain, --csv, --json) and the TUI (runs table, curves header)
all word progress the same way through these.
"""

from __future__ import annotations

from rtrain_tui.core.metrics import MetricsParser, Summary, format_eta

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


def to_json(parser: MetricsParser) -> dict[str, object]:
    s = parser.summary()
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
