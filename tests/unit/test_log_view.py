"""`tail`'s output: every line when piped; on a terminal, one bar redrawn in place."""

from __future__ import annotations

import io

from rtrain_tui.log_view import CLEAR_LINE, LogWriter
from tests.unit.test_progress_fold import bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


LINES = ["***** Running training *****", bar(1, 20), bar(2, 20) + "{'loss': 2.9}", bar(3, 20),
         "\x1b]0;PWNED\x07title"]


def test_piped_keeps_every_line_made_inert() -> None:
    out = io.StringIO()
    writer = LogWriter(out)
    writer.write(LINES)
    writer.close()
    assert out.getvalue().splitlines() == [
        "***** Running training *****", bar(1, 20), bar(2, 20) + "{'loss': 2.9}", bar(3, 20),
        "title"]  # the escape is gone, the text stays


def test_raw_on_a_terminal_is_not_folded_nor_cleaned() -> None:
    out = Terminal()
    LogWriter(out, raw=True).write(LINES)
    assert out.getvalue() == "".join(line + "\n" for line in LINES)


def test_a_terminal_gets_the_printed_lines_and_one_bar_redrawn_in_place() -> None:
    out = Terminal()
    writer = LogWriter(out)
    writer.write(LINES)
    assert out.getvalue() == ("***** Running training *****\n{'loss': 2.9}\ntitle\n" + bar(3, 20))
    out.seek(0), out.truncate()
    writer.write([bar(4, 20)])  # a redraw: back to the line's start, clear, draw
    assert out.getvalue() == CLEAR_LINE + bar(4, 20)
    out.seek(0), out.truncate()
    writer.interrupt()  # a message to stderr takes the line
    writer.write(["saving"])
    assert out.getvalue() == CLEAR_LINE + "saving\n" + bar(4, 20)
    out.seek(0), out.truncate()
    writer.close()  # the bar stays where it got to; what follows starts below it
    assert out.getvalue() == "\n"


def test_the_bar_is_cut_to_the_terminal_width_so_it_can_be_redrawn(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "30")
    out = Terminal()
    LogWriter(out).write([bar(5, 20, desc="a very long description of the bar: ")])
    drawn = out.getvalue()
    assert len(drawn) == 29 and drawn.endswith("…")
