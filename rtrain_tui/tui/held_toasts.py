"""Toasts that never cover an input being typed in.

A toast shown while an `Input` has focus can sit on the very field being typed in: the
log search at the bottom of the screen, or any field of a form that fills a small
terminal. So while an input has focus, `notify` holds its toasts, and shows them, in
order, as soon as the focus leaves it. Mixed into the app ahead of `App`.
"""

from __future__ import annotations

from textual.app import App
from textual.notifications import SeverityLevel
from textual.widgets import Input

HELD_TOAST_CHECK = 0.25  # seconds between looks at whether the user stopped typing


class HeldToasts(App[int]):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._held_toasts: list[dict[str, object]] = []

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        toast = {"title": title, "severity": severity, "timeout": timeout, "markup": markup}
        if self._typing():
            self._held_toasts.append({"message": message, **toast})
            if len(self._held_toasts) == 1:
                self.set_timer(HELD_TOAST_CHECK, self._release_toasts)
            return
        super().notify(message, **toast)  # type: ignore[arg-type]

    def _typing(self) -> bool:
        try:
            return isinstance(self.focused, Input)
        except Exception:  # noqa: BLE001 - no screen yet (startup) or none any more
            return False

    def _release_toasts(self) -> None:
        if self._typing():
            self.set_timer(HELD_TOAST_CHECK, self._release_toasts)
            return
        held, self._held_toasts = self._held_toasts, []
        for toast in held:
            super().notify(**toast)  # type: ignore[arg-type]
