"""Fetch: browse the run directory on the host, pick a file or folder, bring it home.

The dialog opens at once with "loading…" and stays usable while the host answers: a
fetch asked for before the listing arrives is kept and runs on what gets preselected
(the adapter, `lora_model/`, else the first entry). Names come from the host: shown as
text, never as markup, with control characters removed.

Each `checkpoint-N/` is marked `✓` or `incomplete` (and why) by the rule resume uses
(core/runs/checkpoints.py), asked of the host beside the listing. Fetching an incomplete
one says so first and takes a second ctrl+s, as the CLI takes `--incomplete`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, ProgressBar, Static, Tree
from textual.widgets.tree import TreeNode

from rtrain_tui.core.engine import Engine
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import checkpoints as checkpoint_rule
from rtrain_tui.core.runs.checkpoints import Checkpoint
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.sanitize import safe_line, safe_text
from rtrain_tui.core.transfers.transfer import RemoteEntry


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def natural_key(path: str) -> tuple[list[str | int], ...]:
    """Sort key that puts checkpoint-50 before checkpoint-100, part by part of a path."""
    return tuple([int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", part)]
                 for part in path.split("/"))


# What the user comes for besides the trainer's outputs: the run's log and config. The
# run dir's other own files (pids, stop marks, records, scripts, `.rtrain/`) are
# rtrain-tui's bookkeeping.
_USERS = frozenset({"lora_model", "train.log", "config.yaml"})


def is_bookkeeping(path: str) -> bool:
    """Whether `path` (relative to the run dir) is rtrain-tui's own bookkeeping."""
    top = path.split("/", 1)[0]
    return top not in _USERS and bool(validate.run_dir_own(top) or top.startswith("run.sh."))


def sorted_entries(entries: list[RemoteEntry]) -> list[RemoteEntry]:
    # The user's artefacts (lora_model, checkpoints, outputs) first, our bookkeeping last;
    # part by part, so a folder sorts right before its own contents.
    return sorted(entries, key=lambda e: (is_bookkeeping(e.path), natural_key(e.path)))


