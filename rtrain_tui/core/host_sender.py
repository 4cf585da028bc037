"""`notify test HOST`'s second half: the test message sent by the host itself, by the path
a run's end takes (notify.pyz, the host's own sender; launch.notify_from_host ships it
into a run dir, this into a scratch dir)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from rtrain_tui.core import host as host_files
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.launch import write_remote_text
from rtrain_tui.core.notify import host_send
from rtrain_tui.core.probing import Prober
from rtrain_tui.core.runs import probes
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.mask import mask_url
from rtrain_tui.core.safety.sanitize import safe_line


async def notify_test_from_host(ctx: Prober, host: str, urls: Sequence[str],
                                workdir: str = validate.DEFAULT_WORKDIR,
                                python: str = validate.DEFAULT_PYTHON) -> list[tuple[str, str]]:
    """`notify test HOST`'s second half: the test message sent by `host` itself, by the
    path a run's end takes (notify.pyz in a scratch dir under the workdir, removed after;
    its settings on its stdin). [(each URL the host can send, masked; '' or why not)]."""
    sendable = host_send.host_urls(urls)
    if not sendable:
        return []
    validate.check_workdir(host, workdir)
    conn = ctx.host(host)
    made = dict(probes.parse_key_values(await conn.run(remote_sh.notify_test_dir(workdir))))
    scratch = made.get("dir", "")
    if not scratch.startswith("/"):
        raise RemoteError(f"{host}: cannot send from it: {made.get('error') or 'no scratch dir made'}.")
    sftp = await conn.sftp()
    await write_remote_text(sftp, f"{scratch}/{host_send.PROGRAM}", host_files.bundle(*host_send.MODULES))
    # The settings (tokens and all) reach notify.pyz on its stdin, never a file: a file
    # was left on the host by a command killed or timed out before it removed it. On a
    # channel of its own, as the long-lived shell's scripts are `sh -c` arguments (`ps`).
    import asyncssh  # not at the top: see cli.py's `runs`

    ssh = await conn.connect()
    try:
        done = await asyncio.wait_for(ssh.run(
            remote_sh.notify_test_send(scratch, python, host),
            input=host_send.settings(host, "test", sendable, time.time()).decode()),
            host_send.TEST_WITHIN_S + 30)
    except (OSError, TimeoutError, asyncssh.Error) as exc:
        raise RemoteError(f"{host}: no answer from its sender ({str(exc) or 'timed out'}).") from exc
    out = str(done.stdout or "")
    said = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    results = []
    for url in map(mask_url, sendable):
        why = safe_line(said.get(url, "")) or "no answer from the host's sender"  # host text
        results.append((url, "" if why == "arrived" else why[:300]))
    return results
