"""The hosts panel: every ssh-config alias with its badge and a one-line GPU summary."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from rtrain_tui.tui.badges import host_badge


@dataclass
class HostView:
    alias: str
    status: str = "not checked"
    summary: str = ""


class HostList(OptionList):
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    @dataclass
    class HostSelected(Message):
        """The highlight moved to a host."""

        alias: str

    @dataclass
    class PreflightRequested(Message):
        """Enter on a host: check it."""

        alias: str

    def __init__(self, aliases: list[str], **kwargs: object) -> None:
        self.hosts = {a: HostView(a) for a in aliases}
        super().__init__(*(self._option(h) for h in self.hosts.values()), **kwargs)  # type: ignore[arg-type]
        self.border_title = "Hosts"

    @staticmethod
    def _option(h: HostView) -> Option:
        prompt = Text.assemble((h.alias, "bold"), "  ", host_badge(h.status))
        if h.summary:
            prompt.append(f"\n  {h.summary}", style="dim")
        return Option(prompt, id=h.alias)

    @property
    def selected_alias(self) -> str | None:
        if self.highlighted is None or not self.option_count:
            return None
        return self.get_option_at_index(self.highlighted).id

    def set_status(self, alias: str, status: str, summary: str | None = None) -> None:
        h = self.hosts.setdefault(alias, HostView(alias))
        h.status = status
        if summary is not None:
            h.summary = summary
        try:
            self.replace_option_prompt(alias, self._option(h).prompt)
        except Exception:  # a host added after mount (the demo host)
            self.add_option(self._option(h))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.post_message(self.HostSelected(event.option.id))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.post_message(self.PreflightRequested(event.option.id))
