"""Two starts never get the same GPU, even before the first run's trainer shows up in
nvidia-smi (loading a model takes seconds; a second start in that window saw the GPU idle
and picked it too: two trainers on one GPU, one of them OOM). A GPU given to a run that
is starting or running counts as taken until that run ends.

Against the real sshd; the stand-in nvidia-smi shows two idle GPUs and no processes, as
a real one does while the trainers are still loading.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.errors import RemoteError
from tests.conftest import Cli, write_config
from tests.sshd import TWO_GPUS, SshHosts

IDLE = "0, NVIDIA H200, 1024, 143771, 0\n1, NVIDIA H200, 1024, 143771, 0\n"


@pytest.fixture
def idle_gpus(hosts: SshHosts):  # type: ignore[no-untyped-def]
    hosts.gpu_file.write_text(IDLE)
    hosts.apps_file.unlink(missing_ok=True)
    yield
    hosts.gpu_file.write_text(TWO_GPUS)


def test_a_second_start_skips_the_gpu_a_loading_run_was_given_and_a_third_is_refused(
        hosts: SshHosts, tmp_path: Path, workdir: str, idle_gpus: None) -> None:
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)

    async def go() -> None:
        try:
            first = await engine.start(StartRequest("gpu", config, run_id="a", workdir=workdir))
            second = await engine.start(StartRequest("gpu", config, run_id="b", workdir=workdir))
            assert (first.record.gpu_ids, second.record.gpu_ids) == ("0", "1")
            with pytest.raises(RemoteError) as refused:
                await engine.start(StartRequest("gpu", config, run_id="c", workdir=workdir))
            assert "GPU 0: 0% busy, 1 GiB, given to our run a" in str(refused.value)
            assert not (Path(workdir) / "c").exists()  # refused before anything was made
            await engine.stop("gpu", workdir, "a")  # once a run ends, its GPU is free again
            third = await engine.start(StartRequest("gpu", config, run_id="c", workdir=workdir))
            assert third.record.gpu_ids == "0"
        finally:
            await engine.close()

    asyncio.run(go())


def test_two_starts_at_once_in_one_app_get_different_gpus(
        hosts: SshHosts, tmp_path: Path, workdir: str, idle_gpus: None) -> None:
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)

    async def go() -> None:
        try:
            started = await asyncio.gather(*(
                engine.start(StartRequest("gpu", config, run_id=run_id, workdir=workdir))
                for run_id in ("x", "y")))
            assert sorted(s.record.gpu_ids for s in started) == ["0", "1"]
        finally:
            await engine.close()

    asyncio.run(go())


def test_two_cli_starts_at_once_get_different_gpus(
        cli: Cli, tmp_path: Path, workdir: str, idle_gpus: None) -> None:
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    procs = [cli.popen("start", "gpu", "-c", str(config), "--workdir", workdir,
                       "--run-id", run_id, "--no-follow") for run_id in ("p", "q")]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    runs = json.loads(cli("runs", "--json").out)
    assert sorted(r["gpu_ids"] for r in runs) == ["0", "1"]


def test_a_resume_claims_its_gpu_on_the_host_so_another_laptops_start_never_shares_it(
        hosts: SshHosts, tmp_path: Path, workdir: str, idle_gpus: None) -> None:
    """R06: a resume chose GPUs but never claimed them on the host (a start records them in
    its run dir under the host's GPU lock), so another laptop's start, made while the
    resume was launching (its index never heard of the run; the run's old attempt had
    ended, so GPU 0 looked free), got GPU 0 too: two trainers on one GPU. A resume claims
    its GPUs on the host exactly as a start does, so one of the two is refused: here the
    resume, which reached the host's GPU lock second."""
    import threading

    here = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "here.toml"))
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.02, save_steps=2)
    checkpoint = Path(workdir) / "held" / "outputs" / "checkpoint-2" / "trainer_state.json"
    theirs: list[str] = []

    def another_laptop_starts() -> None:  # its own index, engine and event loop
        async def go() -> None:
            there = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "there.toml"))
            try:
                started = await there.start(
                    StartRequest("gpu", config, run_id="other", workdir=workdir))
                theirs.append(started.record.gpu_ids)
            finally:
                await there.close()
        asyncio.run(go())

    def as_the_resume_launches(step: str) -> None:
        if step == "launching" and not theirs:  # its GPUs chosen, its launch not yet sent
            laptop = threading.Thread(target=another_laptop_starts)
            laptop.start()
            laptop.join(120)

    async def go() -> None:
        try:
            first = await here.start(StartRequest("gpu", config, run_id="held", workdir=workdir))
            assert first.record.gpu_ids == "0"
            for _ in range(300):
                if checkpoint.exists():
                    break
                await asyncio.sleep(0.1)
            assert checkpoint.exists(), "the run saved no checkpoint"
            await here.stop("gpu", workdir, "held", grace=5)
            try:
                resumed = await here.resume("gpu", workdir, "held",
                                            on_step=as_the_resume_launches)
            except RemoteError as exc:
                said = str(exc)
            else:
                said = f"resumed on GPU {resumed.started.record.gpu_ids}"
            assert theirs == ["0"], theirs  # the other laptop's start got GPU 0...
            assert said == ("gpu: GPU 0 was just given to our run other; resume again (or "
                            "pass --queue to wait for free GPUs)."), said  # ...so not this
            # Refused, its attempt was claimed and never launched: once the other run ends,
            # the next resume takes the GPU.
            await here.stop("gpu", workdir, "other", grace=5)
            again = await here.resume("gpu", workdir, "held")
            assert (again.attempt, again.started.record.gpu_ids) == (3, "0")
        finally:
            for run_id in ("held", "other"):
                try:
                    await here.stop("gpu", workdir, run_id, grace=5)
                except RemoteError:
                    pass
            await here.close()

    asyncio.run(go())
