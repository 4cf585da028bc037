"""The app's keys: one table that the footer, the help screen and the command palette
(ctrl+p) all read, so a key is described once."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding

KEYS: list[Binding] = [
    # Help first: the footer shows what fits (80 columns: 7 keys), and `?` leads to the rest.
    Binding("question_mark", "help", "Help", id="help", tooltip="All keys"),
    Binding("p", "preflight", "Preflight", id="preflight", tooltip="Check the selected host"),
    Binding("n", "new_run", "New run", id="new_run", tooltip="Start a training run"),
    Binding("enter", "open_log", "Log", id="open_log", tooltip="Open the run's live log"),
    Binding("f", "fetch", "Fetch", id="fetch", tooltip="Fetch adapter, checkpoints, log"),
    Binding("x", "stop", "Stop", id="stop", tooltip="Stop every process of the run: SIGTERM, grace, SIGKILL, verified"),
    Binding("r", "refresh", "Refresh", id="refresh", tooltip="Re-check every run now, the ended ones too (a toast says when)"),
    Binding("R", "resume_run", "Resume", id="resume_run", show=False,
            tooltip="A new attempt of a failed, stopped or lost run, from its newest complete checkpoint"),
    Binding("b", "toggle_hosts", "Hosts", id="toggle_hosts",
            tooltip="Show or hide the host sidebar (folded away on a narrow terminal)"),
    Binding("/", "filter", "Filter", id="filter", tooltip="Filter runs"),
    Binding("s", "state_filter", "State", id="state_filter",
            tooltip="Show live runs, then failed ones, then all (the table's border says which)"),
    Binding("h", "host_filter", "This host", id="host_filter", show=False,
            tooltip="Show only the selected host's runs"),
    Binding("c", "toggle_curves", "Curves", id="toggle_curves",
            tooltip="Toggle the run's tab between its log and its loss curves"),
    Binding("space", "mark_run", "Mark", id="mark_run", show=False,
            tooltip="Mark the selected run for comparing curves (again: unmark)"),
    Binding("C", "compare", "Compare", id="compare", show=False,
            tooltip="Overlay the loss curves of the marked runs"),
    Binding("w", "close_log", "Close log", id="close_log", show=False,
            tooltip="Close the current log pane"),
    Binding("m", "mark_slurm", "Mark as Slurm", id="mark_slurm", show=False,
            tooltip="Run this host's jobs through Slurm (writes config.toml)"),
    Binding("q", "quit", "Quit", id="quit", tooltip="Quit; runs keep running"),
]

# The main screen's actions: inside a dialog they do nothing, so its footer hides them.
MAIN_ACTIONS = {b.action for b in KEYS}
PALETTE_SKIP = {"quit", "help"}  # the palette already offers both


def palette_commands(app: App[int]) -> Iterable[SystemCommand]:
    """Every key's action in the command palette (ctrl+p) too, for those who search."""
    for binding in KEYS:
        if binding.action in PALETTE_SKIP:
            continue
        yield SystemCommand(f"{binding.description} ({binding.key_display or binding.key})",
                            binding.tooltip, getattr(app, f"action_{binding.action}"))
