"""A transfer's progress in words: bytes read, bytes on the wire, ratio, rate and ETA.

`train.jsonl: 412 MB of 1.0 GB · 3.8× compressed · 31 MB/s · 19 s left`, for the CLI's
progress line and the start form alike (both faces word it the same way). Transfers call
`Progress(label, done, total)` as they always did; the label they give is a `Moving`: a
str (the file's name, so every existing callback works unchanged) that also carries the
bytes on the wire so far, for a caller that words more.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rtrain_tui.core.metrics.metrics import format_eta

SHOWN_FROM = 0.5  # seconds: before that, a rate is mostly the connection's setup


class Moving(str):
    """A progress label (the file's name) with the bytes on the wire so far (`wire`);
    for a delta (`of`: the whole file's size), the transfer's total is only the part sent."""

    wire: int
    of: int

    def __new__(cls, name: str, wire: int, of: int = 0) -> Moving:
        self = super().__new__(cls, name)
        self.wire = wire
        self.of = of
        return self


def size_text(n: float) -> str:
    """Bytes in decimal units, as `scp` and rich word them: 412 MB, 1.0 GB, 980 kB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{int(n)} B"


def ratio_text(ratio: float) -> str:
    """`3.8×`, `42×`: a tenth only where it still says something."""
    return f"{ratio:.1f}×" if ratio < 10 else f"{ratio:.0f}×"


def describe(done: int, total: int, wire: int | None, seconds: float, of: int = 0) -> str:
    """`412 MB of 1.0 GB · 3.8× compressed · 31 MB/s · 19 s left` (each part when known).

    `wire`: bytes on the wire for the `done` bytes (None: not known); the ratio is shown
    only where compression saved a tenth or more. Rate and ETA from `seconds` elapsed.
    `of`: a delta's whole file, of which `total` is the part to send, said once, in the
    same line: `delta · 1.0 MB of 2.1 MB to send (of 1.0 GB) · …`.
    """
    parts = ([f"delta · {size_text(done)} of {size_text(total)} to send (of {size_text(of)})"]
             if of else [f"{size_text(done)} of {size_text(total)}"])
    if wire and done and done / wire >= 1.1:
        parts.append(f"{ratio_text(done / wire)} compressed")
    if seconds >= SHOWN_FROM and done:
        rate = done / seconds
        parts.append(f"{size_text(rate)}/s")
        if total > done:
            left = (total - done) / rate
            parts.append(f"{round(left)} s left" if left < 60 else f"{format_eta(left)} left")
    return " · ".join(parts)


class Meter:
    """Words each progress call of one transfer label (rate since its first call)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Keyed by name and whole size: a delta that falls back to sending the file whole
        # starts its rate afresh.
        self._began: dict[tuple[str, int], float] = {}

    def line(self, label: str, done: int, total: int) -> str:
        now = self._clock()
        moving = label if isinstance(label, Moving) else None
        began = self._began.setdefault((str(label), moving.of if moving else 0), now)
        return describe(done, total, moving.wire if moving else None, now - began,
                        moving.of if moving else 0)


def shipped_words(name: str, size: int, how: str, wire: int, seconds: float, host: str) -> str:
    """How a start's dataset went, in one line, once it is on the host (the progress line
    is gone by then): `train.jsonl: already on gpu, nothing sent`, `train.jsonl: sent
    105 MB as 18 MB (5.8× compressed) in 3.1 s`, `… sent as a delta: 1.4 MB for its
    256 MB, the rest was on gpu already, in 1.5 s`. `how` and `wire`: delta.Shipped's."""
    if how == "linked":
        return f"{name}: already on {host}, nothing sent"
    took = f"in {seconds:.1f} s"
    if how == "delta":
        return (f"{name}: sent as a delta: {size_text(wire)} for its {size_text(size)}, "
                f"the rest was on {host} already, {took}")
    if wire and size / wire >= 1.1:
        return (f"{name}: sent {size_text(size)} as {size_text(wire)} "
                f"({ratio_text(size / wire)} compressed) {took}")
    rate = f" ({size_text(size / seconds)}/s)" if seconds >= SHOWN_FROM else ""
    return f"{name}: sent {size_text(size)} {took}{rate}"
