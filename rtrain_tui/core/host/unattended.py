"""What every backend's run wrapper shares to look after a run by itself on the host:
the retry loop (`start --retries N`), the stall watchdog (`--stall-after`, `--on-stall`),
and the end of what is left of an attempt. A box's `run.sh` and a Slurm job's
`run.sbatch` both run them (one loop and one watchdog, not a copy per backend); what
differs is only how one attempt of the trainer is run, which each backend hands in.

The shell is in `retry.sh`, `watch.sh`, `end_rest.sh` and `liveness.sh` beside this
module (how a run's processes are recognised: see liveness.sh). The retry decision
itself is Python (core/logs/retry_rule.py) shipped as `retry.pyz` (`retry_program`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rtrain_tui.core import host
from rtrain_tui.core.safety.validate import ON_STALL  # what --on-stall may be: one list

# Shell helpers for the scripts that need to tell whether a run's processes live.
LIVENESS = host.text("liveness.sh")

# Where an attempt's own files are (attempt.sh): the wrapper, its retry loop and watchdog
# write there, the probes read there.
ATTEMPT = host.text("attempt.sh")

# The wrapper's own end: ends what is left of the run before its code is recorded.
END_REST = host.text("end_rest.sh")

# The host-side retry decision (core/logs/retry_rule.py) and what it imports, shipped as
# one zip the trainer's Python runs (see core/host.bundle). Named, not imported: the
# rule sits above this layer.
RETRY_PROGRAM = "retry.pyz"
RETRY_MODULES = ("rtrain_tui.core.logs.retry_rule", (
    "rtrain_tui.core.logs.retry_rule", "rtrain_tui.core.logs.reasons",
    "rtrain_tui.core.runs.attempt_layout",
    "rtrain_tui.core.metrics.metrics", "rtrain_tui.core.metrics.metrics_jsonl",
    "rtrain_tui.core.safety.sanitize", "rtrain_tui.core.runs.checkpoints"))


def retry_program() -> bytes:
    """The bytes of `retry.pyz`, written into the run dir of a run with retries."""
    return host.bundle(*RETRY_MODULES)


@dataclass(frozen=True)
class Watch:
    """The stall watchdog's settings: a log older than `after_s` seconds is a stall,
    checked every `every_s` seconds; `on_stall` is one of ON_STALL; GPUs idle for
    `gpus_idle_s` seconds are said."""

    after_s: int
    every_s: float = 60.0
    on_stall: str = "warn"
    gpus_idle_s: float = 600.0  # GPUs under 5% busy this long: a warning


def watched(watch: Watch | None) -> str:
    """What the wrapper runs once an attempt is over (the watchdog's note to the log)."""
    return "rt_noted\n" if watch is not None and watch.after_s > 0 else ""


def watch_start(watch: Watch | None) -> str:
    """The watchdog's functions and its start beside the first attempt ('' when none)."""
    if watch is None or watch.after_s <= 0:
        return ""
    if watch.on_stall not in ON_STALL:
        raise ValueError(watch.on_stall)
    return (host.assign(rt_sa=int(watch.after_s), rt_wi=f"{watch.every_s:g}", rt_on=watch.on_stall,
                        rt_gi=int(watch.gpus_idle_s))
            + host.text("watch.sh") + "rt_watch\n")


@dataclass(frozen=True)
class Retry:
    """What the wrapper's retry loop needs: how many retries, the attempt the wrapper
    starts with, the trainer's python (one shell word), whether config.yaml carries the
    checkpoint (the built-in trainer's), and the command that resumes: its
    `RESUME_SLOT` stands where the checkpoint's path goes."""

    retries: int
    base_s: float
    first_attempt: int
    python_word: str
    edit_config: bool
    fresh_cmd: str
    resume_cmd: str


# What a resumed command has where the checkpoint's path goes: the wrapper's variable.
RESUME_SLOT = "RTRAIN_CHECKPOINT_SLOT"


def retry_loop(retry: Retry, watch: Watch | None, run_one: Callable[[str], str],
               attempt_var: str = "") -> str:
    """The retry loop (retry.sh) after the first attempt, '' with no retries.

    `run_one(cmd)` is the backend's text that runs one attempt of the trainer command
    `cmd`, its log appended to train.log, leaving the trainer's exit code as `$?`. The
    wrapper around it must define `end_rest` (end_rest.sh) and keep `$rc`, `$rt_dir` and
    `$rt_signalled` (set by its trap) as retry.sh says. With `attempt_var`, the wrapper's
    variable of that name holds the attempt it is on (a Slurm job requeued mid-attempt
    goes on as that attempt), not `retry.first_attempt`.
    """
    if retry.retries <= 0:
        return ""
    if attempt_var and not attempt_var.replace("_", "").isalpha():
        raise ValueError(attempt_var)
    # Counted per run: a resumed attempt (after a reboot, or by hand) has what is left.
    head = (f"rt_a=${attempt_var}\n" if attempt_var else host.assign(rt_a=retry.first_attempt)) \
        + host.assign(rt_last=1 + retry.retries, rt_cfg=int(retry.edit_config),
                      rt_base=f"{retry.base_s:g}")
    return (head + f"rt_py={retry.python_word}\n"
            + host.render("retry.sh", checkpoints=host.text("checkpoints.sh"),
                          fresh=run_one(retry.fresh_cmd),
                          rewatch="rt_watch\n" if watched(watch) else "", watched=watched(watch),
                          resumed=run_one(retry.resume_cmd.replace(RESUME_SLOT, '"$rt_ck"'))))
