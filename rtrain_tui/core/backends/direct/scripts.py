"""The `sh` text the direct backend sends to a box: one pure function per operation.

The shell is in the `.sh` files beside this module (see core/host/__init__.py for how
they are filled). What both backends send (the run dir's creation, the workdir and
run-dir lines, the trainer's facts, marking a stop) stays in `core/host/remote_sh.py`;
this module uses it, as Slurm's scripts.py does. Every value put before the files'
text or into their slots is validated (`remote_sh.run_dir_word`, `check_token`) or
quoted (`host.assign`, `shlex.quote`). Answers are `key=value` lines (tab-separated
per run) read by `runs/probes.py` and `metrics/gpus.py`.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence

from rtrain_tui.core import host
from rtrain_tui.core.host import remote_sh, unattended
from rtrain_tui.core.host.remote_sh import Notify
from rtrain_tui.core.host.unattended import ON_STALL, RESUME_SLOT, Retry, Watch

__all__ = ["ON_STALL", "RESUME_SLOT", "Retry", "Watch"]  # the wrapper's settings, re-exported


def _file(name: str) -> str:
    return host.text(name, __package__)


# Shell helpers shared by the scripts that need to tell whether a run's processes live
# (how a run's processes are recognised: see the file), and the wrapper's own end: both
# shared with Slurm's batch script, which runs the same retry loop and watchdog.
_LIVENESS = unattended.LIVENESS + unattended.ATTEMPT  # and where an attempt's files are
_END_REST = unattended.END_REST

# One GPU sample, appended to the per-host probe (`run_states(..., gpus=True)`): its
# lines are described in the file.
_GPU_SAMPLE = _file("gpu_sample.sh")

# Where the box's GPU lock, records and queue live (one place per host and user, never
# per workdir: see the file), and how a run is recorded there. Every wrapper has it.
_GPU_BOX = _file("gpu_box.sh")

# The host's side of GPU choice: the rule for "free", the GPUs our live runs hold, the
# lock GPUs are given under (see the file).
_GPU_RULE = _GPU_BOX + _file("gpu_rule.sh")

# A queued run's wait for its GPUs, in its wrapper (see the file; the wrapper has
# gpu_box.sh already); `gs_sample` is one GPU sample (gpu_sample.sh) as a function.
_QUEUE = (_file("gpu_rule.sh") + "gs_sample() {\n" + _GPU_SAMPLE + "}\n" + _file("queue.sh"))

# The refresh probe's GPU part: the last background sample, and the next one started.
_GPU_SAMPLE_ASYNC = host.render("gpu_sample_async.sh", __package__, sample=_GPU_SAMPLE)


def preflight(python: str, workdir: str) -> str:
    """Print key=value facts about the host: python, trainer, GPUs, disk, setsid."""
    return f"{remote_sh.workdir_assign(workdir)}\n" + host.render(
        "preflight.sh", __package__, python_facts=remote_sh.python_facts(python),
        disk_free=remote_sh.DISK_FREE)


def wrapper(trainer_cmd: str, env: dict[str, str], append: bool = False,
            retry: Retry | None = None,
            queue: tuple[int, Sequence[int]] | None = None, attempt: int = 1,
            watch: Watch | None = None, notify: Notify | None = None) -> str:
    """The `run.sh` that runs detached in the run dir.

    It records its own pid and identity, runs the trainer with stdin from /dev/null and
    its output in train.log, ends whatever is left of the run, and writes the exit code
    to `status`. The trap keeps the wrapper alive on SIGTERM just long enough to record
    the trainer's code (a handler, unlike an ignore, is not inherited by the trainer).
    With `queue` (COUNT, IDS: `start --queue`) it first waits on the host for COUNT free
    GPUs, or for the GPUs IDS, in the host's queue (queue.sh), and records in attempts.jsonl
    when attempt `attempt` got them: its cost counts from then (core/runs/cost.py), not
    from its start. With `append` (a resumed
    run's later attempt) the log goes on after the attempts before it, instead of
    starting anew. With `retry`, a failed attempt is tried again on the host (retry.sh)
    before the code is written. With `watch`, a watchdog beside each attempt notices a
    stall (watch.sh). With `notify`, the host itself tells the end, once the code is
    written, and the watchdog a stall (core/host/notify_send.sh).
    """
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    wait = ""
    if queue is not None:
        count, ids = int(queue[0]), ",".join(str(int(i)) for i in queue[1])
        wait = (_QUEUE + f"wait_for_gpus {count} {shlex.quote(ids)}; rt_q=$?\n"
                "if [ $rt_q = 1 ]; then echo 143 > status.tmp && mv status.tmp status; exit 143; fi\n"
                # It cannot wait (a read-only workdir): it fails, and `gave_up` says why.
                "if [ $rt_q != 0 ]; then\n"
                "  printf '%s\\n' \"$wq_why\" > \"$rt_ad/gave_up.tmp\" && mv \"$rt_ad/gave_up.tmp\" \"$rt_ad/gave_up\"\n"
                "  printf '%s\\n' \"$wq_why\" >> train.log\n"
                "  echo 1 > status.tmp && mv status.tmp status; exit 1\nfi\n"
                "rt_at=$(date +%s)\n"
                f"printf '{{\"attempt\": {int(attempt)}, \"launched\": %s}}\\n' \"$rt_at\""
                " >> \"$rt_aj\"\n"
                # The same time, one line the refresh probe reads without parsing JSON:
                # the index keeps it, so `runs` and `costs` leave the wait out too.
                f"echo \"{int(attempt)} $rt_at\" > running_since.tmp && mv running_since.tmp running_since\n")
    return host.render("wrapper.sh", __package__, liveness=_LIVENESS, end_rest=_END_REST,
                       gpu_box=_GPU_BOX,
                       unbuffered=remote_sh.UNBUFFERED, exports=exports, queue=wait,
                       watch=unattended.watch_start(watch), watched=unattended.watched(watch),
                       notify=_notify(notify), notify_end='rt_notify_end "$rc"\n' if notify else "",
                       trainer=_logged(trainer_cmd, ">>" if append else ">"),
                       retry=_retry(retry, watch) if retry is not None else "")


def _notify(notify: Notify | None) -> str:
    return remote_sh.notify_hook(notify.python_word, notify.events) if notify is not None else ""


def _logged(cmd: str, how: str) -> str:
    # Braces: every command of a compound template (`cd x && python ...`) logs to
    # train.log, not only the last one; the newline ends a template that ends in a comment.
    return f"{{ {cmd}\n}} {how} train.log 2>&1 < /dev/null\n"


def _retry(retry: Retry, watch: Watch | None = None) -> str:
    return unattended.retry_loop(retry, watch, lambda cmd: _logged(cmd, ">>"))


def launch(run_dir: str, token: str) -> str:
    """Start run.sh detached in its own session and wait until it has written train.pid.

    Idempotent: `launch.lock` is made with an atomic mkdir, and only the script that
    made it starts the wrapper, so sent again after a dropped connection it starts
    nothing and reports the pid of the one launch. `train.token` must hold our token:
    nobody else's run directory is ever launched.
    """
    return host.assign(rd=run_dir, tok=remote_sh.check_token(token)) + _file("launch.sh")


def run_states(runs: Sequence[tuple[str, str]], need_end: Collection[int] = (),
               gpus: bool = False) -> str:
    """Print one tab-separated line per (workdir, run id): its index, then key=value facts.

    This is the one probe per host per refresh: every run on the host in one script.
    A run whose wrapper lives costs no fork; the scan for marked processes runs only
    when a wrapper is gone without an exit code, once for all runs. For the runs listed
    in `need_end` (by position), an ended run also reports `ended=EPOCH` (a line of its
    own, after the others): when its `status` was written (else its log's last write),
    so its elapsed time is the host's and not when we happened to look; one `stat` for
    all of them (host/mtimes.sh). With `gpus`, the same script also reports the GPUs
    (the last background sample, and starts the next; see gpu_sample_async.sh): still
    one round trip.
    """
    lines = [_LIVENESS + remote_sh.MTIMES + "own_groups\n" + _file("probe.sh")]
    ends = set(need_end)  # a list of 5,000 would make this loop quadratic
    for i, (workdir, run_id) in enumerate(runs):
        lines.append(f"probe {i} {remote_sh.run_dir_word(workdir, run_id)} "
                     f"{1 if i in ends else 0}\n")
    if need_end:
        lines.append("mt_flush\n")
    if gpus:
        lines.append(_GPU_SAMPLE_ASYNC)
    return "".join(lines)


def held_gpus(workdir: str) -> str:
    """`gpu_held=INDEX,RUN` for each GPU a live run of ours on the host holds, whatever
    its workdir: by the box's records (gpu_box.sh) and, for runs older versions started,
    the `gpus` file in each run dir of `workdir` and of the workdirs the box gave GPUs in
    (queued runs given theirs on the host included). Needs liveness.sh before it
    (run_states has it)."""
    return (_GPU_RULE + remote_sh.workdir_assign(workdir) + "\n"
            + 'own_pgrp=${own_pgrp:-none} sh_pgrp=${sh_pgrp:-none}\nheld_gpus "$wd"\n')


def claim_gpus(workdir: str, run_id: str, ids: Sequence[int], share: bool = False) -> str:
    """Record `ids` as the run's GPUs (its `gpus` file, and the box's record of it),
    under the box's GPU lock, unless a live run of ours (of any workdir on the host)
    holds one of them by now: `claimed=1`, else `held=I,RUN`.

    The client chose them from a sample taken just before; the lock and this check make
    the choice and a queued run's (queue.sh) one after the other, never both one GPU.
    With `share` (--allow-busy) the GPUs are recorded whoever holds them: the client may
    have chosen a GPU our other run has, on purpose.
    """
    want = ",".join(str(int(i)) for i in ids)
    return (_LIVENESS + _GPU_RULE + remote_sh.workdir_assign(workdir) + "\n"
            + remote_sh.run_dir_assign(workdir, run_id)
            + host.assign(want=want, share=int(share))
            + _file("claim_gpus.sh"))


def gpu_sample() -> str:
    """One sample of every GPU on the host and who holds it, now (see gpu_sample.sh)."""
    return _GPU_SAMPLE


def stop_signal(workdir: str, run_id: str, nonce: str, signal: str = "TERM",
                attempt_token: str = "") -> str:
    """Send `signal` to every member of the run, unless its pid file names our own group.

    The first call records `stop_requested` (holding this stop's nonce); from then on the
    run reads `stopped` once the stop is verified. Idempotent: sent again after a lost
    answer, it signals what is left, and if the first sending already ended the run it
    still answers `signalled` (its own nonce is on record), never "not running".
    It says which attempt it found (`run=` its token); given that as `attempt_token`, a
    later sending signals only what is left of that attempt, never a newer one a resume
    launched meanwhile.
    """
    if signal not in ("TERM", "KILL"):
        raise ValueError(signal)
    return (_LIVENESS + remote_sh.run_dir_assign(workdir, run_id)
            + host.assign(tok=remote_sh.check_token(nonce), sig=signal,
                          at=_attempt_word(attempt_token)) + _file("stop_signal.sh"))


def run_alive_count(workdir: str, run_id: str, attempt_token: str = "") -> str:
    """Print how many live (non-zombie) members the run has (of the attempt whose token
    is `attempt_token`, when given: see `stop_signal`)."""
    return (_LIVENESS + remote_sh.run_dir_assign(workdir, run_id)
            + host.assign(at=_attempt_word(attempt_token)) + _file("run_alive_count.sh"))


def _attempt_word(token: str) -> str:
    """An attempt's token as a stop read it from the host ('' when it is none of ours)."""
    try:
        return remote_sh.check_token(token) if token else ""
    except ValueError:
        return ""
