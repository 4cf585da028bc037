"""The run's own host tells its end or its stall, with every laptop closed.

Two halves, one file format. At start the client writes `notify.json` into the run
directory (`settings`; mode 0600 from its creation: it holds the webhook URLs, tokens and
all), with what only the client knows: the host's alias, the run id, when it started,
the price per hour, and each webhook-style URL as the POSTs it makes (webhooks.py).
When the trainer has exited for good (after the retries) the wrapper claims the
transition's marker, as every client does (host/claim_notify.sh: one mkdir, so the
message goes once, whoever is first), and runs this module from `notify.pyz` with the
run's own Python (`main`): it words the message as a client would (message.py, the
reason by logs/reasons.py from train.log's tail, step and loss by metrics.py), then makes
each POST with the host's curl (the URL handed over on curl's stdin, never on a command
line that `ps` shows), else with urllib, tried TRIES times with backoff, each bounded in
time. What failed is one line, masked, in the run's `notify.log` (never train.log); what
arrived too. Nothing it does touches the run's state or exit code.

Cost on the host: the price per hour (per GPU-hour already multiplied by the run's GPUs)
times the seconds its attempts ran (attempts.jsonl, by the one cost rule: runs/cost_rule.py),
to the cent. Elapsed: from the client's start to now, by the host's clock.

Stdlib and our pure modules only (the bundle is checked under `python -I`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import TextIO

from rtrain_tui.core.logs.reasons import why_it_ended
from rtrain_tui.core.metrics.metrics import parse_text
from rtrain_tui.core.notify import message, webhooks
from rtrain_tui.core.notify.send import BACKOFF_S, TRIES
from rtrain_tui.core.runs import attempt_layout, cost_rule
from rtrain_tui.core.runs.state_rule import HostFacts, run_state
from rtrain_tui.core.safety.mask import mask_text, mask_url
from rtrain_tui.core.safety.sanitize import safe_line

SETTINGS = "notify.json"
LOG = "notify.log"
PROGRAM = "notify.pyz"
MAIN = "rtrain_tui.core.notify.host_send"
# What notify.pyz holds: this module and what it imports (core/host.bundle).
MODULES = (MAIN, (
    MAIN, "rtrain_tui.core.notify.message", "rtrain_tui.core.notify.webhooks",
    "rtrain_tui.core.notify.send", "rtrain_tui.core.logs.reasons",
    "rtrain_tui.core.metrics.metrics", "rtrain_tui.core.metrics.metrics_jsonl",
    "rtrain_tui.core.runs.probes", "rtrain_tui.core.runs.cost_rule", "rtrain_tui.core.runs.state_rule",
    "rtrain_tui.core.runs.attempt_layout", "rtrain_tui.core.errors", "rtrain_tui.core.safety.mask",
    "rtrain_tui.core.safety.sanitize"))
TAIL_BYTES = 32 * 1024  # as much of train.log as a client's claim reads (claim_notify.sh)
TEST_TITLE = "rtrain-tui: test"
# All the sends of one message together, whatever the number of URLs: a hanging service
# costs up to 31.5 s a POST (3 tries of 10 s, backoff between), so 4 such URLs outran
# `notify test`'s 120 s command limit, and a Slurm job held its GPUs that long per URL
# after its trainer ended. What the limit cuts is said as such (LIMIT_SAID).
TEST_WITHIN_S = 90.0  # `notify test HOST`: inside the client's 120 s for the command
# (a Slurm job's end and stall: host/remote_sh.FOREGROUND_SEND_S, its WITHIN argument)
LIMIT_SAID = "cut by the {:g} s limit for all its sends"


def host_urls(urls: Sequence[str]) -> list[str]:
    """Those of `urls` a host can send itself (webhooks.posts_of), in order."""
    return [u for u in urls if webhooks.posts_of(u)]


def settings(host: str, run_id: str, urls: Sequence[str], started: float,
             rate: Decimal | None = None, currency: str = "$") -> bytes:
    """notify.json for a run: what the host needs to word and send its messages."""
    return json.dumps({
        "host": host, "run": run_id, "started": started,
        "rate": None if rate is None else str(rate), "currency": currency,
        "urls": [{"url": u, "posts": webhooks.to_json(webhooks.posts_of(u))} for u in host_urls(urls)],
    }, indent=1).encode()


@dataclass(frozen=True)
class _Spent:
    amount: Decimal
    currency: str

    def text(self) -> str:  # as runs/cost.py's `money` words it (it needs the index: not shipped)
        return f"{self.currency}{self.amount.quantize(Decimal('0.01'), ROUND_HALF_UP):,.2f}"


def _when(value: object) -> float | None:
    # (int, float), not `int | float`: the host's Python may be older than 3.10.
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0  # noqa: UP038
    return float(value) if ok else None  # type: ignore[arg-type]


def billed_us(started: float, attempts: Sequence[Mapping[str, object]], now: float) -> int:
    """Microseconds the run's attempts ran, its last to `now` (its end: the wrapper sends
    as it ends): the one cost rule's (runs/cost_rule.py), from attempts.jsonl."""
    found = cost_rule.spans(attempts, cost_rule.when_us(started))
    return cost_rule.billed_us(cost_rule.closed(found, cost_rule.when_us(now)))


