"""Where a run's attempts keep their files in its run directory: the one Python place that
knows it (core/host/attempt.sh is the shell's, and says the same; docs/on-the-host.md).

A run dir is the trainer's working directory: it writes its outputs there (lora_model,
checkpoints, outputs, and whatever else it likes, an `attempts.jsonl` of its own
included). So rtrain-tui's own bookkeeping lives apart, under `.rtrain/`:
- `.rtrain/attempts.jsonl` and `.rtrain/launch.json` (the run's records);
- `.rtrain/attempt`: the number of the run's current attempt;
- `.rtrain/attempts/N/`: attempt N's own files from its start (the retry loop's wait and
  give-up, the stall watchdog's files, a queue's give-up; see attempt.sh), as dstack
  gives each retry a submission of its own: nothing of attempt N can explain attempt N+1.

Run dirs made before this layout (no `.rtrain/`) keep everything at their top level and
read as they always did: their attempt count is one more than their `attempts/N/`.

Stdlib only: the host's Python runs it inside retry.pyz and notify.pyz (cwd: the run dir).
"""

from __future__ import annotations

import os

BOOK = ".rtrain"  # rtrain-tui's bookkeeping, apart from the trainer's outputs
ATTEMPTS_JSONL = "attempts.jsonl"
LAUNCH_JSON = "launch.json"
CURRENT = f"{BOOK}/attempt"  # the current attempt's number, one line
ATTEMPT_DIRS = f"{BOOK}/attempts"
LEGACY_ATTEMPT_DIRS = "attempts"  # an older run dir's ended attempts

# The most attempts a run can have: a start's --retries (20 at most) plus resumes by
# hand. A number the host says above it (a garbled or hostile attempts.jsonl line) is no
# attempt: nothing is built for it (R09: attempt 2,000,000 made a list that long).
MAX_ATTEMPT = 1000


def attempt_number(value: object) -> int | None:
    """`value` as an attempt number (host text or JSON), or None when it is none:
    an int (not a bool) from 1 to MAX_ATTEMPT, or its decimal digits."""
    if isinstance(value, str) and value.isdigit() and len(value) <= len(str(MAX_ATTEMPT)):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ATTEMPT:
        return value
    return None


def attempts_jsonl(book: bool = True) -> str:
    """attempts.jsonl's path in a run dir (`book`: the run dir has `.rtrain/`)."""
    return f"{BOOK}/{ATTEMPTS_JSONL}" if book else ATTEMPTS_JSONL


def launch_json(book: bool = True) -> str:
    """launch.json's path in a run dir (`book`: the run dir has `.rtrain/`)."""
    return f"{BOOK}/{LAUNCH_JSON}" if book else LAUNCH_JSON


def attempt_dir(n: int) -> str:
    """Attempt `n`'s own directory in a run dir of this layout."""
    return f"{ATTEMPT_DIRS}/{n}"


def here_book() -> bool:
    """Whether the run dir we run in (the host's Python, cwd) has this layout."""
    return os.path.isdir(BOOK)


def here_attempts_jsonl() -> str:
    """attempts.jsonl of the run dir we run in."""
    return attempts_jsonl(here_book())


def here_attempt_dir() -> str:
    """The current attempt's own directory in the run dir we run in ('.' in an older one)."""
    if not here_book():
        return "."
    try:
        with open(CURRENT, encoding="ascii", errors="replace") as f:
            n = attempt_number(f.readline().strip())
    except OSError:
        n = None
    return attempt_dir(n or 1)


def shell_read_attempts_jsonl(limit: int = 262144) -> str:
    """Shell text (after `rd=...`) that prints the run's attempts.jsonl, either layout."""
    return (f'if [ -d "$rd/{BOOK}" ]; then head -c {int(limit)} "$rd/{attempts_jsonl()}" 2>/dev/null; '
            f'else head -c {int(limit)} "$rd/{ATTEMPTS_JSONL}" 2>/dev/null; fi; exit 0\n')
