"""Exactly once: who sends a run's message is decided on its host, by one atomic `mkdir`.

Each transition of each run has a marker, `RUNDIR/notified/aN-EVENT` (attempt N by the
host's count: a resumed or retried run's next failure is a new message). Whoever makes it
sends: a client, or with `[notify] on_host` the run's own wrapper (host_send.py); every
other (another laptop, the app beside `watch`) finds it taken and sends nothing. The
marker is claimed before the send: a send that fails after its retries is said once, by
the one that claimed it, and not tried again by the others (a message twice is the worse
failure for a phone). One round trip per host for all its claims, with the log's tail.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rtrain_tui.core import host as host_files
from rtrain_tui.core.host import remote_sh

_EVENT = re.compile(r"[a-z]{1,16}(-apprise)?")  # notifier.APPRISE_ONLY


def check_event(event: str) -> str:
    """`event` (failed, stalled…), validated: it is put into a shell line and a file name."""
    if not _EVENT.fullmatch(event):
        raise ValueError(f"bad notification event {event!r}")
    return event


def claim_script(items: Sequence[tuple[str, str, str]]) -> str:
    """Claim each (workdir, run id, event) for the run's current attempt (the host counts
    it); output parsed by `parse_claims`."""
    lines = [host_files.text("claim_notify.sh")]
    for i, (workdir, run_id, event) in enumerate(items):
        lines.append(f"set -- {remote_sh.run_dir_word(workdir, run_id)}; "
                     f"claim {i} \"$1\" {check_event(event)}\n")
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
