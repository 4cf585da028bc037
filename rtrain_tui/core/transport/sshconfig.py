"""The host list: concrete aliases from `~/.ssh/config` and the files it `Include`s.

Connection options are asyncssh's business (see `connection.host_options`); this module
only answers "which hosts can the user pick?", so patterns (`*`, `?`, `!`) are left out.
"""

from __future__ import annotations

import difflib
import glob
import os
import re
import shlex
import unicodedata
from pathlib import Path

_KEYWORD = re.compile(r"([^\s=]+)\s*(?:=\s*)?(.*)", re.DOTALL)


def _has_controls(word: str) -> bool:
    return any(unicodedata.category(c)[0] == "C" for c in word)


def default_ssh_config() -> Path:
    return Path(os.path.expanduser("~/.ssh/config"))


def list_hosts(config: Path) -> list[str]:
    """Aliases in file order, each once; a missing or unreadable file gives none."""
    seen: dict[str, None] = {}
    _collect(config, seen, depth=0)
    return list(seen)


def _collect(path: Path, seen: dict[str, None], depth: int) -> None:
    if depth > 16:  # an Include loop
        return
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        # OpenSSH: the keyword ends at whitespace (spaces or tabs) or at one `=`.
        found = _KEYWORD.match(stripped)
        if found is None:
            continue
        keyword, rest = found.groups()
        try:
            words = shlex.split(rest, comments=True)
        except ValueError:
            continue
        keyword = keyword.lower()
        if keyword == "host":
            for word in words:
                # Patterns are not hosts; a name with control characters cannot be shown
                # or used safely (validate.check_host refuses it too).
                if not any(c in word for c in "*?!") and not _has_controls(word):
                    seen.setdefault(word, None)
        elif keyword == "include":
            for pattern in words:
                for included in _include_paths(pattern):
                    _collect(included, seen, depth + 1)


def _include_paths(pattern: str) -> list[Path]:
    # OpenSSH: relative Include paths are relative to ~/.ssh.
    expanded = os.path.expanduser(pattern)
    if not os.path.isabs(expanded):
        expanded = os.path.join(os.path.expanduser("~/.ssh"), expanded)
    return [Path(p) for p in sorted(glob.glob(expanded))]


def shown_path(path: Path | None) -> str:
    """A config path as the user would type it: `~/.ssh/config`, not `/home/me/.ssh/config`."""
    if path is None:
        return "~/.ssh/config"
    home = os.path.expanduser("~")
    text = str(path)
    return "~" + text[len(home):] if home != "/" and text.startswith(home + "/") else text


DEMO_ALIAS = "demo"  # the built-in demo host's alias (served in-process with --demo)


def not_configured_message(alias: str, config: Path | None, demo_alias: str = DEMO_ALIAS) -> str:
    """`HOST is not in ~/.ssh/config` and what to do: the closest alias, or `--demo`.

    Said for a name that is no alias and does not resolve either, so a typo of an alias
    (`demmo`, `h100-lba`) gets the name the user most likely meant.
    """
    where = shown_path(config)
    if alias == demo_alias:
        return (f"{alias} is not in {where}: add --demo for the built-in demo host "
                f"(rtrain-tui --demo ...).")
    known = list_hosts(config) if config is not None else []
    close = difflib.get_close_matches(alias, known, n=1, cutoff=0.6)
    if not close and difflib.SequenceMatcher(None, alias, demo_alias).ratio() >= 0.6:
        return f"{alias} is not in {where} and does not resolve; did you mean demo? (the demo host needs --demo)"
    hint = f"did you mean {close[0]}?" if close else (
        "add it there, or check the name (rtrain-tui lists the hosts it knows when started "
        "without a command).")
    return f"{alias} is not in {where} and does not resolve; {hint}"
