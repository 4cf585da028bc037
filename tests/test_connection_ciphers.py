"""Transfers use AES-GCM where the CPU has AES instructions, unless the ssh config says
otherwise: the cipher is the biggest single cost of a transfer in asyncssh."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rtrain_tui.core.transport.ciphers import aes_is_fast
from rtrain_tui.core.transport.connection import HostConnection
from tests.sshd import SshHosts


def _cipher(config: Path, alias: str) -> str:
    async def go() -> str:
        conn = HostConnection(alias, config)
        try:
            ssh = await conn.connect()
            return str(ssh.get_extra_info("send_cipher"))
        finally:
            await conn.close()

    return asyncio.run(go())


def test_gcm_is_preferred_and_a_configured_cipher_list_is_kept(hosts: SshHosts, tmp_path: Path) -> None:
    assert _cipher(hosts.ssh_config, "gpu") == (
        "aes128-gcm@openssh.com" if aes_is_fast() else "chacha20-poly1305@openssh.com")
    config = tmp_path / "ssh_config"
    config.write_text(hosts.ssh_config.read_text().replace("Include extra.conf\n", "").replace(
        "Host gpu\n", "Host gpu\n  Ciphers aes256-ctr\n"))
    assert _cipher(config, "gpu") == "aes256-ctr"
