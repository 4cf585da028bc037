"""A real HTTP receiver on 127.0.0.1 standing in for the notification services: what
apprise's `json://` URLs (and, on the host, curl) post arrives here, one entry a POST."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver:
    def __init__(self) -> None:
        self.got: list[dict[str, object]] = []
        self.status = 200  # what every POST is answered (500: a service that refuses)
        self.lock = threading.Lock()
        # Set: each POST is held until it is set (a slow service), then answered.
        self.hold: threading.Event | None = None
        self.hold_after = 0  # POSTs held: those after the first `hold_after` (answered at once)
        self.answered = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(body or b"{}")
                except ValueError:
                    payload = {"raw": body.decode("utf-8", "replace")}
                with receiver.lock:
                    receiver.got.append({"path": self.path, **payload})
                    held = len(receiver.got) > receiver.hold_after
                if receiver.hold is not None and held:
                    receiver.hold.wait(60)
                self.send_response(receiver.status)
                self.end_headers()
                with receiver.lock:
                    receiver.answered += 1

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str = "hook") -> str:
        return f"json://127.0.0.1:{self.port}/{path}"

    def messages(self) -> list[dict[str, object]]:
        with self.lock:
            return list(self.got)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()
