"""The host's own message (core/notify/host_send.py) against a service that never
answers: every send of a message ends within its time limit.

Moved out of tests/unit: it listens on a real socket and waits its 3 s limit out, and
the fast lane starts nothing and sleeps nowhere."""

from __future__ import annotations

import json

import pytest

from rtrain_tui.core.notify import host_send


@pytest.mark.parametrize("with_curl", [True, False])
def test_all_sends_of_a_message_end_within_its_limit_and_what_was_cut_says_so(with_curl: bool) -> None:
    import shutil
    import socket
    import time

    # A service that takes the connection and never answers: the kernel accepts it (the
    # backlog), nothing reads it. Each POST alone could wait 10 s, and tries 3 times.
    hung = socket.create_server(("127.0.0.1", 0), backlog=16)
    port = hung.getsockname()[1]
    urls = [f"json://127.0.0.1:{port}/hook{i}" for i in range(4)]
    config = json.loads(host_send.settings("gpu", "r1", urls, 1.0))
    curl = shutil.which("curl") if with_curl else None
    assert curl or not with_curl, "curl is needed on this machine for this test"
    began = time.monotonic()
    try:
        results = host_send.deliver(config, "t", "b", curl, within=3)
    finally:
        hung.close()
    assert time.monotonic() - began < 3 + 1.5
    assert len(results) == 4 and all(why for _, why in results)
    # The first was tried until the limit; the rest never started, and say why.
    assert all(why == host_send.LIMIT_SAID.format(3) for _, why in results[1:])
    assert results[0][1].endswith(host_send.LIMIT_SAID.format(3))
