"""A workdir resolved here, without the host: only where the host's shell would say the
same (core/engine.py resolved_here, against remote_sh.resolve_workdir run under /bin/sh)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import pytest

from rtrain_tui.core.engine import Engine, resolved_here
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs.index import RunIndex
from rtrain_tui.core.transport.connection import ConnectionPool


@pytest.mark.parametrize("workdir", ["/", "/srv/runs", "/srv/runs/", "//srv//runs//",
                                     "/tmp/a.b_c-d/e"])
def test_an_absolute_workdir_is_what_the_hosts_shell_resolves(workdir: str) -> None:
    out = subprocess.run(["/bin/sh", "-c", remote_sh.resolve_workdir(workdir)],
                         capture_output=True, text=True, check=True, cwd="/").stdout
    assert resolved_here(workdir) == (out.strip().rstrip("/") or "/")


@pytest.mark.parametrize("workdir", ["~/.praisonai-train", "~", "runs", "./runs"])
def test_a_workdir_the_shell_expands_or_places_is_left_to_the_host(workdir: str) -> None:
    assert resolved_here(workdir) is None


def test_a_run_dir_under_an_absolute_workdir_needs_no_connection(tmp_path: Path) -> None:
    """A host that refuses connections: the run dir of an absolute workdir is still
    known (a start's upload begins without that round trip); a `~` one needs the host."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    config = tmp_path / "config"
    config.write_text(f"Host box\n  HostName 127.0.0.1\n  Port {port}\n  ConnectTimeout 2\n")
    engine = Engine(ConnectionPool(config), RunIndex(tmp_path / "runs.toml"))

    async def go(workdir: str) -> str:
        try:
            return await engine.run_dir("box", workdir, "r1")
        finally:
            await engine.close()

    assert asyncio.run(go("/srv/runs/")) == "/srv/runs/r1"
    with pytest.raises(RemoteError):
        asyncio.run(go("~/runs"))
