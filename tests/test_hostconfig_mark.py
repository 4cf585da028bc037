"""Marking a host as a Slurm login node writes config.toml without losing what is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtrain_tui.core import hostconfig
from rtrain_tui.core.errors import ValidationError


def test_marking_appends_a_table_and_keeps_comments(tmp_path: Path) -> None:
    path = tmp_path / "rtrain-tui" / "config.toml"
    assert hostconfig.mark_slurm("uni-cluster", path) == path
    assert hostconfig.load(path).for_host("uni-cluster").backend == "slurm"
    path.write_text("# my clusters\n[hosts.other]\nbackend = \"slurm\" # keep\n" + path.read_text())
    hostconfig.mark_slurm('odd "name".x', path)
    text = path.read_text()
    assert "# my clusters" in text and "# keep" in text
    loaded = hostconfig.load(path)
    assert {a: s.backend for a, s in loaded.hosts.items()} == {
        "other": "slurm", "uni-cluster": "slurm", 'odd "name".x': "slurm"}


def test_a_broken_or_already_set_file_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[hosts.a\nbroken")
    with pytest.raises(ValidationError, match="cannot read"):
        hostconfig.mark_slurm("a", path)
    assert path.read_text() == "[hosts.a\nbroken"
    path.write_text('[hosts.a]\npartition = "gpu"\n')
    with pytest.raises(ValidationError, match=r'already has \[hosts.a\]: set backend = "slurm" there'):
        hostconfig.mark_slurm("a", path)
    assert path.read_text() == '[hosts.a]\npartition = "gpu"\n'
