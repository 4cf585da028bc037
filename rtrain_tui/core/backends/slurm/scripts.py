"""The `sh` text the Slurm backend sends to a login node: one pure function per operation.

The shell is in the `.sh` files beside this module (see core/host/__init__.py for how
they are filled); every value put before them or into their slots is validated
(options.py, `validate`) or quoted (`host.assign`, `shlex.quote`); the workdir follows
`remote_sh.run_dir_word`. Answers are `key=value` lines (tab-separated
per run) read by parse.py.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping, Sequence

from rtrain_tui.core import host
from rtrain_tui.core.backends.slurm.options import MASTER_PORT, SlurmOptions
from rtrain_tui.core.host import remote_sh, unattended


def _file(name: str) -> str:
    return host.text(name, __package__)


def batch_script(run_id: str, token: str, trainer_cmd: str, env: Mapping[str, str],
                 options: SlurmOptions, gpus: int, attempt: int = 1,
                 retry: unattended.Retry | None = None,
                 watch: unattended.Watch | None = None,
                 notify: remote_sh.Notify | None = None) -> str:
    """The `run.sbatch` submitted for one run (run.sbatch.sh).

    The batch shell runs the trainer in the background and forwards TERM/INT/HUP to it
    (a trap, not `exec`, so the shell survives to write the trainer's exit code into
    `status`, as the direct wrapper does). Several nodes: `srun` starts one launcher per
    node; the first host of the allocation is the rendezvous point. When the job starts
    it records in attempts.jsonl that attempt `attempt` launched (its queue wait costs
    nothing). With `retry` (one node), a failed attempt is tried again inside the job by
    the retry loop a box's wrapper runs (core/host/retry.sh): same job id, same GPUs.
    With `watch`, the box's stall watchdog (core/host/watch.sh) runs beside each attempt
    on the batch node; it acts on a stall (`stop`, `restart`) on one node only.
    With `notify`, the job tells its end itself (core/host/notify_send.sh), in the
    foreground (the scheduler ends what a job leaves behind), unless a signal ended it:
    a time limit, a preemption or a cancel is better told by a client, in the
    scheduler's own word (TIMEOUT…).
    """
    tok = remote_sh.check_token(token)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    if options.nodes > 1 and ((retry is not None and retry.retries > 0)
                              or (watch is not None and watch.on_stall != "warn")):
        raise ValueError("a retry loop or a stall's stop runs in a job of one node only")  # check_retries says why
    retry_text = unattended.retry_loop(retry, watch, lambda cmd: _one_attempt(cmd, options),
                                       attempt_var="rt_attempt") if retry is not None else ""
    if retry_text:
        # Where the loop goes back to after an attempt (the trainer runs in a subshell
        # here, so a template's `cd` never moves this shell: kept for retry.sh's sake).
        retry_text = "rt_dir=$PWD\n" + retry_text
    watching = unattended.watch_start(watch)
    looks_after = bool(retry_text or watching)
    return host.render(
        "run.sbatch.sh", __package__,
        sbatch="".join(f"{line}\n" for line in options.sbatch_lines(run_id, gpus)),
        token=host.assign(RTRAIN_RUN=tok, rt_attempt=int(attempt)), attempt=remote_sh.ATTEMPT,
        unbuffered=remote_sh.UNBUFFERED, exports=exports,
        unattended=unattended.LIVENESS + unattended.END_REST if looks_after else "",
        watch=watching, launch=_launch(trainer_cmd, options), watched=unattended.watched(watch),
        retry=retry_text, end_rest=("end_rest\n" + ("rt_reap\n" if watching else "")) if looks_after else "",
        notify=remote_sh.notify_hook(notify.python_word, notify.events, foreground=True) if notify else "",
        notify_end='[ -n "$rt_signalled" ] || rt_notify_end "$rc"\n' if notify else "")


def _launch(trainer_cmd: str, options: SlurmOptions) -> str:
    """The text that starts the trainer in the background (on every node of the job)."""
    if options.nodes > 1:
        return host.assign(rt_port=MASTER_PORT) + host.render(
            "launch_nodes.sh", __package__, trainer=host.assign(rt_trainer=trainer_cmd))
    return host.render("launch_one.sh", __package__, trainer=f"{trainer_cmd}\n")


def _one_attempt(trainer_cmd: str, options: SlurmOptions) -> str:
    # One attempt of the retry loop: started as the first one was, its exit code as `$?`.
    return _launch(trainer_cmd, options) + "rt_trained\n"


def submit(run_dir: str, token: str) -> str:
    """Submit run.sbatch once; print `job=ID` (and `message=...`) or `error=...`.

    Idempotent, like the box's `launch`: `launch.lock` is made with an atomic mkdir and
    only the script that made it runs sbatch, so a re-sent script (after a dropped link)
    submits nothing and reports the one job. A failed submit removes the lock (no job
    exists) so the start can be undone; its message is kept in `submit_error`.

    The job id is the last line sbatch prints on stdout that is one (`ID` or
    `ID;CLUSTER`): a site's wrapper around sbatch may print a banner first. Clusters
    print notices on stderr (a `job_submit.lua` calling `slurm.log_user`: "sbatch: 12
    GPU-hours left"), which are kept in `submit_message` for the user and never mixed
    into the id. An sbatch that exits 0 with no such line may well have queued the job:
    that is `unknown=` (its stdout, kept in `submit_unknown`), and the lock stays.

    While sbatch runs, `submitting` names it (core/host/submitting.sh): the run reads
    `starting`, and a resume's claim refuses to supersede the attempt.
    """
    return (host.assign(rd=run_dir, tok=remote_sh.check_token(token)) + host.text("submitting.sh")
            + _file("submit.sh"))


def run_states(runs: Sequence[tuple[str, str]], need_end: Collection[int] = ()) -> str:
    """One script for all the Slurm runs of a host: their files, then one Slurm query.

    Prints per run `I\\texists=..\\tjob=..\\tcode=..\\tattempt=..\\tstop=..\\tstopped=..\\tlaunched=..`
    `..\\tunknown=..\\tsubmitting=..\\tretry=..` (`attempt`: the job's restart count when
    `status` was written; `submitting`: the sbatch of its job has not answered yet;
    `retry`: why its retry loop waits, or why it gave up); for the runs in
    `need_end` (by position) that have a job or a code, `I\\tended=EPOCH` (when `status`,
    else the log, was last written; one `stat` for all); then per job
    `J\\tID|STATE|REASON|RAW_EXIT|RESTARTS` lines from squeue (raw wait status),
    `C\\t` lines from `scontrol -o show job` for jobs squeue did not list, and `A\\t` lines
    from sacct (`ID|STATE|EXIT:SIG`) when accounting is enabled.
    """
    ends = set(need_end)  # a list of 5,000 would make this loop quadratic
    runs_lines = "".join(f"probe {i} {remote_sh.run_dir_word(workdir, run_id)} "
                         f"{1 if i in ends else 0}\n" for i, (workdir, run_id) in enumerate(runs))
    return (remote_sh.MTIMES + remote_sh.ATTEMPT + host.text("submitting.sh")
            + host.render("probe.sh", __package__, runs=runs_lines))


# -- stop -------------------------------------------------------------------------------------
def stop_signal(workdir: str, run_id: str, nonce: str, full_cancel: bool, job: str = "") -> str:
    """Ask Slurm to end the run's job: TERM to every process (`--full`), or `scancel` itself.

    Prints `result=not_running` (no job, or it already ended, and not by our stop),
    `result=signalled` with `queued=1` when the job had not started (cancelled at once),
    or `result=error`. The stop is recorded in `stop_requested` first, so a run whose
    job ends between the two reads `stopped`. Idempotent under a re-send: our own nonce
    on record answers `signalled`. It says which job it found (`job=`); given that as
    `job`, a later sending acts on that job, never on one a resume submitted meanwhile.
    """
    return (remote_sh.run_dir_assign(workdir, run_id)
            + host.assign(tok=remote_sh.check_token(nonce), full_cancel=int(bool(full_cancel)),
                          job_at=_job_word(job))
            + _file("stop_signal.sh"))


def job_state(workdir: str, run_id: str, job: str = "") -> str:
    """Print `state=STATE` of the run's job, or of `job` when given (a job a stop found):
    '' when Slurm no longer knows it."""
    return (remote_sh.run_dir_assign(workdir, run_id) + host.assign(job_at=_job_word(job))
            + _file("job_state.sh"))


def _job_word(job: str) -> str:
    """A Slurm job id as a stop read it from the host ('' when it is not one)."""
    return job if job and len(job) <= 40 and all(c in "0123456789_" for c in job) else ""


# -- preflight --------------------------------------------------------------------------------
def preflight(python: str, workdir: str) -> str:
    """Facts about a login node: python/trainer, disk, and Slurm's partitions and our jobs."""
    return (f"{remote_sh.workdir_assign(workdir)}\n{remote_sh.python_facts(python)}"
            f"{remote_sh.DISK_FREE}" + _file("preflight.sh"))
