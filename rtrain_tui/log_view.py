"""A run's log on stdout for `tail`: every line when piped, folded bars on a terminal.

Piped (a script, `grep`, a file), each line goes out as the host wrote it, made inert:
scripts count on every line. On a terminal, progress-bar redraws are folded
(core/logs/progress_fold.py) and the bar is drawn on the last line and redrawn in place with
`\\r`, as tqdm itself does, cut to the terminal's width so it never wraps (a wrapped line
cannot be redrawn with `\\r`). `--raw` is the exact bytes' lines, never folded.
"""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

from rich.cells import cell_len, set_cell_size

from rtrain_tui.core.logs.progress_fold import ProgressFolder
from rtrain_tui.core.safety.sanitize import safe_line

CLEAR_LINE = "\r\x1b[K"


class LogWriter:
    def __init__(self, out: TextIO | None = None, raw: bool = False) -> None:
        self.out = out or sys.stdout
        self.raw = raw
        self.folding = not raw and self.out.isatty()
        self._folder = ProgressFolder()
        self._drawn = False  # a bar is on the terminal's last line, without a newline

    def write(self, lines: list[str]) -> None:
        if not self.folding:
            self.out.write("".join((line if self.raw else safe_line(line)) + "\n" for line in lines))
            self.out.flush()
            return
        history = self._folder.fold(lines)
        parts = [CLEAR_LINE] if self._drawn else []
        parts += [safe_line(line) + "\n" for line in history]
        bar = self._folder.bar
        if bar is not None:
            parts.append(self._fit(safe_line(bar)))
        self._drawn = bar is not None
        self.out.write("".join(parts))
        self.out.flush()

    def interrupt(self) -> None:
        """Clear the bar before another message takes the line (it comes back on the next write)."""
        if self._drawn:
            self.out.write(CLEAR_LINE)
            self.out.flush()
            self._drawn = False

    def close(self) -> None:
        """The stream ended: the bar stays where it got to, and the next output starts below."""
        if self.folding and self._folder.bar is not None:
            if not self._drawn:
                self.out.write(self._fit(safe_line(self._folder.bar)))
            self.out.write("\n")
            self.out.flush()
        self._drawn = False

    def _fit(self, text: str) -> str:
        width = max(shutil.get_terminal_size((80, 24)).columns - 1, 10)
        if cell_len(text) <= width:
            return text
        return set_cell_size(text, width - 1) + "…"
