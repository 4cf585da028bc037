"""Stop: a confirmation naming run and host, then the ladder as it happens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Static

from rtrain_tui.core.backends import backend_for
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs.index import RunRecord


def explain(record: RunRecord, grace: float) -> str:
    """What the engine's stop ladder will do to this run, in its backend's words."""
    return backend_for(record).describe_stop(grace)


class Stopper(Protocol):
    """What a stop needs: the engine's ladder (`Engine.stop`), nothing else of it."""

    async def stop(self, host: str, workdir: str, run_id: str, grace: float = ...,
                   on_step: Callable[[str], None] | None = ...) -> str: ...


class StopScreen(ModalScreen[tuple[bool, str] | None]):
    """Dismisses with (ok, the engine's verdict), or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("y", "confirm", "Stop it")]

    def __init__(self, engine: Stopper | None, record: RunRecord, grace: float = 10.0) -> None:
        super().__init__()
        self.engine = engine
        self.record = record
        self.grace = grace
        self.running = False

    def compose(self) -> ComposeResult:
        r = self.record
        with Vertical(id="dialog"):
            yield Static(Text(f"Stop {r.run_id} on {r.host}?", style="bold"), id="title")
            yield Static(explain(r, self.grace), id="explain")
            yield Static("", id="ladder")
            with Horizontal(id="buttons"):
                yield Button("Stop (y)", variant="error", id="confirm")
                yield Button("Cancel (esc)", id="cancel")
        yield Footer(show_command_palette=False)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        if not self.running:
            self.dismiss(None)

    @on(Button.Pressed, "#confirm")
    def action_confirm(self) -> None:
        if self.running or self.engine is None:
            return
        self.running = True
        self.query_one("#confirm", Button).disabled = True
        self.query_one("#cancel", Button).disabled = True
        self.stop_run()

    @work(group="stop", exclusive=True, exit_on_error=False)
    async def stop_run(self) -> None:
        ladder = self.query_one("#ladder", Static)
        steps: list[str] = []

        def step(message: str) -> None:
            steps.append(f"→ {message}")
            ladder.update(Text("\n".join(steps)))  # host text, never markup

        r = self.record
        assert self.engine is not None
        try:
            verdict = await self.engine.stop(r.host, r.workdir, r.run_id, self.grace, step)
            self.dismiss((True, verdict))
        except RemoteError as exc:
            self.dismiss((False, str(exc)))
