"""Stop: the stop ladder of the run's backend (SIGTERM every process of the run, wait a
grace period, force what is left, verify), then the stop recorded on the host and in
the index."""

from __future__ import annotations

import asyncio
import secrets

from rtrain_tui.core import backends
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.launch import StepCallback
from rtrain_tui.core.probing import Prober
from rtrain_tui.core.runs import probes
from rtrain_tui.core.safety import validate


async def stop(
    ctx: Prober, host: str, workdir: str, run_id: str, grace: float = 10.0,
    on_step: StepCallback | None = None,
) -> str:
    """The stop ladder of the run's backend: SIGTERM every process of the run, wait
    `grace`, force what is left, verify; then the stop is recorded on the host.

    Returns the outcome line; raises RemoteError when the run did not or may not stop.
    """
    validate.check_run_id(run_id)
    validate.check_workdir(host, workdir)
    validate.check_grace(grace)
    step = on_step or (lambda _msg: None)
    conn = ctx.host(host)
    kind = backends.get((await ctx.run_backends(host, [(workdir, run_id)]))[0])
    code = await kind.stop_ladder(conn, workdir, run_id, grace, secrets.token_hex(8), step)
    if code is None:
        return f"{run_id} was not running on {host}"
    await conn.run(remote_sh.mark_stopped(workdir, run_id, code))
    await asyncio.to_thread(ctx.remember_state, host, workdir, run_id, probes.STOPPED)
    return f"stopped {run_id} on {host}"
