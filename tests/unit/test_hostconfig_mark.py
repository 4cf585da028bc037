"""Marking a host as a Slurm login node writes config.toml without losing what is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.runs import hostconfig


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


def test_a_broken_file_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[hosts.a\nbroken")
    with pytest.raises(ValidationError, match="cannot read"):
        hostconfig.mark_slurm("a", path)
    assert path.read_text() == "[hosts.a\nbroken"


def test_a_host_that_has_a_table_gets_backend_slurm_in_it(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[hosts.a]\npartition = "gpu"  # the big one\nbackend = "direct"\n\n[hosts.b]\nqos = "x"')
    hostconfig.mark_slurm("a", path)
    text = path.read_text()
    assert "# the big one" in text
    loaded = hostconfig.load(path)
    assert loaded.for_host("a").backend == "slurm" and loaded.for_host("a").slurm.partition == "gpu"
    assert loaded.for_host("b").backend == "direct" and loaded.for_host("b").slurm.qos == "x"


def test_hosts_written_as_inline_tables_stay_valid(tmp_path: Path) -> None:
    """Appending a `[hosts.X]` header after `hosts = {...}` redefined `hosts`: the file no
    longer loaded, so every command failed until it was fixed by hand (issue 15 item 25)."""
    path = tmp_path / "config.toml"
    path.write_text('# clusters\nhosts = { uni = { partition = "gpu" } }  # mine\n')
    hostconfig.mark_slurm("lab-login", path)
    hostconfig.mark_slurm("uni", path)
    text = path.read_text()
    assert "# clusters" in text and "# mine" in text
    loaded = hostconfig.load(path)
    assert {a: (s.backend, s.slurm.partition) for a, s in loaded.hosts.items()} == {
        "uni": ("slurm", "gpu"), "lab-login": ("slurm", "")}
    path.write_text('[hosts]\nbox = { backend = "direct" }\n# after\n')
    hostconfig.mark_slurm("odd \"name\".x", path)
    hostconfig.mark_slurm("box", path)
    assert "# after" in path.read_text()
    assert {a: s.backend for a, s in hostconfig.load(path).hosts.items()} == {
        "box": "slurm", 'odd "name".x': "slurm"}
