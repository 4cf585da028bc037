"""The newest complete checkpoint, judged over the real sshd in one round trip
(Engine.checkpoints: host/checkpoints.sh, then the rule of core/runs/checkpoints.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex
from rtrain_tui.core.errors import NoSuchRunError
from rtrain_tui.core.runs import checkpoints as ck
from tests.checkpoint_files import save_order, state_json, write_checkpoint
from tests.conftest import Cli, write_config
from tests.sshd import SshHosts


def judged(hosts: SshHosts, tmp_path: Path, workdir: str, run_id: str) -> list[ck.Checkpoint]:
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))

    async def go() -> list[ck.Checkpoint]:
        try:
            return await engine.checkpoints("gpu", workdir, run_id)
        finally:
            await engine.close()

    return asyncio.run(go())


def test_newest_complete_checkpoint_skips_one_cut_mid_save_and_one_truncated(
    hosts: SshHosts, tmp_path: Path, workdir: str,
) -> None:
    run = Path(workdir) / "r1"
    ranks = save_order(2)
    write_checkpoint(run, "outputs/checkpoint-100", 100, ranks)
    write_checkpoint(run, "outputs/checkpoint-150", 150, ranks)
    # Killed after the weights and the optimizer, before the RNG states and the state.
    write_checkpoint(run, "outputs/checkpoint-200", 200, ranks[:4])
    # Killed while rank 0 wrote trainer_state.json: its text stops mid-way.
    write_checkpoint(run, "outputs/checkpoint-250", 250, ranks, state_json(250)[:-25])
    # Rank 1 still writing its RNG state when rank 0 finished.
    write_checkpoint(run, "outputs/checkpoint-300", 300, [f for f in ranks if f != "rng_state_1.pth"])
    (run / "train.log").write_text("")

    got = judged(hosts, tmp_path, workdir, "r1")
    newest = ck.newest_complete(got)
    assert newest.checkpoint == ck.Checkpoint("outputs/checkpoint-150", 150)
    assert newest.lines == [
        "outputs/checkpoint-300 incomplete: rng_state_1.pth missing (2 ranks)",
        "outputs/checkpoint-250 incomplete: trainer_state.json truncated",
        "outputs/checkpoint-200 incomplete: no trainer_state.json: cut off mid-save",
    ]
    assert [c.step for c in got] == [300, 250, 200, 150, 100]


def test_checkpoints_of_a_run_the_host_does_not_have_say_so(
    hosts: SshHosts, tmp_path: Path, workdir: str,
) -> None:
    Path(workdir).mkdir()
    with pytest.raises(NoSuchRunError, match="no run nope on gpu"):
        judged(hosts, tmp_path, workdir, "nope")


def test_cli_fetch_of_an_incomplete_checkpoint_refuses_unless_asked(
    cli: Cli, tmp_path: Path, workdir: str,
) -> None:
    run = Path(workdir) / "r1"
    write_checkpoint(run, "outputs/checkpoint-150", 150, save_order())
    write_checkpoint(run, "outputs/checkpoint-200", 200, save_order()[:3])
    (run / "train.log").write_text("")
    (run / "status").write_text("1\n")
    out = tmp_path / "out"

    r = cli("fetch", "gpu", "r1", "outputs/checkpoint-200/", "--out", str(out), "--workdir", workdir)
    assert (r.rc, r.out) == (1, "")
    assert r.err == ("rtrain-tui: outputs/checkpoint-200 is incomplete (no trainer_state.json: cut "
                     "off mid-save); the newest complete one is outputs/checkpoint-150. "
                     "`--incomplete` fetches it anyway.\n")
    assert not out.exists()

    r = cli("fetch", "gpu", "r1", "outputs/checkpoint-200", "--out", str(out), "--workdir", workdir,
            "--incomplete")
    assert r.rc == 0, r.err
    assert r.out == f"fetched to {out / 'checkpoint-200'}\n"
    assert "warning: outputs/checkpoint-200 is incomplete" in r.err
    assert sorted(p.name for p in (out / "checkpoint-200").iterdir()) == sorted(save_order()[:3])

    r = cli("fetch", "gpu", "r1", "outputs/checkpoint-150", "--out", str(out), "--workdir", workdir)
    assert (r.rc, r.err) == (0, "")
    assert (out / "checkpoint-150" / "trainer_state.json").exists()


def test_the_stand_in_trainer_saves_as_transformers_does_and_a_kill_mid_save_shows(
    cli: Cli, hosts: SshHosts, tmp_path: Path, workdir: str,
) -> None:
    config = write_config(tmp_path / "c.yaml", steps=6, step_seconds=0.01, save_steps=2, ranks=2,
                          die_mid_save=6)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "r2", "--gpus", "0",
            "--no-follow")
    assert r.rc == 0, r.err
    status = Path(workdir) / "r2" / "status"
    deadline = time.monotonic() + 30
    while not status.exists():
        assert time.monotonic() < deadline, "the stand-in run did not end"
        time.sleep(0.05)
    assert status.read_text().strip() == "137"  # SIGKILLed mid-save
    got = judged(hosts, tmp_path, workdir, "r2")
    assert [c.line for c in got] == [
        "outputs/checkpoint-6 incomplete: no trainer_state.json: cut off mid-save",
        "outputs/checkpoint-4 ✓",
        "outputs/checkpoint-2 ✓",
    ]
    saved = Path(workdir) / "r2" / "outputs" / "checkpoint-4"
    assert sorted(p.name for p in saved.iterdir()) == sorted(
        ["adapter_config.json", *save_order(2)[1:]])
    times = {p.name: p.stat().st_mtime_ns for p in saved.iterdir()}
    assert times["trainer_state.json"] == max(times.values())  # written last