def billed_seconds(started: float, attempts: Sequence[Mapping[str, object]], now: float) -> float:
    """`billed_us` in seconds."""
    return billed_us(started, attempts, now) / cost_rule.US


def _attempts() -> list[dict[str, object]]:
    found = []
    try:
        with open(attempt_layout.here_attempts_jsonl(), encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if isinstance(item, dict):
                    found.append(item)
    except OSError:
        pass
    return found


def _mtime(name: str, default: float) -> float:
    try:
        return float(int(os.stat(name).st_mtime))
    except OSError:
        return default


def _read(name: str, limit: int = TAIL_BYTES) -> str:
    try:
        with open(name, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def compose(config: dict[str, object], event: str, arg: int, now: float) -> message.Message | None:
    """The message for `event` (an end with exit code `arg`, or `stalled` for `arg` s), as
    a client would word it from what is in the run dir (the cwd)."""
    host, run_id = str(config.get("host", "?")), str(config.get("run", "?"))
    tail = _read("train.log")
    stalled_for = None
    if event == message.STALLED:
        state, stalled_for, reason = "running", arg, ""
    else:
        # The one state rule (state_rule.py), as the wrapper's shell copy chose the event
        # by: a stop of ours is `stopped` whatever the trainer exited with.
        stop = bool(_read("stop_requested").partition("\n")[0].strip())
        state, _ = run_state(HostFacts(exit_code=arg, stop_requested=stop,
                                       stopped=os.path.exists("stopped"), launched=True))
        gave_up = f"{attempt_layout.here_attempt_dir()}/retry_gave_up"  # this attempt's own
        reason = safe_line(_read(gave_up))[:300] if state.startswith("failed") else ""
        if not reason:
            reason = why_it_ended(state, arg, stop, tail.splitlines(), host)
    started = _when(config.get("started"))
    cost = None
    try:
        rate = Decimal(str(config["rate"])) if config.get("rate") is not None else None
    except (InvalidOperation, ValueError):
        rate = None
    if rate is not None and started is not None:
        # An end is billed to the `status` file's time, as the clients read it (whole
        # seconds); a stall to now.
        end = now if event == message.STALLED else _mtime("status", now)
        seconds = Decimal(billed_us(started, _attempts(), end)) / cost_rule.US
        cost = _Spent(rate * seconds / 3600, str(config.get("currency") or "$")[:5])
    summary = parse_text(tail).summary() if tail else None
    return message.build(host, run_id, state, reason=reason, stalled_for=stalled_for, summary=summary,
                         elapsed_s=now - started if started is not None else None, cost=cost)


def _load() -> dict[str, object]:
    try:
        with open(SETTINGS, encoding="utf-8") as f:
            return _load_from(f)
    except OSError:
        return {}


def _load_from(f: TextIO) -> dict[str, object]:
    try:
        found = json.load(f)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def deliver(config: dict[str, object], title: str, body: str, curl: str | None,
            tries: int = TRIES, backoff_s: float = BACKOFF_S,
            within: float | None = None) -> list[tuple[str, str]]:
    """Send to each URL of `config`: [(the URL masked, '' or why not)], in order; with
    `within`, every send together ends within that many seconds (a POST gets what is
    left, at most its own TIMEOUT_S; what the limit cut or left untried says so)."""
    urls = config.get("urls")
    results = []
    deadline = None if within is None else time.monotonic() + within
    cut = LIMIT_SAID.format(within or 0)

    def left() -> float:
        return webhooks.TIMEOUT_S if deadline is None else min(webhooks.TIMEOUT_S, deadline - time.monotonic())

    for item in urls if isinstance(urls, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        url, posts = item["url"], webhooks.from_json(item.get("posts"))
        secrets = [url, *(p.url for p in posts), *(p.user for p in posts if p.user)]
        why = "" if posts else "no POST for it"
        for post in posts:
            data = webhooks.body_of(post, title, body)
            for attempt in range(tries):
                if left() < 1:  # less than a POST can use: none is started
                    why = f"{why}; {cut}" if why else cut
                    break
                why = webhooks.send(post, data, curl, timeout_s=left())
                if not why:
                    break
                if attempt < tries - 1:
                    if left() < backoff_s * 2 ** attempt + 1:
                        why = f"{why}; {cut}"
                        break
                    time.sleep(backoff_s * 2 ** attempt)
            else:
                why = f"{why} ({tries} tries)"
            if why:
                break
        results.append((mask_url(url), mask_text(why, secrets)))
    return results


def _limit(word: str) -> float | None:
    try:
        return float(word) if 0 < float(word) < 86400 else None
    except ValueError:
        return None


def main(argv: Sequence[str]) -> int:
    """`notify.pyz EVENT ARG [WITHIN]` (the run's end, ARG its exit code; or `stalled`, ARG
    the log's age; WITHIN: seconds for all its sends) or `notify.pyz test HOST [-]`, in
    the run dir; 0 unless argv is wrong. Lines for notify.log on stdout; `test` prints
    `URL<TAB>arrived` or `URL<TAB>why` instead, within TEST_WITHIN_S, its settings read
    from stdin with `-` (then no file holds the tokens for an instant). `notify.pyz check`
    only imports it all: 0 on a Python that can send (notify_send.sh asks before claiming)."""
    if list(argv) == ["check"]:
        return 0
    curl = shutil.which("curl")
    how = "curl" if curl else "python"
    if argv[:1] == ["test"]:
        config = _load_from(sys.stdin) if argv[2:3] == ["-"] else _load()
        where = safe_line(argv[1] if len(argv) > 1 else str(config.get("host", "")))
        for url, why in deliver(config, TEST_TITLE, f"A test message from rtrain-tui notify test, sent by "
                                f"{where} itself ({how}).", curl, within=TEST_WITHIN_S):
            print(f"{url}\t{why or 'arrived'}")
        return 0
    within = _limit(argv[2]) if len(argv) == 3 else None
    if len(argv) not in (2, 3) or not argv[1].lstrip("-").isdigit() or (len(argv) == 3 and within is None):
        print("usage: notify.pyz EVENT ARG [WITHIN] | test HOST [-]", file=sys.stderr)
        return 2
    config = _load()
    now = time.time()
    composed = compose(config, argv[0], int(argv[1]), now)
    if composed is None:
        return 0
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
    for url, why in deliver(config, composed.title, composed.body, curl, within=within):
        said = f"not sent: {why}" if why else f"sent ({how})"
        print(f"{stamp} {composed.event} to {url}: {said}", flush=True)
    return 0
