"""The host panel's live GPU rows: a sparkline of each GPU's load over the last minutes,
its load and memory now, and who holds it (one of our runs by id, or a user and pid)."""

from __future__ import annotations

from rich.text import Text

from rtrain_tui.core.metrics.gpus import GpuHistory, sparkline
from rtrain_tui.core.safety.sanitize import safe_line

SPARK_WIDTH = 12  # fits the 38-column sidebar: `GPU0 ▁▂▃▅▇███▇▆▅▃  97% 68/80G`


def _load_style(pct: int) -> str:
    return "red" if pct >= 80 else "yellow" if pct >= 30 else "green"


def gpu_rows(history: GpuHistory, now: float, width: int = SPARK_WIDTH) -> list[Text]:
    """One line per GPU, then one `↳` line per process holding it; [] with no sample yet."""
    latest = history.latest
    if latest is None:
        return []
    if latest.error:
        return [Text(f"GPUs: {safe_line(latest.error)}", style="dim")]
    rows: list[Text] = []
    for g in latest.gpus:
        util = "?" if "utilization_pct" in g.unknown else f"{g.utilization_pct}"
        used = "?" if "memory_used_mib" in g.unknown else f"{round(g.memory_used_mib / 1024)}"
        total = "?" if "memory_total_mib" in g.unknown else f"{round(g.memory_total_mib / 1024)}"
        spark = sparkline(history.utilisation(g.index), now, history.seconds, width)
        rows.append(Text.assemble(
            f"GPU{g.index} ", (spark, _load_style(g.utilization_pct)),
            f" {util:>3}% {used}/{total}G"))
        # A run's processes on one GPU (a trainer and its workers) are one line: the run.
        holders: dict[str, tuple[str, int | None, bool]] = {}
        for p in latest.holders(g):
            key = f"run {p.run_id}" if p.run_id else p.holder()
            _, held, ours = holders.get(key, (key, 0, bool(p.run_id)))
            total_used = None if held is None or p.used_mib is None else held + p.used_mib
            holders[key] = (key, total_used, ours)
        for label, used_mib, ours in holders.values():
            # Plain Text: a user name holding `[` is text, never markup.
            who = Text("  ↳ ", style="dim")
            who.append(safe_line(label), style="bold cyan" if ours else "yellow")
            if used_mib is not None:
                who.append(f" · {round(used_mib / 1024)}G", style="dim")
            rows.append(who)
    return rows
