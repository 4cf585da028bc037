"""Exactly once: who sends a run's message is decided on its host, by one atomic `mkdir`.

Each transition of each run has a marker, `RUNDIR/notified/aN-EVENT` (attempt N by the
host's count: a resumed or retried run's next failure is a new message). Whoever makes it
sends: a client, or with `[notify] on_host` the run's own wrapper (host_send.py); every
other (another laptop, the app beside `watch`) finds it taken and sends nothing. The
marker is claimed before the send: a send that fails after its retries is said once, by
the one that claimed it, and not tried again by the others (a message twice is the worse
failure for a phone). One round trip per host for all its claims, with the log's tail.

A claim carries its claimer's token (`token`, into the marker): the connection sends a
script once more after a dropped link, and a claim whose answer was lost then finds its
own marker (`claimed`), not somebody else's (`taken`, and nobody would send). A claim
that could not reach its host at all is kept (`Pending`) for the next refresh or
`watch` of this client to claim again, with the same token.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from rtrain_tui.core import host as host_files
from rtrain_tui.core.host import remote_sh

_EVENT = re.compile(r"[a-z]{1,16}(-apprise)?")  # notifier.APPRISE_ONLY
_TOKEN = re.compile(r"[0-9a-f]{8,64}")


def check_event(event: str) -> str:
    """`event` (failed, stalled…), validated: it is put into a shell line and a file name."""
    if not _EVENT.fullmatch(event):
        raise ValueError(f"bad notification event {event!r}")
    return event


def new_token() -> str:
    """A claimer's token: what makes a marker this claimer's own."""
    return secrets.token_hex(8)


def claim_script(items: Sequence[tuple[str, str, str]], token: str) -> str:
    """Claim each (workdir, run id, event) for the run's current attempt (the host counts
    it), as `token`'s; output parsed by `parse_claims`."""
    if not _TOKEN.fullmatch(token):
        raise ValueError("bad claim token")
    lines = [host_files.text("attempt.sh") + host_files.text("claim_notify.sh")]
    for i, (workdir, run_id, event) in enumerate(items):
        lines.append(f"set -- {remote_sh.run_dir_word(workdir, run_id)}; "
                     f"claim {i} \"$1\" {check_event(event)} {token}\n")
    return "".join(lines)


@dataclass(frozen=True)
class Claim:
    claimed: bool
    log_tail: str = ""  # the end of train.log (decoded, maybe cut mid-line), when claimed


def parse_claims(output: str, count: int) -> dict[int, Claim]:
    """{item index: Claim} for the items the host answered; one not answered is not claimed."""
    found: dict[int, Claim] = {}
    for line in output.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] != "claim" or not parts[1].isdigit():
            continue
        i = int(parts[1])
        if not 0 <= i < count or i in found:
            continue
        tail = ""
        if parts[2] == "claimed" and len(parts) > 3:
            try:
                tail = base64.b64decode(parts[3], validate=True).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                tail = ""
        found[i] = Claim(parts[2] == "claimed", tail)
    return found


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class Pending(Generic[K, V]):
    """Claims that could not reach their host, by (run, marker): each with what it needs
    to be sent, and the token it was claimed with (so that a claim that did reach the
    host, its answer lost, is found to be ours). Kept by one client (the engine) for its
    next refresh or `watch`; a claim kept again replaces the one before."""

    items: dict[K, tuple[V, str]] = field(default_factory=dict)

    def keep(self, key: K, value: V, token: str) -> None:
        self.items[key] = (value, token)

    def take(self) -> list[tuple[K, V, str]]:
        """Every claim kept, removed: the caller keeps again what fails again."""
        taken = [(k, v, t) for k, (v, t) in self.items.items()]
        self.items.clear()
        return taken

    def __bool__(self) -> bool:
        return bool(self.items)
