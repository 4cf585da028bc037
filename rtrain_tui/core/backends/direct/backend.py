"""The direct backend's launch, probe, stop ladder and preflight (see the package doc)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from rtrain_tui.core.backends.base import (
    BackendOptions,
    GpuChoice,
    HostShell,
    Launched,
    LaunchSpec,
    Runs,
    StepCallback,
    finish_when_cancelled,
)
from rtrain_tui.core.backends.direct import scripts
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import unattended
from rtrain_tui.core.runs import probes
from rtrain_tui.core.safety import template as trainer_template
from rtrain_tui.core.safety import validate

# The commands that read the checkpoint from config.yaml's `resume_from_checkpoint`.
_BUILT_IN = (validate.DEFAULT_TRAINER,)


class DirectBackend(GpuChoice):
    name = "direct"
    launch_file = "run.sh"
    launch_step = "launching"
    retries_on_host = True
    notifies_on_host = True

    # -- preflight ----------------------------------------------------------------------
    def preflight_script(self, python: str, workdir: str) -> str:
        return scripts.preflight(python, workdir)

    def parse_preflight(self, host: str, output: str, *, python: str, gpus: int,
                        ship_bytes: int, options: BackendOptions | None,
                        local: bool) -> probes.PreflightReport:
        report = probes.parse_preflight(host, output, python, gpus, ship_bytes)
        if local and report.slurm_login:
            # The demo host runs its commands on this machine: the `sbatch` it sees is this
            # machine's, never a login node to hand its runs to. Not offered as one.
            report = replace(report, slurm_login=False,
                             checks=tuple(c for c in report.checks if c.name != "slurm"))
        return report

    # -- launch ---------------------------------------------------------------------------
    def launch_text(self, spec: LaunchSpec) -> str:
        command = trainer_template.render(spec.trainer, spec.python, spec.dataset, spec.gpus,
                                          resume=spec.resume_from)
        retry = None
        if spec.retries > 0:
            retry = scripts.Retry(
                spec.retries, spec.retry_base_s, spec.attempt, trainer_template.python_word(spec.python),
                edit_config=spec.trainer in _BUILT_IN,
                fresh_cmd=trainer_template.render(spec.trainer, spec.python, spec.dataset,
                                                  spec.gpus),
                resume_cmd=trainer_template.render(spec.trainer, spec.python, spec.dataset,
                                                   spec.gpus, resume=scripts.RESUME_SLOT))
        watch = scripts.Watch(spec.stall_after_s, spec.stall_check_s, spec.on_stall,
                              spec.gpus_idle_s)
        notify = (scripts.Notify(trainer_template.python_word(spec.python), spec.notify_on)
                  if spec.notify_on else None)
        return scripts.wrapper(command, dict(spec.env), append=spec.attempt > 1, retry=retry,
                               queue=spec.queue, attempt=spec.attempt, watch=watch, notify=notify)

    def launch_files(self, spec: LaunchSpec) -> Mapping[str, bytes]:
        # The retry loop's decision runs on the host with the client's own rules.
        return {unattended.RETRY_PROGRAM: unattended.retry_program()} if spec.retries > 0 else {}

    def launch_script(self, run_dir: str, token: str) -> str:
        return scripts.launch(run_dir, token)

    def launched(self, host: str, run_id: str, answer: Mapping[str, str]) -> Launched:
        if not answer.get("pid", "").isdigit():
            raise RemoteError(
                f"{host}: {run_id} was launched but wrote no pid within 5 s; "
                f"`rtrain-tui status {host} {run_id}` will tell what it is doing."
            )
        return Launched(probes.RUNNING, pid=int(answer["pid"]))

    # -- probe ----------------------------------------------------------------------------
    def probe_script(self, runs: Runs, need_end: Sequence[int] = ()) -> str:
        return scripts.run_states(runs, need_end)

    def probe_with_gpus(self, runs: Runs, need_end: Sequence[int] = ()) -> str:
        return scripts.run_states(runs, need_end, gpus=True)

    def sample_now_script(self, runs: Runs, workdir: str | None = None) -> str:
        held = scripts.held_gpus(workdir) if workdir is not None else ""
        return scripts.run_states(runs) + scripts.gpu_sample() + held

    def claim_script(self, workdir: str, run_id: str, ids: Sequence[int], share: bool = False) -> str:
        return scripts.claim_gpus(workdir, run_id, ids, share)

    def parse_probe(self, output: str, count: int, host: str) -> list[probes.RunProbe]:
        return probes.parse_run_states(output, count, host)

    # -- stop -----------------------------------------------------------------------------
    async def stop_ladder(self, conn: HostShell, workdir: str, run_id: str, grace: float,
                          nonce: str, step: StepCallback) -> int | None:
        """SIGTERM every process of the run, wait `grace`, SIGKILL, verify.

        "Every process" is decided on the host by the run's marker (see liveness.sh), so
        workers that left the group (torchrun's do) are stopped too, and a recycled pid
        is never signalled.
        """
        facts = await finish_when_cancelled(_signal_said(conn, workdir, run_id, nonce, "TERM", step))
        if facts.get("result") == "not_running":
            return None
        # The attempt signalled: a resume (another window, another laptop) may launch a
        # new one in the run dir once this one is gone, and the rest of the ladder must
        # neither wait for nor kill that one.
        attempt = facts.get("run", "")
        step(f"waiting up to {grace:g} s for them to exit")
        if await _wait_run_gone(conn, workdir, run_id, grace, attempt):
            return 143
        facts = await finish_when_cancelled(
            _signal_said(conn, workdir, run_id, nonce, "KILL", step, attempt))
        if facts.get("result") != "not_running":
            if not await _wait_run_gone(conn, workdir, run_id, 5.0, attempt):
                raise RemoteError(
                    f"{run_id} did not stop on {conn.alias}: processes of it are still alive "
                    "after SIGKILL (stuck in the kernel?); check them with `ps` on the host."
                )
        return 137

    def describe_stop(self, grace: float) -> str:
        # Found by the marker the wrapper put in their environment, not by process group:
        # torchrun's workers leave the group, and a recycled pid carries no marker.
        return (f"Every process of the run (found on the host by the marker it was started "
                f"with) gets SIGTERM; whatever is left after {grace:g} s gets SIGKILL, and stop "
                "checks that all are gone. The trainer can save a checkpoint in between.")


async def _signal_said(conn: HostShell, workdir: str, run_id: str, nonce: str, signal: str,
                       step: StepCallback, attempt: str = "") -> dict[str, str]:
    """Send `signal` to the run's processes and say so once the host answered."""
    facts = await _signal(conn, workdir, run_id, nonce, signal, attempt)
    if facts.get("result") != "not_running":
        step(f"SIG{signal} sent to the run's {facts.get('count', '?')} process(es)")
    return facts


async def _signal(conn: HostShell, workdir: str, run_id: str, nonce: str,
                  signal: str, attempt: str = "") -> dict[str, str]:
    script = scripts.stop_signal(workdir, run_id, nonce, signal, attempt)
    facts = dict(probes.parse_key_values(await conn.run(script)))
    result = facts.get("result")
    if result == "refused":
        raise RemoteError(
            f"refused to stop {run_id} on {conn.alias}: its pid file resolves to process group "
            f"{facts.get('group') or '?'}, this session's own; check {workdir}/{run_id}/train.pid."
        )
    if result not in ("signalled", "not_running"):
        raise RemoteError(f"{conn.alias}: could not signal {run_id}: {' '.join(facts.values())[:200]}")
    return facts


async def _wait_run_gone(conn: HostShell, workdir: str, run_id: str, seconds: float,
                         attempt: str = "") -> bool:
    import asyncio  # not at the top: see base.py

    deadline = time.monotonic() + seconds
    script = scripts.run_alive_count(workdir, run_id, attempt)
    while True:
        out = dict(probes.parse_key_values(await conn.run(script)))
        if out.get("alive") == "0":
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
