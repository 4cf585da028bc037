"""GPUs against the real sshd: the per-host probe samples them in the same round trip and
names who holds each; `start` chooses GPUs, sets CUDA_VISIBLE_DEVICES and refuses busy ones.

The stand-in nvidia-smi answers from `hosts.gpu_file` (TWO_GPUS: GPU 0 idle, GPU 1 97%
busy with 70000 MiB used) and `hosts.apps_file` (compute processes, written per test).
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from tests.conftest import Cli, write_config
from tests.sshd import TWO_GPUS, SshHosts

ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def someone(hosts: SshHosts) -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not one of our runs, listed by nvidia-smi on GPU 1."""
    proc = subprocess.Popen(["sleep", "120"])
    hosts.apps_file.write_text(f"GPU-fake-1, {proc.pid}, 69000\n")
    yield proc
    hosts.apps_file.unlink(missing_ok=True)
    hosts.gpu_file.write_text(TWO_GPUS)
    proc.kill()
    proc.wait()


def train_log(workdir: str, run_id: str, want: str, timeout: float = 20) -> str:
    log = Path(workdir) / run_id / "train.log"
    deadline = time.monotonic() + timeout
    while want not in (text := log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, f"{want!r} not in {text!r}"
        time.sleep(0.1)
    return text


def test_refresh_samples_gpus_in_the_same_probe_and_names_our_run_and_another_process(
        hosts: SshHosts, tmp_path: Path, workdir: str, someone: subprocess.Popen[bytes]) -> None:
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))
    config = write_config(tmp_path / "c.yaml", steps=10000, step_seconds=0.05)
    calls: list[str] = []

    async def go() -> None:
        try:
            started = await engine.start(StartRequest("gpu", config, run_id="ours", workdir=workdir))
            assert started.record.gpu_ids == "0"
            # The wrapper carries the run's marker, as every process of the run does.
            hosts.apps_file.write_text(f"GPU-fake-0, {started.pid}, 5000\n"
                                       f"GPU-fake-1, {someone.pid}, 69000\n")
            conn = engine.host("gpu")
            original = conn.run

            async def counted(script: str, timeout: float = 30) -> str:
                calls.append(script)
                return await original(script, timeout)

            conn.run = counted  # type: ignore[method-assign]
            deadline = time.monotonic() + 20
            while True:  # each refresh reports the last background sample and starts one
                calls.clear()
                states = await engine.refresh(sample_gpus=True)
                assert list(states.values()) == ["running"]
                assert len(calls) == 1, "the GPU report must ride on the one probe per host"
                latest = engine.gpu_history.get("gpu") and engine.gpu_history["gpu"].latest
                if latest and len(latest.processes) == 2:
                    break
                assert time.monotonic() < deadline, latest
                await asyncio.sleep(0.2)
        finally:
            await engine.close()

    asyncio.run(go())
    sample = engine.gpu_history["gpu"].latest
    assert sample is not None and sample.error == ""
    assert [(g.index, g.utilization_pct, g.memory_used_mib) for g in sample.gpus] == [
        (0, 0, 1024), (1, 97, 70000)]
    ours, theirs = sample.processes
    assert (ours.gpu_uuid, ours.run_id, ours.used_mib) == ("GPU-fake-0", "ours", 5000)
    assert (theirs.run_id, theirs.user, theirs.pid) == ("", ME, someone.pid)
    assert sample.describe(sample.gpus[1]) == f"GPU 1: 97% busy, 68 GiB, held by {ME}, pid {someone.pid}"


def test_a_host_without_nvidia_smi_samples_as_no_gpu(hosts: SshHosts, tmp_path: Path) -> None:
    engine = Engine(ConnectionPool(hosts.ssh_config), RunIndex(tmp_path / "runs.toml"))

    async def go():  # type: ignore[no-untyped-def]
        try:
            return await engine.sample_gpus("cpu")
        finally:
            await engine.close()

    assert asyncio.run(go()).error == "no nvidia-smi"


def test_start_picks_the_idle_gpu_and_the_trainer_sees_it(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "one")
    assert r.rc == 0, r.err
    assert "one gets GPU(s) 0 on gpu (CUDA_VISIBLE_DEVICES)" in r.err
    assert "env CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID" in train_log(workdir, "one", "CUDA_")
    assert json.loads(cli("runs", "--json").out)[0]["gpu_ids"] == "0"


def test_too_few_free_gpus_is_refused_naming_who_holds_them_before_anything_is_made(
        cli: Cli, tmp_path: Path, workdir: str, someone: subprocess.Popen[bytes]) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--gpus", "2")
    assert r.rc == 1 and r.out == ""
    assert r.err == ("rtrain-tui: gpu has 1 free GPU(s), --gpus 2 needs 2: GPU 1: 97% busy, 68 GiB, "
                     f"held by {ME}, pid {someone.pid}. Pass --queue to wait for them, --allow-busy to share them, or ask "
                     "for fewer.\n")
    assert not Path(workdir).exists() or not any(Path(workdir).iterdir())
    assert json.loads(cli("runs", "--json").out) == []


