"""The Slurm backend's launch, probe, stop ladder, preflight and option checks."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from rtrain_tui.core.backends.base import (
    Backend,
    BackendOptions,
    HostShell,
    Launched,
    LaunchSpec,
    Runs,
    StepCallback,
    finish_when_cancelled,
)
from rtrain_tui.core.backends.slurm import parse, scripts
from rtrain_tui.core.backends.slurm.options import MULTI_NODE_TRAINER, SlurmOptions, trainer_values
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh, unattended
from rtrain_tui.core.runs import probes
from rtrain_tui.core.safety import template as trainer_template
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.sanitize import safe_line

if TYPE_CHECKING:
    from rtrain_tui.core.runs.hostconfig import HostSettings


class SlurmBackend(Backend):
    name = "slurm"
    launch_file = "run.sbatch"
    launch_step = "submitting to Slurm"
    built_in_trainers = (MULTI_NODE_TRAINER,)
    # A failed attempt is tried again inside its job, on the GPUs it holds (one node).
    retries_on_host = True
    notifies_on_host = True

    # -- option checks ------------------------------------------------------------------
    def options(self, settings: HostSettings, given: BackendOptions | None) -> SlurmOptions:
        options = given if given is not None else settings.slurm
        if not isinstance(options, SlurmOptions):
            raise TypeError(f"Slurm options expected, not {options!r}")
        return options.validated()

    def adapt_request(self, trainer: str, gpu_ids: Sequence[int], allow_busy: bool,
                      options: BackendOptions | None) -> str:
        if gpu_ids or allow_busy:
            raise validate.ValidationError(
                "--gpu-ids and --allow-busy do not apply to a Slurm host: the scheduler hands "
                "out GPUs; use --gpus-per-node.")
        assert isinstance(options, SlurmOptions)
        if options.nodes > 1 and trainer == validate.DEFAULT_TRAINER:
            return MULTI_NODE_TRAINER
        return trainer

    def placement(self, gpus: int, options: BackendOptions | None) -> tuple[int, int]:
        # Every node of the job holds its own --gpus-per-node (the run's --gpus by default).
        assert isinstance(options, SlurmOptions)
        return (options.nodes, gpus if options.gpus_per_node is None else options.gpus_per_node)

    def check_retries(self, retries: int, on_stall: str = "warn",
                      options: BackendOptions | None = None) -> None:
        nodes = options.nodes if isinstance(options, SlurmOptions) else 1
        if on_stall != "warn" and nodes > 1:
            # The watchdog runs on the batch node: it sees the shared log, but ends only
            # the processes of that node.
            raise validate.ValidationError(
                f"--on-stall {on_stall} works in a job of one node, not {nodes}: leave out "
                "--on-stall (a stall is still said) and end a stalled job with `rtrain-tui stop`.")
        if retries and nodes > 1:
            # The loop runs in the batch shell on the first node; the other nodes' launchers
            # and a torchrun rendezvous across them are srun's, which it cannot end and
            # start again as one attempt.
            raise validate.ValidationError(
                f"--retries works in a job of one node, not {nodes}: leave out --retries (and "
                "config.toml's `retries`) and use `rtrain-tui resume HOST RUN` after a failure.")

    # -- preflight ----------------------------------------------------------------------
    def preflight_script(self, python: str, workdir: str) -> str:
        return scripts.preflight(python, workdir)

    def parse_preflight(self, host: str, output: str, *, python: str, gpus: int,
                        ship_bytes: int, options: BackendOptions | None,
                        local: bool) -> probes.PreflightReport:
        assert isinstance(options, SlurmOptions)
        if options.gpus_per_node is None:
            options = replace(options, gpus_per_node=gpus)
        return parse.parse_preflight(host, output, python, options)

    # -- launch ---------------------------------------------------------------------------
    def launch_text(self, spec: LaunchSpec) -> str:
        options = spec.options
        assert isinstance(options, SlurmOptions)
        gpn = spec.gpus if options.gpus_per_node is None else options.gpus_per_node
        values = trainer_values(options.nodes)
        command = trainer_template.render(spec.trainer, spec.python, spec.dataset, gpn, values,
                                          resume=spec.resume_from)
        retry = None
        if spec.retries > 0:
            retry = unattended.Retry(
                spec.retries, spec.retry_base_s, spec.attempt, trainer_template.python_word(spec.python),
                edit_config=spec.trainer in (validate.DEFAULT_TRAINER, *self.built_in_trainers),
                fresh_cmd=trainer_template.render(spec.trainer, spec.python, spec.dataset, gpn, values),
                resume_cmd=trainer_template.render(spec.trainer, spec.python, spec.dataset, gpn, values,
                                                   resume=unattended.RESUME_SLOT))
        # On a login node the scheduler hands out GPUs (as CUDA_VISIBLE_DEVICES).
        watch = unattended.Watch(spec.stall_after_s, spec.stall_check_s, spec.on_stall,
                                 spec.gpus_idle_s)
        notify = (remote_sh.Notify(trainer_template.python_word(spec.python), spec.notify_on)
                  if spec.notify_on else None)
        return scripts.batch_script(spec.run_id, spec.token, command, spec.env, options, spec.gpus,
                                    attempt=spec.attempt, retry=retry, watch=watch,
                                    notify=notify)

    def launch_files(self, spec: LaunchSpec) -> Mapping[str, bytes]:
        # The retry loop's decision runs in the job with the client's own rules.
        return {unattended.RETRY_PROGRAM: unattended.retry_program()} if spec.retries > 0 else {}

    def launch_script(self, run_dir: str, token: str) -> str:
        return scripts.submit(run_dir, token)

    def launched(self, host: str, run_id: str, answer: Mapping[str, str]) -> Launched:
        job = answer.get("job", "")
        if not job.replace("_", "").isdigit():
            # sbatch said yes: the job may well be queued, so nothing is undone.
            said = safe_line(answer.get("unknown", ""))[:200].strip()
            raise RemoteError(
                f"{host}: sbatch took {run_id} but printed no job id"
                + (f" (it printed: {said})" if said else "")
                + f"; the job may be queued: check with squeue on {host}.")
        return Launched(probes.QUEUED, job_id=job,
                        message=safe_line(answer.get("message", ""))[:300])

    # -- probe ----------------------------------------------------------------------------
    def probe_script(self, runs: Runs, need_end: Sequence[int] = ()) -> str:
        return scripts.run_states(runs, need_end)

    def parse_probe(self, output: str, count: int, host: str) -> list[probes.RunProbe]:
        return parse.parse_run_states(output, count, host)

    # -- stop -----------------------------------------------------------------------------
    async def stop_ladder(self, conn: HostShell, workdir: str, run_id: str, grace: float,
                          nonce: str, step: StepCallback) -> int | None:
        """TERM to every process of the job, grace, `scancel`, verify.

        A queued job is cancelled at once. Stopped only once Slurm reports the job ended
        (no process of it left: COMPLETING still has some).
        """
        facts = await finish_when_cancelled(_term_said(conn, workdir, run_id, nonce, step))
        if facts.get("result") == "not_running":
            return None
        code = 143
        # The job signalled: a resume may submit a new one for the run dir once this one
        # is gone, and the rest of the stop must neither wait for nor cancel that one.
        job = facts.get("job", "")
        if facts.get("queued") != "1":
            step(f"waiting up to {grace:g} s for them to exit")
            if not await _wait_job_gone(conn, workdir, run_id, grace, job):
                await finish_when_cancelled(_cancel_said(conn, workdir, run_id, nonce, step, job))
                code = 137
        if not await _wait_job_gone(conn, workdir, run_id, 60.0, job):
            raise RemoteError(f"{run_id} did not stop on {conn.alias}: Slurm still reports its job "
                              "active 60 s after scancel; check it with `squeue` on the login node.")
        return code

    def describe_stop(self, grace: float) -> str:
        return (f"Every process of its Slurm job gets SIGTERM; after {grace:g} s scancel "
                "ends what is left, and stop waits until Slurm reports the job gone "
                "(a queued job is cancelled at once). The trainer can save a checkpoint "
                "in between.")


async def _term_said(conn: HostShell, workdir: str, run_id: str, nonce: str,
                     step: StepCallback) -> dict[str, str]:
    """SIGTERM the job (or cancel it while queued) and say so once the host answered."""
    facts = await _signal(conn, workdir, run_id, nonce, full_cancel=False)
    if facts.get("result") == "not_running":
        return facts
    if facts.get("queued") == "1":
        step("the job was still queued: cancelled")
    else:
        step(f"SIGTERM sent to every process of job {facts.get('job') or '?'} (scancel --full)")
    return facts


async def _cancel_said(conn: HostShell, workdir: str, run_id: str, nonce: str,
                       step: StepCallback, job: str = "") -> None:
    await _signal(conn, workdir, run_id, nonce, full_cancel=True, job=job)
    step("scancel sent (Slurm kills what is left after its KillWait)")


async def _signal(conn: HostShell, workdir: str, run_id: str, nonce: str,
                  full_cancel: bool, job: str = "") -> dict[str, str]:
    out = await conn.run(scripts.stop_signal(workdir, run_id, nonce, full_cancel, job))
    facts = dict(probes.parse_key_values(out))
    if facts.get("result") not in ("signalled", "not_running"):
        raise RemoteError(f"{conn.alias}: could not cancel {run_id}'s job: "
                          f"{facts.get('why') or 'scancel failed'}"[:300])
    return facts


async def _wait_job_gone(conn: HostShell, workdir: str, run_id: str, seconds: float,
                         job: str = "") -> bool:
    import asyncio  # not at the top: see base.py

    deadline = time.monotonic() + seconds
    script = scripts.job_state(workdir, run_id, job)
    while True:
        state = dict(probes.parse_key_values(await conn.run(script))).get("state", "")
        if parse.job_gone(state):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(min(0.3, max(0.0, deadline - time.monotonic())))