class FetchScreen(ModalScreen[Path | None]):
    """Dismisses with the local path of what was fetched, or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "fetch", "Fetch")]

    def __init__(self, engine: Engine | None, record: RunRecord, out_dir: Path,
                 entries: list[RemoteEntry] | None = None,
                 remember_dir: Callable[[Path], None] | None = None,
                 checkpoints: list[Checkpoint] | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.record = record
        self.out_dir = out_dir
        self.entries = entries
        self.remember_dir = remember_dir or (lambda _path: None)
        self.loaded = False
        self.fetch_when_loaded = False
        self.preselected: TreeNode[RemoteEntry | None] | None = None  # lora_model/, else the first
        self.warnings: list[str] = []
        self.checkpoints = checkpoints or []
        self.incomplete_asked = ""  # the incomplete checkpoint a first ctrl+s warned about

    def compose(self) -> ComposeResult:
        r = self.record
        with Vertical(id="dialog"):
            yield Static(Text(f"Fetch from {r.run_id} on {r.host}", style="bold"), id="title")
            tree: Tree[RemoteEntry | None] = Tree(Text(f"{r.run_id}/ loading…"), id="tree")
            tree.root.expand()
            yield tree
            with Horizontal(id="dest-row"):
                yield Label("to ")
                yield Input(str(self.out_dir), id="dest", compact=True)
            yield Static("", id="errors")
            yield ProgressBar(id="progress", show_eta=False)
            with Horizontal(id="buttons"):
                yield Button("Fetch (ctrl+s)", variant="primary", id="fetch")
                yield Button("Cancel (esc)", id="cancel")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#progress", ProgressBar).display = False
        if self.entries is not None:
            self.show_entries(self.entries)
        else:
            self.load()
        self.query_one("#tree", Tree).focus()

    def show_error(self, message: str) -> None:
        self.query_one("#errors", Static).update(Text(f"✗ {safe_text(message)}"))

    @work(group="fetch-list", exclusive=True, exit_on_error=False)
    async def load(self) -> None:
        r = self.record
        assert self.engine is not None
        try:
            entries, self.checkpoints = await asyncio.gather(
                self.engine.list_run(r.host, r.workdir, r.run_id), self._judged())
        except RemoteError as exc:
            self.query_one("#tree", Tree).root.set_label(Text(f"{r.run_id}/ (not listed)"))
            self.fetch_when_loaded = False
            self.show_error(str(exc))
            return
        self.show_entries(entries)

    async def _judged(self) -> list[Checkpoint]:
        # Marks help; they never keep the listing from the user.
        assert self.engine is not None
        r = self.record
        try:
            return await self.engine.checkpoints(r.host, r.workdir, r.run_id)
        except RemoteError:
            return []

    def show_entries(self, entries: list[RemoteEntry]) -> None:
        tree = self.query_one("#tree", Tree)
        tree.root.set_label(Text(f"{self.record.run_id}/"))
        nodes = {"": tree.root}
        marks = {c.path: c for c in self.checkpoints}
        for e in sorted_entries(entries):
            parent = nodes.get(e.path.rpartition("/")[0], tree.root)
            name = safe_line(e.path.rpartition("/")[2])
            if e.is_dir:
                label = Text(f"{name}/", style="bold")
                if (mark := marks.get(e.path)) is not None and mark.complete:
                    label.append(" ✓", style="green")
                elif mark is not None:
                    label.append(" incomplete", style="yellow")
                    label.append(f" ({safe_line(mark.why)})", style="dim")
                nodes[e.path] = parent.add(label, data=e, expand=False)
            else:
                parent.add_leaf(Text.assemble(name, (f"  {human_size(e.size)}", "dim")), data=e)
        # Keys pressed while loading moved the cursor over nothing: the preselection wins.
        first = nodes.get("lora_model") or (tree.root.children[0] if tree.root.children else None)
        # A node just added has no line until the tree is laid out (moving the cursor to
        # it now puts the cursor on the root): it moves once the tree is drawn, and till
        # then the preselected node is what a fetch takes.
        self.preselected = first
        self.call_after_refresh(self._place_cursor)
        self.loaded = True
        if self.fetch_when_loaded:
            self.fetch_when_loaded = False
            # The cursor lands on its node only at the next refresh: fetch the node itself.
            if first is None or first.data is None:
                self.show_error("the run directory is empty: nothing to fetch")
            else:
                self.start_fetch(first.data)

    def _place_cursor(self) -> None:
        tree = self.query_one("#tree", Tree)
        tree.move_cursor(self.preselected or tree.root)
        self.preselected = None  # from now on the cursor says what is chosen

    @property
    def chosen(self) -> RemoteEntry | None:
        node = self.preselected or self.query_one("#tree", Tree).cursor_node
        return node.data if node is not None else None

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "fetch")
        self.dismiss(None)

    @on(Button.Pressed, "#fetch")
    @on(Input.Submitted)
    def action_fetch(self) -> None:
        if self.engine is None:
            return
        if not self.loaded and self.entries is None:
            # Asked before the listing came: fetch what gets preselected once it does.
            self.fetch_when_loaded = True
            self.query_one("#errors", Static).update(
                Text("fetching the adapter (or the first entry) once the listing arrives…"))
            return
        entry = self.chosen
        if entry is None:
            self.show_error("pick a file or folder first")
            return
        self.start_fetch(entry)

    def start_fetch(self, entry: RemoteEntry) -> None:
        note = checkpoint_rule.incomplete_note(self.checkpoints, entry.path) if entry.is_dir else ""
        if note and self.incomplete_asked != entry.path:
            self.incomplete_asked = entry.path
            self.show_error(f"{note}. ctrl+s again fetches it anyway.")
            return
        self.query_one("#fetch", Button).disabled = True
        self.query_one("#errors", Static).update("")
        self.run_fetch(entry.path, Path(self.query_one("#dest", Input).value).expanduser())

    @work(group="fetch", exclusive=True, exit_on_error=False)
    async def run_fetch(self, path: str, out: Path) -> None:
        bar = self.query_one("#progress", ProgressBar)
        bar.display = True

        def progress(_label: str, done: int, total: int) -> None:
            bar.update(total=max(total, 1), progress=done)

        r = self.record
        assert self.engine is not None
        self.warnings = []
        try:
            dest = await self.engine.fetch(r.host, r.workdir, r.run_id, path, out, progress,
                                           on_warning=self.warnings.append)
        except RemoteError as exc:
            self.show_error(str(exc))
            self.query_one("#fetch", Button).disabled = False
            return
        self.remember_dir(out)
        for warning in self.warnings:
            self.app.notify(warning, title="Fetch", severity="warning", timeout=20)
        self.dismiss(dest)
