"""Fetch: browse the run directory on the host, pick a file or folder, bring it home."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, ProgressBar, Static, Tree

from rtrain_tui.core.engine import Engine
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.index import RunRecord
from rtrain_tui.core.transfer import RemoteEntry


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


class FetchScreen(ModalScreen[Path | None]):
    """Dismisses with the local path of what was fetched, or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "fetch", "Fetch")]

    def __init__(self, engine: Engine | None, record: RunRecord, out_dir: Path,
                 entries: list[RemoteEntry] | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.record = record
        self.out_dir = out_dir
        self.entries = entries

    def compose(self) -> ComposeResult:
        r = self.record
        with Vertical(id="dialog"):
            yield Static(f"[b]Fetch from {r.run_id} on {r.host}[/b]", id="title")
            tree: Tree[RemoteEntry | None] = Tree(f"{r.run_id}/", id="tree")
            tree.root.expand()
            yield tree
            with Horizontal(id="dest-row"):
                yield Label("to ")
                yield Input(str(self.out_dir), id="dest", compact=True)
            yield Static("", id="errors")
            yield ProgressBar(id="progress", show_eta=False)
            with Horizontal(id="buttons"):
                yield Button("Fetch", variant="primary", id="fetch")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#progress", ProgressBar).display = False
        if self.entries is not None:
            self.show_entries(self.entries)
        else:
            self.load()
        self.query_one("#tree", Tree).focus()

    @work(group="fetch-list", exclusive=True, exit_on_error=False)
    async def load(self) -> None:
        r = self.record
        assert self.engine is not None
        try:
            self.show_entries(await self.engine.list_run(r.host, r.workdir, r.run_id))
        except RemoteError as exc:
            self.query_one("#errors", Static).update(f"✗ {exc}")

    def show_entries(self, entries: list[RemoteEntry]) -> None:
        tree = self.query_one("#tree", Tree)
        nodes = {"": tree.root}
        for e in entries:
            parent = nodes.get(e.path.rpartition("/")[0], tree.root)
            name = e.path.rpartition("/")[2]
            if e.is_dir:
                nodes[e.path] = parent.add(Text(f"{name}/", style="bold"), data=e, expand=False)
            else:
                parent.add_leaf(Text.assemble(name, (f"  {human_size(e.size)}", "dim")), data=e)
        lora = next((n for p, n in nodes.items() if p == "lora_model"), None)
        tree.move_cursor(lora or (tree.root.children[0] if tree.root.children else tree.root))

    @property
    def chosen(self) -> RemoteEntry | None:
        node = self.query_one("#tree", Tree).cursor_node
        return node.data if node is not None else None

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.workers.cancel_group(self, "fetch")
        self.dismiss(None)

    @on(Button.Pressed, "#fetch")
    @on(Input.Submitted)
    def action_fetch(self) -> None:
        entry = self.chosen
        if entry is None or self.engine is None:
            self.query_one("#errors", Static).update("✗ pick a file or folder first")
            return
        self.query_one("#fetch", Button).disabled = True
        self.run_fetch(entry.path, Path(self.query_one("#dest", Input).value).expanduser())

    @work(group="fetch", exclusive=True, exit_on_error=False)
    async def run_fetch(self, path: str, out: Path) -> None:
        bar = self.query_one("#progress", ProgressBar)
        bar.display = True

        def progress(_label: str, done: int, total: int) -> None:
            bar.update(total=max(total, 1), progress=done)

        r = self.record
        assert self.engine is not None
        try:
            dest = await self.engine.fetch(r.host, r.workdir, r.run_id, path, out, progress)
        except RemoteError as exc:
            self.query_one("#errors", Static).update(f"✗ {exc}")
            self.query_one("#fetch", Button).disabled = False
            return
        self.dismiss(dest)
