"""A webhook-style URL's POST (core/notify/webhooks.py) against a real HTTP receiver
(tests/notify_receiver.py): one request, to that very path, by curl and by urllib.

Moved out of tests/unit (tests/unit/test_notify_webhooks.py holds the pure parts): it
starts an HTTP server, and the fast lane starts nothing."""

from __future__ import annotations

import shutil

import pytest

from rtrain_tui.core.notify.webhooks import posts_of, send
from tests.notify_receiver import Receiver


@pytest.mark.parametrize("how", ["curl", "urllib"])
def test_a_url_with_brackets_or_braces_is_one_post_to_that_very_path(receiver: Receiver,
                                                                      how: str) -> None:
    """curl reads `{a,b}` and `[1-2]` in a URL as globs (several requests, to other
    paths); a URL from config.toml is one address, as urllib and apprise take it."""
    curl = shutil.which("curl") if how == "curl" else None
    assert curl or how == "urllib", "curl is missing (the host's sender uses it): install it"
    [post] = posts_of(receiver.url("hook{a,b}/x[1-2]"))
    assert send(post, b'{"title": "t"}', curl) == ""
    assert [m["path"] for m in receiver.messages()] == ["/hook{a,b}/x[1-2]"]
