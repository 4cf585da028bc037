"""Fold a log's progress-bar redraws into one live line, as a terminal shows them.

tqdm redraws its bar with `\\r` many times a second; the log keeps every redraw, so a
120-step run's log reads as ~4 bar lines per loss line. A reader wants what tqdm meant:
the lines the program printed, with one bar below them that updates in place. This is
that, for the log pane and for `tail` on a terminal (a piped `tail` keeps every line:
scripts grep them).

Rules, kept simple enough to predict:
- a line that starts with a tqdm bar (`desc: 61%|███ | 1840/3000 [1:17<48:58, 2.5s/it]`)
  becomes the live bar; the next redraw of the same bar (same description and total)
  replaces it;
- a different bar (an eval bar, "Writing model shards") first moves the old bar, in its
  last state, into the history: it finished or paused there, and that is worth keeping;
- a bar that reaches its total (`120/120`) moves into the history where it ended, as
  tqdm leaves it on a terminal; a second draw of that same finished bar is dropped;
- text glued after a bar (transformers 5 prints its `{'loss': …}` dict to buffered
  stdout, right after the bar on stderr) is a line of its own in the history;
- an empty line right before a bar is dropped: it is the `\n\r` of a redraw that
  follows a printed line, which a terminal shows as no line at all;
- a line of spaces right after a bar is dropped: it is tqdm erasing its bar
  (`\r<spaces>\r`) before `tqdm.write` prints a line (transformers prints every log
  dict so), which a terminal shows as no line at all;
- every other line goes to the history unchanged.
"""

from __future__ import annotations

from rtrain_tui.core.metrics.metrics import TQDM_BAR


class ProgressFolder:
    """Lines in, history lines out; `bar` is the live bar after them (None: none yet)."""

    def __init__(self) -> None:
        self.bar: str | None = None
        self._which: tuple[str, str] | None = None  # the live bar's description and total
        self._blank = False  # an empty line held back: it may be the \n\r before a bar
        self._finished: tuple[str, str, str] | None = None  # the last bar that reached its total
        self._after_bar = False  # the previous line was a bar: a line of spaces now erases it

    def fold(self, lines: list[str]) -> list[str]:
        history: list[str] = []
        for line in lines:
            m = TQDM_BAR.match(line) if "%|" in line else None
            after_bar, self._after_bar = self._after_bar, m is not None
            if after_bar and m is None and line and not line.strip(" "):
                continue  # tqdm's erase of the bar it just drew
            if self._blank:
                self._blank = False
                if m is None:
                    history.append("")
            if m is None:
                if line:
                    history.append(line)
                else:
                    self._blank = True
                continue
            which = (m.group("desc").strip(), m.group("total"))
            if self.bar is not None and which != self._which:
                history.append(self.bar)
            bar = line[:m.end()].rstrip()
            if m.group("n") != m.group("total"):
                self.bar, self._which, self._finished = bar, which, None
            else:
                if self._finished != (*which, m.group("n")):
                    history.append(bar)
                self.bar, self._which, self._finished = None, None, (*which, m.group("n"))
            glued = line[m.end():].strip()
            if glued:
                history.append(glued)
        return history

    def finish(self) -> list[str]:
        """The live bar as a last history line (the stream ended); the folder is empty after."""
        blank, bar = self._blank, self.bar
        self.bar, self._which, self._blank = None, None, False
        return ([""] if blank else []) + ([bar] if bar is not None else [])
