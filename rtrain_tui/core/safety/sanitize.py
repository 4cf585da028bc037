"""Terminal safety: text from a host, made harmless before it reaches a terminal.

A trainer's log, a host's error text and the names of its files are written by someone
else. Printed raw, an OSC sequence retitles the terminal (OSC 0/2), writes the user's
clipboard (OSC 52) or plants links (OSC 8); a CSI sequence clears the screen (2J),
switches to the alternate screen (?1049h) or moves the cursor over what the app drew.
`safe_line` removes every such sequence, every C0 control except TAB, DEL, every C1
control (U+0080-U+009F, which some terminals obey as 8-bit escapes) and the bidi
controls that reorder what is shown (U+202A-U+202E, U+2066-U+2069, LRM/RLM/ALM).
Line ends and bare CR become a space: the result is always one line.

SGR (colour and weight: `ESC [ ... m`) is the one sequence a caller may keep
(`keep_sgr=True`), for a view that renders it as style. Pure functions, no I/O.
"""

from __future__ import annotations

import re

__all__ = ["safe_line", "safe_text", "UNSAFE_CHARS"]

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Every character that can start or be part of something a terminal acts on.
UNSAFE_CHARS = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI}]")

_SEQUENCE = re.compile(
    # CSI: ESC [ (or the 8-bit CSI) parameters, intermediates, final byte.
    r"(?P<csi>(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?)"
    # OSC, DCS, SOS, PM, APC: a string up to BEL or ST (ESC \ or 8-bit ST), or the end.
    r"|(?P<string>(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c|\Z))"
    # Any other escape: ESC, intermediates, a final byte (or a lone ESC).
    r"|(?P<esc>\x1b[\x20-\x2f]*[\x30-\x7e]?)"
    r"|(?P<newline>\r\n|[\r\n])"
    f"|(?P<control>[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}])",
    re.DOTALL,
)
_SGR = re.compile(r"\x1b\[[0-9;:]*m\Z")


def safe_line(text: str, keep_sgr: bool = False) -> str:
    """`text` as one line with no control sequence a terminal would act on.

    Escape sequences and control characters are dropped (TAB is kept); `\\n`, `\\r\\n`
    and a bare `\\r` become one space. With `keep_sgr`, colour sequences (`ESC [ ... m`,
    7-bit only) are kept so that a view can render them as style.
    """
    if not UNSAFE_CHARS.search(text):
        return text  # the common case, and the cheap one: a flood of plain log lines

    def replace(match: re.Match[str]) -> str:
        if match.lastgroup == "newline":
            return " "
        if keep_sgr and match.lastgroup == "csi" and _SGR.match(match.group()):
            return match.group()
        return ""

    return _SEQUENCE.sub(replace, text)


def safe_text(text: str) -> str:
    """Multi-line host text (an error's detail): each line made safe, line ends kept."""
    return "\n".join(safe_line(line) for line in text.splitlines())
