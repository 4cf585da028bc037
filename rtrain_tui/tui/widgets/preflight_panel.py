"""The preflight panel: each check as ✓ / ✗ / !, one row per GPU with a memory bar, or,
once the host's refresh has sampled its GPUs, live rows: a sparkline per GPU and who
holds it (gpu_rows.py); for a Slurm login node one row per partition with a bar of its
GPUs in use; and the host's price, when config.toml gives one."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from rtrain_tui.core.metrics.gpus import GpuHistory
from rtrain_tui.core.runs.probes import PreflightReport
from rtrain_tui.core.safety.sanitize import safe_text
from rtrain_tui.tui.widgets.gpu_rows import gpu_rows


def _bar(used: int, total: int, width: int = 12) -> Text:
    frac = used / total if total else 0.0
    filled = round(frac * width)
    style = "red" if frac > 0.8 else "yellow" if frac > 0.5 else "green"
    return Text.assemble(("█" * filled, style), ("░" * (width - filled), "dim"))


def render_report(report: PreflightReport | None, host: str | None, checked_at: str = "",
                  checking: bool = False, gpus: GpuHistory | None = None,
                  now: float = 0.0, price: str = "", ssh_config: str = "~/.ssh/config") -> Table | Text:
    if host is None:
        return Text(f"No hosts in {ssh_config}. Add one, or start with --demo.", style="dim")
    if checking:
        return Text(f"checking {host}…", style="italic cyan")
    live = gpu_rows(gpus, now) if gpus is not None else []
    priced = [Text.assemble((f"{'price':8}", "bold"), price)] if price else []
    if report is None:
        prompt = Text.assemble((f"{host}", "bold"), " not checked yet — press ", ("p", "bold reverse"))
        if not live and not priced:
            return prompt
        table = Table.grid(expand=True)
        table.add_column(no_wrap=True, overflow="ellipsis")
        for row in (prompt, *live, *priced):
            table.add_row(row)
        return table
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(width=1, min_width=1)
    table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    if not report.reachable:
        # The whole error, wrapped: its end is usually what to do about it.
        table.add_row(Text("✗", style="bold red"),
                      Text(safe_text(report.error), style="red", no_wrap=False, overflow="fold"))
    for c in report.checks:
        if c.name == "partition" and c.ok and report.partitions:
            continue  # drawn below, with a bar of its GPUs
        mark = Text("✓", style="green") if c.ok else (
            Text("!", style="bold yellow") if c.warning else Text("✗", style="bold red"))
        line = Text.assemble((f"{c.name:8}", "bold"), c.detail)
        if not c.ok:
            # Wrapped, as an unreachable host's error is: what to do about it comes last
            # (`… (pip install praisonai-train)`, `free some space on HOST`).
            line.no_wrap, line.overflow = False, "fold"
        table.add_row(mark, line)
    for row in live:
        table.add_row("", row)
    for g in report.gpus if not live else ():
        memory_known = not {"memory_used_mib", "memory_total_mib"} & g.unknown
        used = f"{g.memory_used_mib // 1024}" if "memory_used_mib" not in g.unknown else "?"
        total = f"{g.memory_total_mib // 1024}" if "memory_total_mib" not in g.unknown else "?"
        table.add_row("", Text.assemble(
            f"GPU{g.index} ",
            _bar(g.memory_used_mib, g.memory_total_mib) if memory_known else ("?" * 12, "dim"),
            f" {used}/{total}G {g.shown('utilization_pct'):>3}%",
        ))
    for part in report.partitions:  # a Slurm login node: GPUs in use per partition
        states = ", ".join(sorted(set(part.nodes.values())))
        # Two short rows: the panel is narrow, and the free GPUs must not be cut off.
        table.add_row("", Text.assemble(
            (f"{part.name}{'*' if part.default else ''} ", "bold"),
            _bar(part.gpus_used, part.gpus_total, width=8),
            f" {part.gpus_total - part.gpus_used}/{part.gpus_total} GPUs free",
        ))
        table.add_row("", Text(f"  {len(part.nodes)} node(s): {states}", style="dim"))
    for row in priced:
        table.add_row("", row)
    verdict = Text("ready", style="bold green") if report.ok else Text("not ready", style="bold yellow")
    table.add_row("", Text.assemble(verdict, (f"  checked {checked_at}" if checked_at else "", "dim")))
    return table


class PreflightPanel(Static):
    def on_mount(self) -> None:
        self.border_title = "Preflight"

    def show(self, report: PreflightReport | None, host: str | None, checked_at: str = "",
             checking: bool = False, gpus: GpuHistory | None = None, now: float = 0.0,
             price: str = "", ssh_config: str = "~/.ssh/config") -> None:
        self.update(render_report(report, host, checked_at, checking, gpus, now, price, ssh_config))
