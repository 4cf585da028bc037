"""`start --retries` and `--on-stall stop|restart` on the real test Slurm (issue 18): refused
with a line saying to `resume` instead (a wrapper waiting to retry would hold the job's
allocation; a failed job is resubmitted by hand), before anything reaches the cluster."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import write_config
from tests.slurm.conftest import LOGIN, SlurmCli


def test_retries_and_on_stall_are_refused_on_slurm_before_anything_is_made(
        scli: SlurmCli, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml")
    workdir = tmp_path / "work"
    for extra in (("--retries", "1"), ("--on-stall", "stop")):
        r = scli("start", LOGIN, "-c", str(config), "--workdir", str(workdir), "--run-id", "r1",
                 "--no-follow", *extra)
        assert (r.rc, r.out) == (1, "")
        assert r.err == (
            "rtrain-tui: --retries works on boxes only: a slurm host's failed job is not "
            "resubmitted by itself; leave out --retries (and config.toml's `retries`) and use "
            "`rtrain-tui resume HOST RUN` after a failure; --on-stall stop and restart are for "
            "boxes too.\n")
    assert not workdir.exists()
    assert scli("runs").out.startswith("no runs yet")
