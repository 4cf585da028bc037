"""Sending a message to apprise URLs: blocking (run it in a thread), retried, never raising.

apprise speaks to 100+ services from one URL each. A URL that fails is tried a few times
with backoff, then reported once, masked: it carries a token. Nothing a failing service
does reaches the run or the caller as an exception.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from rtrain_tui.core.safety.mask import mask_text, mask_url

TRIES = 3
BACKOFF_S = 0.5  # then 1 s: a service that is down for a moment is not given up on

# apprise logs each failure, URL included, and with no handler of the app's own Python
# would print warnings on stderr: tokens in a terminal. Our one line says it instead.
logging.getLogger("apprise").addHandler(logging.NullHandler())
logging.getLogger("apprise").propagate = False


def send_one(url: str, title: str, body: str, tries: int = TRIES, backoff_s: float = BACKOFF_S) -> str:
    """Send to `url`; '' when it arrived, else why not (masked, one line)."""
    try:
        import apprise
    except ImportError:  # pragma: no cover - a dependency; a broken install says so
        return "apprise is not installed (pip install apprise)"
    for attempt in range(tries):
        try:
            sender = apprise.Apprise()
            if not sender.add(url):
                return f"{mask_url(url)} is not a URL apprise knows"
            if sender.notify(title=title, body=body):
                return ""
        except Exception as exc:  # noqa: BLE001 - a plugin's failure must not reach the run
            if attempt == tries - 1:
                return mask_text(f"{mask_url(url)}: {' '.join(str(exc).split())}"[:300], (url,))
        if attempt < tries - 1:
            time.sleep(backoff_s * 2 ** attempt)
    return f"{mask_url(url)} refused it ({tries} tries)"


def send_all(urls: Sequence[str], title: str, body: str, tries: int = TRIES,
             backoff_s: float = BACKOFF_S) -> dict[str, str]:
    """{url: '' or why it failed} for each URL, in order."""
    return {url: send_one(url, title, body, tries, backoff_s) for url in urls}
