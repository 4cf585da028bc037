"""Notification URLs as they may be shown: apprise URLs carry tokens, so never whole.

`slack://TokenA/TokenB/#chan` is shown `slack://To…/To…/#ch…`: the service stays readable
(which URL failed), no token does. The rule, so it holds for any service's layout without
knowing it: the scheme is kept; a password (`user:PW@`) becomes `***`; the rest is split at
URL punctuation (`/ : @ ? & = # . , ; + % ~ !`), and each piece longer than 3 characters
keeps its first 2 and ends in `…`. So no run of 4 or more token characters (letters,
digits, `-`, `_`: what tokens are made of) that was in the URL is ever in what is shown.

Pure functions; `mask_text` masks every URL inside free text (an error line from apprise or
from a host), whether or not it is one we know.
"""

from __future__ import annotations

import re

__all__ = ["mask_url", "mask_text"]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,31}://)(.*)", re.DOTALL)
_PASSWORD = re.compile(r"^([^/@]*?:)[^/@]*@")
_PIECES = re.compile(r"([/:@?&=#.,;+%~!]+)")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://\S+")


def _piece(text: str) -> str:
    return text if len(text) <= 3 else text[:2] + "…"


def mask_url(url: str) -> str:
    """`url` with every token cut short (see the module docstring); the scheme is kept."""
    found = _SCHEME.fullmatch(url)
    scheme, rest = (found.group(1), found.group(2)) if found else ("", url)
    rest = _PASSWORD.sub(r"\1***@", rest)
    parts = _PIECES.split(rest)
    return scheme + "".join(p if i % 2 or p == "***" else _piece(p) for i, p in enumerate(parts))


def mask_text(text: str, secrets: tuple[str, ...] | list[str] = ()) -> str:
    """`text` with each of `secrets` (the configured URLs) and every other URL in it masked."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, mask_url(secret))
    return _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)
