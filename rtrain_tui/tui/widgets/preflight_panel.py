"""The preflight panel: each check as ✓ / ✗ / !, one row per GPU with a memory bar, and
for a Slurm login node one row per partition with a bar of its GPUs in use."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from rtrain_tui.core.probes import PreflightReport


def _bar(used: int, total: int, width: int = 12) -> Text:
    frac = used / total if total else 0.0
    filled = round(frac * width)
    style = "red" if frac > 0.8 else "yellow" if frac > 0.5 else "green"
    return Text.assemble(("█" * filled, style), ("░" * (width - filled), "dim"))


def render_report(report: PreflightReport | None, host: str | None, checked_at: str = "",
                  checking: bool = False) -> Table | Text:
    if host is None:
        return Text("No hosts in ~/.ssh/config. Add one, or start with --demo.", style="dim")
    if checking:
        return Text(f"checking {host}…", style="italic cyan")
    if report is None:
        return Text.assemble((f"{host}", "bold"), " not checked yet — press ", ("p", "bold reverse"))
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(width=1, min_width=1)
    table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    if not report.reachable:
        table.add_row(Text("✗", style="bold red"), Text(report.error, style="red"))
    for c in report.checks:
        if c.name == "partition" and c.ok and report.partitions:
            continue  # drawn below, with a bar of its GPUs
        mark = Text("✓", style="green") if c.ok else (
            Text("!", style="bold yellow") if c.warning else Text("✗", style="bold red"))
        table.add_row(mark, Text.assemble((f"{c.name:8}", "bold"), c.detail))
    for g in report.gpus:
        table.add_row("", Text.assemble(
            f"GPU{g.index} ", _bar(g.memory_used_mib, g.memory_total_mib),
            f" {g.memory_used_mib // 1024}/{g.memory_total_mib // 1024}G {g.utilization_pct:3d}%",
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
    verdict = Text("ready", style="bold green") if report.ok else Text("not ready", style="bold yellow")
    table.add_row("", Text.assemble(verdict, (f"  checked {checked_at}" if checked_at else "", "dim")))
    return table


class PreflightPanel(Static):
    def on_mount(self) -> None:
        self.border_title = "Preflight"

    def show(self, report: PreflightReport | None, host: str | None, checked_at: str = "",
             checking: bool = False) -> None:
        self.update(render_report(report, host, checked_at, checking))
