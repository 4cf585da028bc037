"""accept-new host keys: recorded on first contact, accepted again on every re-key."""

from __future__ import annotations

from pathlib import Path

import asyncssh

from rtrain_tui.core.transport.options import HostOptions, host_key_client


def test_a_key_recorded_on_first_contact_is_accepted_again_on_rekey(tmp_path: Path) -> None:
    """asyncssh re-validates the host key on each re-key (every GiB): found by the 1 GiB upload."""
    known = tmp_path / "known_hosts"
    opts = HostOptions("h", "127.0.0.1", 2222, 10.0, 15, (known,))
    key = asyncssh.generate_private_key("ssh-ed25519")
    client = host_key_client(opts)
    assert client.validate_host_public_key("127.0.0.1", "127.0.0.1", 2222, key)
    assert known.read_text().startswith("[127.0.0.1]:2222 ssh-ed25519 ")
    # the re-key, later on the same connection: same key, now on record
    assert client.validate_host_public_key("127.0.0.1", "127.0.0.1", 2222, key)
    assert client.changed is None
    assert known.read_text().count("\n") == 1  # recorded once
    # another key for the same host is still refused, naming the line
    other = asyncssh.generate_private_key("ssh-ed25519")
    assert not client.validate_host_public_key("127.0.0.1", "127.0.0.1", 2222, other)
    assert client.changed == (known, 1)
