"""Aliases the ssh config names are usable even when they are not hostnames."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtrain_tui.core.engine import Engine
from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.runs.index import RunIndex
from rtrain_tui.core.transport.connection import ConnectionPool


def test_a_configured_alias_that_is_no_hostname_is_accepted_others_refused(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text('Host a..b "rented box"\n  HostName 127.0.0.1\n')
    engine = Engine(ConnectionPool(config), RunIndex(tmp_path / "runs.toml"))
    assert engine.host("a..b").alias == "a..b"
    assert engine.host("rented box").alias == "rented box"
    with pytest.raises(ValidationError):
        engine.host("c..d")