def test_allow_busy_takes_the_busy_gpu_too(cli: Cli, tmp_path: Path, workdir: str,
                                            someone: subprocess.Popen[bytes]) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--gpus", "2", "--allow-busy",
            "--run-id", "both")
    assert r.rc == 0, r.err
    assert "CUDA_VISIBLE_DEVICES=0,1 " in train_log(workdir, "both", "CUDA_")


def test_gpu_ids_choose_by_hand_in_the_order_given(cli: Cli, tmp_path: Path, workdir: str) -> None:
    hosts = cli.hosts
    hosts.gpu_file.write_text(TWO_GPUS + "2, NVIDIA H200, 0, 143771, 0\n3, NVIDIA H200, 0, 143771, 0\n")
    try:
        config = write_config(tmp_path / "c.yaml", steps=1)
        r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--gpu-ids", "3,0",
                "--run-id", "hand")
        assert r.rc == 0, r.err
        assert "CUDA_VISIBLE_DEVICES=3,0 " in train_log(workdir, "hand", "CUDA_")
        # Once ended, the run is in its month's archive beside runs.toml.
        written = "".join(p.read_text() for p in cli.index.parent.glob("runs*.toml"))
        assert written.count('gpu_ids = "3,0"') == 1
    finally:
        hosts.gpu_file.write_text(TWO_GPUS)


def test_gpu_ids_of_a_busy_or_missing_gpu_are_refused(cli: Cli, tmp_path: Path, workdir: str,
                                                       someone: subprocess.Popen[bytes]) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    busy = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--gpu-ids", "1")
    assert busy.rc == 1
    assert f"the GPUs you chose are in use — GPU 1: 97% busy, 68 GiB, held by {ME}, pid {someone.pid}" in busy.err
    missing = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--gpu-ids", "0,5")
    assert missing.rc == 1
    assert missing.err == ("rtrain-tui: GPU 5 does not exist on gpu (its GPUs: 0, 1); pick from "
                           "those with --gpu-ids.\n")
    assert not Path(workdir).exists() or not any(Path(workdir).iterdir())


@pytest.mark.parametrize(("args", "message"), [
    (["--gpu-ids", "0,0"], "--gpu-ids 0,0 names GPU 0 twice; name each GPU once."),
    (["--gpu-ids", "0;id"], "--gpu-ids '0;id' is not usable: write GPU numbers separated by commas, like 0,3."),
    (["--gpu-ids", "0,1", "--gpus", "1"], "--gpus 1 and --gpu-ids 0,1 disagree; give --gpu-ids alone."),
    (["--gpu-ids", "0", "--env", "CUDA_VISIBLE_DEVICES=1"],
     "--gpu-ids and --env CUDA_VISIBLE_DEVICES both choose GPUs; give one of them."),
])
def test_bad_gpu_choices_are_one_line_before_any_connection(cli: Cli, tmp_path: Path,
                                                            args: list[str], message: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    # `silent` accepts TCP and never speaks: had we connected, the error would be "cannot reach".
    r = cli("start", "silent", "-c", str(config), *args, timeout=20)
    assert (r.rc, r.err) == (1, f"rtrain-tui: {message}\n")


def test_cuda_visible_devices_from_env_is_left_alone(cli: Cli, tmp_path: Path, workdir: str,
                                                    someone: subprocess.Popen[bytes]) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--gpus", "2", "--run-id", "env",
            "--env", "CUDA_VISIBLE_DEVICES=1,0")
    assert r.rc == 0, r.err
    assert "env CUDA_VISIBLE_DEVICES=1,0 CUDA_DEVICE_ORDER=<unset>" in train_log(workdir, "env", "CUDA_")


def test_hosts_sharing_one_home_never_show_each_others_gpus(hosts: SshHosts, tmp_path: Path) -> None:
    """Two machines (names of their own) with one NFS home: each one's background GPU
    sample is its own, so the second never reports the first one's GPUs."""
    home = tmp_path / "nfs-home"
    a_gpus, b_gpus = tmp_path / "a.csv", tmp_path / "b.csv"
    a_gpus.write_text("0, NVIDIA A100, 10, 81920, 0\n")
    b_gpus.write_text("0, NVIDIA H100, 20, 81559, 0\n1, NVIDIA H100, 30, 81559, 0\n")
    cfg = tmp_path / "config"
    cfg.write_text(hosts.ssh_config.read_text()
                   + hosts.extra_host("node-a", home=home, gpus=a_gpus, hostname="node-a")
                   + hosts.extra_host("node-b", home=home, gpus=b_gpus, hostname="node-b"))
    engine = Engine(ConnectionPool(cfg), RunIndex(tmp_path / "runs.toml"))

    async def reported(host: str):  # type: ignore[no-untyped-def]
        """The refresh probe's GPU report, once a background sample is there to report."""
        deadline = time.monotonic() + 20
        while (sample := await engine.poll_gpus(host)) is None or sample.pending:
            assert time.monotonic() < deadline, sample
            await asyncio.sleep(0.1)
        return sample

    async def go():  # type: ignore[no-untyped-def]
        try:
            return await reported("node-a"), await reported("node-b")
        finally:
            await engine.close()

    a, b = asyncio.run(go())
    assert [(g.index, g.memory_used_mib) for g in a.gpus] == [(0, 10)]
    assert [(g.index, g.memory_used_mib) for g in b.gpus] == [(0, 20), (1, 30)]
