"""Retry by itself (`start --retries N`): whether the wrapper on the host tries a failed
attempt again, after how long, and from which checkpoint. Pure, plus `main` for the host.

The decision is made on the host, so it holds with every laptop closed: the run's
wrapper (its retry loop, core/host/retry.sh) ends what is left of the failed attempt,
then pipes `host/checkpoints.sh`'s listing of the run dir into this module, run by the
trainer's own Python from `retry.pyz` (a zip of this module and the few it imports,
built by `core/host.bundle`, written into the run dir at launch). So there is one rule
each: why a run ended is `reasons.why_it_ended`, the newest complete checkpoint is
`checkpoints.judge` + `newest_complete` (fed the same listing a resume reads), and what
repeating cannot fix is `reasons.repeat_cannot_fix`.

`main` prints shell assignments (every value `shlex.quote`d) that the wrapper `eval`s:
`rt_go` (1: try again), `rt_wait` (seconds), `rt_ck` (the checkpoint, '' = from the
start), `rt_why` (the reason the probe shows: `retrying in 60 s after NCCL timeout …
(attempt 2 of 3)`, or why it gave up), `rt_sep` (the log's separator line) and `rt_rec`
(the ended attempt's attempts.jsonl record). It keeps to what the host's Python 3.8+ runs.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import dataclass

from rtrain_tui.core.logs.reasons import repeat_cannot_fix, why_it_ended
from rtrain_tui.core.metrics.metrics import parse_text
from rtrain_tui.core.runs import attempt_layout, checkpoints

TAIL_BYTES = 32 * 1024  # as core/logs/run_reason.py reads: a traceback fits
DEFAULT_BASE_S = 30.0  # the wait before attempt K is K × this
# Set in the environment of the `rtrain-tui start` (not the trainer's --env), it replaces
# DEFAULT_BASE_S for that run (launch.json keeps it for its resumes): for tests, which
# must not wait 30 s for a retry.
BASE_ENV = "RTRAIN_RETRY_BASE_S"


def _seconds_from_env(environ: dict[str, str] | None, name: str, low: float, high: float,
                      default: float) -> float:
    """`name` in `environ` (default: this process's) when it is a number low..high, else
    `default`: the test-only knobs below, read by `start` and kept in launch.json."""
    import os

    said = (os.environ if environ is None else environ).get(name, "")
    try:
        value = float(said)
    except ValueError:
        return default
    return value if low <= value <= high else default


STALL_CHECK_ENV = "RTRAIN_STALL_CHECK_S"  # as BASE_ENV, for the stall watchdog's 60 s


def stall_check_seconds(environ: dict[str, str] | None = None) -> float:
    """How often a run's stall watchdog looks: STALL_CHECK_ENV (0.1..3600), else 60 s."""
    return _seconds_from_env(environ, STALL_CHECK_ENV, 0.1, 3600, 60.0)


GPUS_IDLE_ENV = "RTRAIN_GPUS_IDLE_S"  # as BASE_ENV, for "GPUs idle for 10 minutes"


def gpus_idle_seconds(environ: dict[str, str] | None = None) -> float:
    """How long a run's GPUs may idle before it is said: GPUS_IDLE_ENV (0..86400), else 600 s."""
    return _seconds_from_env(environ, GPUS_IDLE_ENV, 0, 86400, 600.0)


def base_seconds(environ: dict[str, str] | None = None) -> float:
    """The retry wait's base for a start: BASE_ENV when it is a number 0..3600, else 30 s."""
    return _seconds_from_env(environ, BASE_ENV, 0, 3600, DEFAULT_BASE_S)


def separator(attempt: int, checkpoint: str) -> str:
    """The line train.log gets before attempt `attempt`'s output (a resume's or a retry's)."""
    how = f"resuming from {checkpoint}" if checkpoint else "restarting from the start"
    return f"=== attempt {attempt}: {how} ==="


@dataclass(frozen=True)
class Verdict:
    """What the wrapper does after attempt `attempt` failed."""

    go: bool
    wait_s: float
    checkpoint: str  # '' = from the start
    why: str  # the probe's reason: while waiting, or why it gave up
    reason: str  # why the attempt ended (attempts.jsonl)
    step: int | None  # the last step the attempt logged


def this_attempt(log_tail: str) -> str:
    """The part of the log's tail the last attempt wrote (after its separator)."""
    cut = log_tail.rfind("=== attempt ")
    return log_tail[cut:] if cut >= 0 else log_tail


def decide(exit_code: int, log_tail: str, listing: list[checkpoints.Listing], attempt: int,
           last: int, base_s: float, previous: dict[str, object] | None,
           host: str = "", stalled: str = "") -> Verdict:
    """Attempt `attempt` ended with `exit_code` (not by our stop); try `attempt + 1` if it is
    at most `last` and repeating can fix what happened. `previous`: the attempts.jsonl
    record of the attempt before (its reason and step), for "CUDA OOM at the same step".
    `stalled`: the watchdog ended the attempt (`--on-stall restart`) and said why: that
    is the reason, and a hang is worth a retry."""
    text = this_attempt(log_tail)
    reason = stalled or why_it_ended("failed", exit_code, False, text.splitlines(), host) \
        or f"exit {exit_code}"
    step = parse_text(text).summary().step
    prev = previous or {}
    prev_step = prev.get("step")
    cannot = "" if stalled else repeat_cannot_fix(
        reason, exit_code, str(prev.get("reason") or ""), step,
        prev_step if isinstance(prev_step, int) else None)
    if cannot:
        return Verdict(False, 0, "", f"{reason} (not retried: {cannot})", reason, step)
    nxt = attempt + 1
    if nxt > last:
        return Verdict(False, 0, "", f"{reason} (gave up after {attempt} attempts)", reason, step)
    newest = checkpoints.newest_complete(checkpoints.judge(listing)).checkpoint
    ck = newest.path if newest is not None else ""
    wait = max(0.0, base_s) * nxt
    why = f"retrying in {wait:g} s after {reason} (attempt {nxt} of {last})"
    return Verdict(True, wait, ck, why, reason, step)


def _previous(jsonl: str, attempt: int) -> dict[str, object] | None:
    found: dict[str, object] | None = None
    for line in jsonl.splitlines():
        try:
            one = json.loads(line)
        except ValueError:
            continue
        if isinstance(one, dict) and one.get("attempt") == attempt - 1:
            found = {**(found or {}), **one}
    return found


def _read_tail(path: str, nbytes: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - nbytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def main(argv: list[str]) -> int:
    """`retry.pyz EXIT ATTEMPT LAST BASE_S MARKER` in the run dir, the checkpoint listing
    (host/checkpoints.sh, with MARKER) on stdin."""
    code, attempt, last = int(argv[0]), int(argv[1]), int(argv[2])
    try:
        base = float(argv[3])
    except ValueError:
        base = DEFAULT_BASE_S
    listing = checkpoints.parse_listing(sys.stdin.read(), argv[4])
    tail = _read_tail("train.log", TAIL_BYTES)
    jsonl = _read_tail(attempt_layout.here_attempts_jsonl(), 256 * 1024)
    # watch.sh's, when it ended the attempt: in the ended attempt's own directory.
    stalled = _one_line(_read_tail(f"{attempt_layout.here_attempt_dir()}/stall_kill", 400))
    verdict = decide(code, tail, listing, attempt, last, base, _previous(jsonl, attempt),
                     stalled=stalled)
    # `ended`: the host's clock, as a resume records it; the wait before the next attempt
    # then costs nothing (core/runs/cost.py).
    ended = int(time.time())
    record = json.dumps({"attempt": attempt, "exit": code, "state": f"failed (exit {code})",
                         "reason": verdict.reason, "step": verdict.step, "retried": verdict.go,
                         "ended": ended})
    said = {"rt_go": "1" if verdict.go else "0", "rt_wait": f"{verdict.wait_s:g}",
            "rt_ck": verdict.checkpoint, "rt_why": _one_line(verdict.why),
            "rt_sep": separator(attempt + 1, verdict.checkpoint), "rt_rec": record,
            "rt_end": str(ended)}
    sys.stdout.write("".join(f"{k}={shlex.quote(v)}\n" for k, v in said.items()))
    return 0


def _one_line(text: str) -> str:
    # The probe prints it as one tab-separated field.
    return " ".join(text.split())[:300]
