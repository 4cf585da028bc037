"""The `?` screen: every key, what it does."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

KEYS = [
    ("p", "preflight the selected host (enter on a host does too)"),
    ("n", "new run (start form)"),
    ("enter", "open the selected run's live log"),
    ("f", "fetch from the selected run (adapter, checkpoints, log)"),
    ("x", "stop the selected run (every process of it, found by its marker; verified)"),
    ("r", "re-check every run now, the ended ones too"),
    ("R", "resume a failed, stopped or lost run (newest complete checkpoint)"),
    ("/", "filter runs; in a log pane: search it (enter: next match)"),
    ("h", "show only the selected host's runs (again: all)"),
    ("s", "show only live runs, then failed ones, then all"),
    ("b", "show / hide the host sidebar"),
    ("m", "run the checked host's jobs through Slurm (writes config.toml)"),
    ("F", "in a log pane: follow / pause (scrolling up pauses)"),
    ("home / end", "in a log pane: top / end (end follows again)"),
    ("c", "toggle the run's tab between its log and its curves (loss, lr, grad norm, ETA)"),
    ("space / C", "mark runs / overlay the marked runs' loss curves"),
    ("w", "close the current log pane"),
    ("tab", "next panel"),
    ("j / k, ↑ / ↓", "move in lists"),
    ("ctrl+p", "command palette"),
    ("?", "this help"),
    ("q", "quit — runs keep running on their hosts"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", justify="right")
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, what)
        # Scrollable and focused (the screen's autofocus): at 80×24 the list is taller
        # than the screen, and a plain container scrolled only by the mouse.
        with VerticalScroll(id="dialog"):
            yield Static("[b]rtrain-tui keys[/b]", id="title")
            yield Static(table)
            yield Static("Runs are detached on their hosts: quitting never stops them.",
                         id="explain")
        yield Footer(show_command_palette=False)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
