"""The Slurm backend end to end: the real CLI, a real login-node sshd, a real Slurm.

`cluster` has two (fake) GPUs; a run asking for both holds the node, so a second run
waits with reason `Resources`. Job durations are seconds.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex, StartRequest
from rtrain_tui.core.backends.slurm import SlurmOptions
from rtrain_tui.core.runs.hostconfig import HostConfig, HostSettings
from tests.conftest import write_config
from tests.slurm.conftest import LOGIN, SlurmCli
from tests.slurm_cluster import SlurmCluster
from tests.sshd import SshHosts


def status(scli: SlurmCli, run_id: str, workdir: str) -> dict:
    r = scli("status", LOGIN, run_id, "--workdir", workdir, "--json")
    assert r.rc == 0, r.err
    return json.loads(r.out)


def wait_for(scli: SlurmCli, run_id: str, workdir: str, pred, timeout: float = 40) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        got = status(scli, run_id, workdir)
        if pred(got):
            return got
        assert time.monotonic() < deadline, f"{run_id}: {got}"
        time.sleep(0.3)


def start(scli: SlurmCli, tmp_path: Path, workdir: str, run_id: str, *flags: str,
          follow: bool = False, **cfg: object):  # type: ignore[no-untyped-def]
    config = write_config(tmp_path / f"{run_id}.yaml", **cfg)
    r = scli("start", LOGIN, "-c", str(config), "--workdir", workdir, "--run-id", run_id,
             "--follow" if follow else "--no-follow", *flags, timeout=180)
    if not follow:
        assert r.rc == 0, r.err
        assert r.out.startswith(f"started {run_id} on {LOGIN} (Slurm job ")
    return r


def test_preflight_lists_the_partition_and_its_two_gpus(scli: SlurmCli) -> None:
    r = scli("preflight", LOGIN)
    assert r.rc == 0, r.err
    assert "gpu*: 1 node(s) (1 idle); GPUs 2 free of 2" in r.out, r.out
    assert f"{LOGIN} is ready" in r.out
    report = json.loads(scli("preflight", LOGIN, "--json").out)
    assert report["backend"] == "slurm" and report["ok"]
    assert report["partitions"] == [
        {"name": "gpu", "default": True, "nodes": {"node0": "idle"}, "gpus_total": 2, "gpus_used": 0},
        {"name": "multi", "default": False, "nodes": {"n1": "idle", "n2": "idle"},
         "gpus_total": 2, "gpus_used": 0}]
    assert "multi: 2 node(s) (2 idle); GPUs 2 free of 2" in r.out
    missing = scli("preflight", LOGIN, "--partition", "nope")
    assert missing.rc == 1 and "no partition 'nope' (there are: gpu, multi)" in missing.err


def test_direct_preflight_of_a_login_node_says_it_looks_like_slurm(pcli: SlurmCli) -> None:
    r = pcli("preflight", LOGIN)
    assert "this looks like a Slurm login node" in r.out


def test_queued_for_resources_then_running_then_completed(scli: SlurmCli, tmp_path: Path,
                                                          workdir: str, slurm: SlurmCluster) -> None:
    # `big` holds both GPUs until the test has seen `small` wait for them.
    start(scli, tmp_path, workdir, "big", "--gpus", "2", steps=100000, step_seconds=0.2)
    wait_for(scli, "big", workdir, lambda s: s["state"] == "running")
    start(scli, tmp_path, workdir, "small", "--gpus", "1", steps=10, step_seconds=0.5)
    start(scli, tmp_path, workdir, "small2", "--gpus", "1", steps=10, step_seconds=0.5)
    assert status(scli, "small", workdir)["state"] == "queued"
    # Right after sbatch the scheduler may not have said why yet: the reason follows,
    # with the job's place in its partition's queue.
    queued = wait_for(scli, "small", workdir, lambda s: s["reason"] != "", timeout=10)
    assert (queued["state"], queued["reason"]) == ("queued", "Resources, 1st in the queue")
    second = wait_for(scli, "small2", workdir, lambda s: s["reason"] != "", timeout=10)
    assert second["state"] == "queued" and second["reason"].endswith(", 2nd in the queue")
    assert queued["queue_position"] == 1 and second["queue_position"] == 2
    # One status word on stdout, as scripts expect; Slurm's reason and place on stderr.
    plain = scli("status", LOGIN, "small", "--workdir", workdir)
    assert (plain.rc, plain.out) == (0, "queued\n")
    assert plain.err == f"rtrain-tui: small on {LOGIN}: Resources, 1st in the queue\n"
    assert scli("stop", LOGIN, "big", "--workdir", workdir, "--grace", "2").rc == 0
    wait_for(scli, "small", workdir, lambda s: s["state"] == "running", timeout=30)
    done = wait_for(scli, "small", workdir, lambda s: s["state"] != "running")
    assert done["state"] == "completed" and done["slurm_state"] == "COMPLETED"
    run_dir = Path(workdir) / "small"
    # The job recorded when it left the queue: its cost counts from then (issue 19).
    launched = datetime.fromisoformat(done["attempts"][0]["launched"])
    started = datetime.fromisoformat(RunIndex(scli.index).get(LOGIN, "small").started_at)
    assert launched - started > timedelta(seconds=1)
    # The probe read it too, and the index keeps it: `runs` and `costs` leave the wait out.
    assert RunIndex(scli.index).get(LOGIN, "small").running_at == launched.isoformat()
    job = (run_dir / "slurm_job_id").read_text().strip()
    assert done["slurm_job_id"] == job
    assert "#SBATCH --gpus-per-node=1" in (run_dir / "run.sbatch").read_text()
    assert (run_dir / "status").read_text().strip() == "0"
    assert "{'loss': 0.2000, 'step': 10, 'epoch': 1.00}" in (run_dir / "train.log").read_text()
    records = {r["run_id"]: r for r in json.loads(scli("runs", "--json").out)}
    assert records["small"]["backend"] == "slurm" and records["small"]["slurm_job_id"] == job
    # Never the login node: Slurm ran it, and the compute side saw its GPU (the client
    # sets none; the stall watchdog only reads the GPUs Slurm gave).
    assert "CUDA_VISIBLE_DEVICES=" not in (run_dir / "run.sbatch").read_text()
    assert "wd_gpus=${CUDA_VISIBLE_DEVICES-}" in (run_dir / "run.sbatch").read_text()
    assert "JobState=COMPLETED" in slurm.client("scontrol", "-o", "show", "job", job)


def test_failing_trainer_reads_failed_exit_3(scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    r = start(scli, tmp_path, workdir, "bad", follow=True, steps=1, exit_code=3)
    assert r.rc == 1
    assert r.out.splitlines()[-1] == f"bad on {LOGIN}: failed (exit 3)"
    got = status(scli, "bad", workdir)
    assert (got["state"], got["exit_code"], got["slurm_state"]) == ("failed (exit 3)", 3, "FAILED")
    assert got["queue_position"] is None
    assert scli("status", LOGIN, "bad", "--workdir", workdir).out == "failed (exit 3)\n"


def test_an_ended_job_gets_its_end_time_and_is_not_asked_about_again(
        scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    """Slurm's runs never had an end time, so a refresh asked about every one forever
    (issue 17): now the probe reads when `status` was written, and the run is settled."""
    assert start(scli, tmp_path, workdir, "short", follow=True, steps=1).rc == 0
    r = scli("runs", "--refresh", "--json")
    (run,) = json.loads(r.out)
    status_file = Path(workdir) / "short" / "status"
    assert run["state"] == "completed"
    assert run["ended_at"] == datetime.fromtimestamp(int(status_file.stat().st_mtime), UTC).isoformat()
    shutil.rmtree(Path(workdir) / "short")  # asked about, it would read `unknown`
    assert [x["state"] for x in json.loads(scli("runs", "--refresh", "--json").out)] == ["completed"]


def test_stop_of_a_trainer_ignoring_sigterm_leaves_nothing(scli: SlurmCli, tmp_path: Path, workdir: str,
                                                           slurm: SlurmCluster) -> None:
    start(scli, tmp_path, workdir, "stubborn", steps=1000, step_seconds=0.1, ignore_term="true",
          children=2)
    wait_for(scli, "stubborn", workdir, lambda s: s["state"] == "running")
    run_dir = Path(workdir) / "stubborn"
    deadline = time.monotonic() + 20
    while "children=" not in (run_dir / "train.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    r = scli("stop", LOGIN, "stubborn", "--workdir", workdir, "--grace", "1")
    assert r.rc == 0, r.err
    assert r.out.strip() == f"stopped stubborn on {LOGIN}"
    assert "ignoring SIGTERM" in (run_dir / "train.log").read_text()
    got = status(scli, "stubborn", workdir)
    # Slurm records CANCELLED, or FAILED when the KILLed batch shell's end reached it
    # first (a race inside Slurm); either way the job is over and the run reads stopped.
    assert got["state"] == "stopped" and got["slurm_state"] in ("CANCELLED", "FAILED")
    token = (run_dir / "train.token").read_text().strip()
    marker = f"RTRAIN_RUN={token}".encode()
    alive = [p.parent.name for p in Path("/proc").glob("[0-9]*/environ")
             if _has_marker(p, marker)]
    assert alive == [], f"processes of the run still alive: {alive}"
    again = scli("stop", LOGIN, "stubborn", "--workdir", workdir)
    assert again.rc == 0 and again.out.strip() == f"stubborn was not running on {LOGIN}"


def _has_marker(environ: Path, marker: bytes) -> bool:
    try:
        return marker in environ.read_bytes().split(b"\0")
    except OSError:
        return False


@pytest.mark.serial
def test_stop_of_a_queued_run_cancels_it_at_once(scli: SlurmCli, tmp_path: Path, workdir: str,
                                                 slurm: SlurmCluster) -> None:
    # `hog` holds both GPUs for the whole test (the autouse fixture cancels it): a hog
    # of 20 s ended under a loaded CI's slow starts and let `waiter` run.
    start(scli, tmp_path, workdir, "hog", "--gpus", "2", steps=100000, step_seconds=0.2)
    start(scli, tmp_path, workdir, "waiter", "--gpus", "2", steps=1)
    wait_for(scli, "waiter", workdir, lambda s: s["state"] == "queued")
    began = time.monotonic()
    r = scli("stop", LOGIN, "waiter", "--workdir", workdir, "--grace", "30")
    assert r.rc == 0 and r.out.strip() == f"stopped waiter on {LOGIN}", r.err
    assert time.monotonic() - began < 15  # no grace period for a job that never ran
    got = status(scli, "waiter", workdir)
    assert got["state"] == "stopped" and got["slurm_state"] == "CANCELLED"
    assert not (Path(workdir) / "waiter" / "train.log").exists()
    assert status(scli, "hog", workdir)["state"] == "running"


def test_a_job_an_older_version_found_stays_a_slurm_job(scli: SlurmCli, tmp_path: Path, workdir: str,
                                                        slurm: SlurmCluster) -> None:
    """Older versions recorded a found run with no backend, meaning the host's: read as a
    box run, a queued job was not `queued` and `stop` never reached Slurm. The refresh
    writes the backend it resolved, so the record never changes meaning again."""
    # `hog` holds both GPUs for the whole test (see above): `waiter` stays queued.
    start(scli, tmp_path, workdir, "hog", "--gpus", "2", steps=100000, step_seconds=0.2)
    start(scli, tmp_path, workdir, "waiter", "--gpus", "2", steps=1)
    wait_for(scli, "waiter", workdir, lambda s: s["state"] == "queued")
    index = RunIndex(scli.index)
    # As an older version's `runs --discover` (or the app's auto-discovery) wrote it.
    index.update(lambda runs: [replace(r, backend="", origin="found", token="", job_id="")
                               if r.run_id == "waiter" else r for r in runs])
    r = scli("runs", "--refresh", "--json")
    assert r.rc == 0, r.err
    waiter = next(x for x in json.loads(r.out) if x["run_id"] == "waiter")
    assert (waiter["state"], waiter["backend"]) == ("queued", "slurm")
    assert next(x for x in index.load() if x.run_id == "waiter").backend == "slurm"
    stop = scli("stop", LOGIN, "waiter", "--workdir", workdir, "--grace", "30")
    assert stop.rc == 0 and stop.out.strip() == f"stopped waiter on {LOGIN}", stop.err
    assert status(scli, "waiter", workdir)["slurm_state"] == "CANCELLED"


def test_tail_of_a_queued_run_says_so_then_follows_it(scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    start(scli, tmp_path, workdir, "first", "--gpus", "2", steps=100000, step_seconds=0.2)
    start(scli, tmp_path, workdir, "later", "--gpus", "2", steps=3)
    assert status(scli, "later", workdir)["state"] == "queued"
    tail = scli.popen("tail", LOGIN, "later", "--workdir", workdir)
    try:
        assert tail.stderr is not None
        said = tail.stderr.readline()  # blocks until tail has said something
        # Right after sbatch the reason may still be blank; the next line then names it.
        if "(Resources" not in said:
            said = tail.stderr.readline()
        assert said.startswith(f"rtrain-tui: later is queued on {LOGIN} (Resources, 1st in the "
                               "queue); waiting for it to start")
        assert scli("stop", LOGIN, "first", "--workdir", workdir, "--grace", "2").rc == 0
        out, err = tail.communicate(timeout=90)
    finally:
        tail.kill()
    assert tail.returncode == 0, err
    assert f"later left the queue on {LOGIN}" in err
    assert "{'loss': 0.6667, 'step': 3, 'epoch': 1.00}" in out
    assert out.splitlines()[-1] == f"later on {LOGIN}: completed"


def test_fetch_of_the_adapter_works_unchanged(scli: SlurmCli, tmp_path: Path, workdir: str) -> None:
    r = start(scli, tmp_path, workdir, "adapt", follow=True, steps=2)
    assert r.rc == 0, r.err
    out = tmp_path / "out"
    f = scli("fetch", LOGIN, "adapt", "lora_model", "--workdir", workdir, "--out", str(out))
    assert f.rc == 0, f.err
    assert (out / "lora_model" / "adapter_config.json").is_file()


def test_bad_slurm_options_are_one_line_before_any_connection(scli: SlurmCli, tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.yaml")
    cases = [
        (["--time", "1h; rm -rf ~"], "--time '1h; rm -rf ~' is not a Slurm time limit"),
        (["--partition", "gpu$(id)"], "--partition 'gpu$(id)' is not a Slurm name"),
        (["--sbatch-arg=--output=/etc/passwd"], "--sbatch-arg '--output=/etc/passwd' is not allowed"),
        (["--sbatch-arg=--comment=a b"], "--sbatch-arg '--comment=a b' is not usable"),
        (["--nodes", "0"], "--nodes must be a whole number from 1 to 1024"),
    ]
    for flags, message in cases:
        r = scli("start", "never-resolved.invalid", "--backend", "slurm", "-c", str(config), *flags)
        assert r.rc == 1 and r.err.count("\n") == 1 and message in r.err, (flags, r.err)


def test_refresh_of_twenty_slurm_runs_is_one_probe(hosts: SshHosts, slurm: SlurmCluster,
                                                   tmp_path: Path, workdir: str) -> None:
    settings = HostConfig({LOGIN: HostSettings("slurm", SlurmOptions(partition="gpu"))})
    engine = Engine(ConnectionPool(slurm.ssh_config), RunIndex(tmp_path / "runs.toml"), settings)
    config = write_config(tmp_path / "c.yaml", steps=1)

    async def go() -> dict:
        try:
            for i in range(20):
                await engine.start(StartRequest(host=LOGIN, config=config, run_id=f"r{i}",
                                                workdir=workdir, gpus=1))
            conn = engine.host(LOGIN)
            calls: list[str] = []
            original = conn.run

            async def counted(script: str, timeout: float = 30) -> str:
                calls.append(script)
                return await original(script, timeout)

            conn.run = counted  # type: ignore[method-assign]
            states = await engine.refresh()
            # one round trip, one squeue for all 20 jobs (and one for queue places)
            assert len(calls) == 1 and calls[0].count("squeue -h -t all") == 1
            return states
        finally:
            await engine.close()

    states = asyncio.run(go())
    assert len(states) == 20
    assert set(states.values()) <= {"queued", "running", "completed"}
    assert "queued" in states.values()
