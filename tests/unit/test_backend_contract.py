"""The contract every backend keeps, run against each under this machine's /bin/sh.

The engine's start transaction, refresh and stop lean on it: a launch answers a pid or a
job id; a launch sent again (a dropped link) launches nothing and answers the same; a
probe answers one line per run, in order; a stop sent again answers the same, and a
later stop finds nothing running. A new backend joins `backends.all_backends()` and is
tested here with nothing added.

Slurm runs against stand-in `sbatch`/`squeue`/`scancel` (tests/unit/slurm_stand_ins), a
few lines of shell that keep jobs as files; the real scheduler is tests/slurm/'s.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rtrain_tui.core import backends
from rtrain_tui.core.backends import Backend, LaunchSpec
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.hostconfig import HostSettings
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.safety import validate

STAND_INS = Path(__file__).parent / "slurm_stand_ins"
# The trainer: says it started (one line per start), then trains until stopped.
TRAINER = "sh -c 'echo started >> launches.txt; exec sleep 120'"


class ShHost:
    """A host played by this machine's /bin/sh: the `alias` and `run` of a connection."""

    alias = "contract"

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    async def run(self, script: str, timeout: float = 60.0) -> str:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", f"(\n{script}\n) </dev/null 2>&1", env=self.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        return out.decode("utf-8", errors="replace")


@pytest.fixture(params=[b.name for b in backends.all_backends()])
def kind(request: pytest.FixtureRequest) -> Backend:
    return backends.get(request.param)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ShHost]:
    (tmp_path / "slurm").mkdir()
    env = {"PATH": f"{STAND_INS}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "FAKE_SLURM_DIR": str(tmp_path / "slurm")}
    sh = ShHost(env)
    yield sh
    # Whatever a failed test left running: only the processes carrying its runs' marker.
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"RTRAIN_RUN_DIR_OF_TEST={tmp_path}".encode() in environ.read_bytes():
                os.kill(int(environ.parent.name), 9)
        except (OSError, ValueError):
            pass


async def _new_run(kind: Backend, host: ShHost, workdir: str, run_id: str) -> tuple[str, str]:
    """A run dir as the engine makes it, holding the backend's launch file: (dir, token)."""
    token = secrets.token_hex(16)
    facts = dict(probes.parse_key_values(await host.run(remote_sh.make_run_dir(workdir, run_id, token))))
    run_dir = facts["dir"]
    options = kind.options(HostSettings(), None)
    spec = LaunchSpec(run_id, token, validate.check_trainer_template(TRAINER), "python3", None, 0,
                      {"RTRAIN_RUN_DIR_OF_TEST": workdir}, options)
    Path(run_dir, kind.launch_file).write_text(kind.launch_text(spec))
    return run_dir, token


async def _launch(kind: Backend, host: ShHost, run_dir: str, token: str) -> dict[str, str]:
    return dict(probes.parse_key_values(await host.run(kind.launch_script(run_dir, token))))


def _launches(run_dir: str, host: ShHost) -> int:
    """How often the run was launched: the trainer's lines, and the stand-in sbatch's calls."""
    started = Path(run_dir, "launches.txt")
    calls = Path(host.env["FAKE_SLURM_DIR"], "calls")
    submits = calls.read_text().count("sbatch ") if calls.exists() else 0
    return (started.read_text().count("started") if started.exists() else 0) + submits


async def _until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_a_launch_answers_a_pid_or_job_id_and_a_resent_one_launches_nothing(
        kind: Backend, host: ShHost, tmp_path: Path) -> None:
    async def go() -> None:
        run_dir, token = await _new_run(kind, host, str(tmp_path / "w"), "r1")
        first = kind.launched("contract", "r1", await _launch(kind, host, run_dir, token))
        assert first.pid > 0 or first.job_id.isdigit()
        await _until(lambda: _launches(run_dir, host) >= 1)
        again = kind.launched("contract", "r1", await _launch(kind, host, run_dir, token))
        assert (again.pid, again.job_id) == (first.pid, first.job_id)
        # Stopped, nothing of it can still be starting: one launch, ever.
        assert await kind.stop_ladder(host, str(tmp_path / "w"), "r1", 5.0, "ab" * 8, lambda _m: None)
        assert _launches(run_dir, host) == 1

    asyncio.run(go())


def test_a_launch_into_someone_elses_run_dir_launches_nothing(
        kind: Backend, host: ShHost, tmp_path: Path) -> None:
    async def go() -> None:
        run_dir, _token = await _new_run(kind, host, str(tmp_path / "w"), "r1")
        answer = await _launch(kind, host, run_dir, secrets.token_hex(16))
        assert "error" in answer and _launches(run_dir, host) == 0

    asyncio.run(go())


def test_a_probe_answers_one_line_per_run_in_order(kind: Backend, host: ShHost, tmp_path: Path) -> None:
    async def go() -> None:
        workdir = str(tmp_path / "w")
        run_dir, token = await _new_run(kind, host, workdir, "live")
        await _new_run(kind, host, workdir, "unlaunched")
        kind.launched("contract", "live", await _launch(kind, host, run_dir, token))
        runs = [(workdir, "missing"), (workdir, "live"), (workdir, "unlaunched")]
        out = await host.run(kind.probe_script(runs, [0, 1, 2]))
        firsts = [line.split("\t")[0] for line in out.splitlines() if line[:1].isdigit()]
        assert firsts == ["0", "1", "2"], out
        got = kind.parse_probe(out, len(runs), "contract")
        assert [p.state for p in got] == [probes.UNKNOWN, probes.RUNNING, probes.UNKNOWN]
        assert [p.exists for p in got] == [False, True, True]
        await kind.stop_ladder(host, workdir, "live", 5.0, "ab" * 8, lambda _m: None)

    asyncio.run(go())


def test_a_stop_is_idempotent(kind: Backend, host: ShHost, tmp_path: Path) -> None:
    async def go() -> None:
        workdir = str(tmp_path / "w")
        run_dir, token = await _new_run(kind, host, workdir, "r1")
        kind.launched("contract", "r1", await _launch(kind, host, run_dir, token))
        await _until(lambda: _launches(run_dir, host) >= 1)
        steps: list[str] = []
        code = await kind.stop_ladder(host, workdir, "r1", 5.0, "ab" * 8, steps.append)
        assert code in (143, 137) and steps
        # The same stop sent again (its answer was lost) says the same, never "not running".
        assert await kind.stop_ladder(host, workdir, "r1", 5.0, "ab" * 8, lambda _m: None) == code
        # Another stop finds nothing to stop, and the run reads stopped.
        assert await kind.stop_ladder(host, workdir, "r1", 5.0, "cd" * 8, lambda _m: None) is None
        out = await host.run(kind.probe_script([(workdir, "r1")]))
        assert kind.parse_probe(out, 1, "contract")[0].state == probes.STOPPED

    asyncio.run(go())


def test_a_stop_of_a_run_never_launched_says_not_running(
        kind: Backend, host: ShHost, tmp_path: Path) -> None:
    async def go() -> None:
        await _new_run(kind, host, str(tmp_path / "w"), "r1")
        assert await kind.stop_ladder(host, str(tmp_path / "w"), "r1", 1.0, "ab" * 8,
                                      lambda _m: None) is None

    asyncio.run(go())


@pytest.mark.parametrize("module", [
    "engine", "context", "probing", "launch", "start", "refresh", "stop", "fetch_run",
    "host_sender", "local_locks"])
def test_the_engine_names_no_backend(module: str) -> None:
    """It asks the run's backend (core/backends/base.py); a branch on a name is a seam leak.
    The engine is split by operation (core/engine.py's docstring): each module is held to it."""
    import importlib

    src = Path(importlib.import_module(f"rtrain_tui.core.{module}").__file__ or "").read_text()
    for name in backends.BACKENDS:
        leaks = re.findall(rf"[\"']{name}[\"']|\bbackends\.{name}\b|\bimport {name}\b|\b{name}\.[a-z_]+\(",
                           src)
        assert not leaks, f"{module}.py names the {name} backend: {leaks}"
    assert "slurm" not in src.lower()


@pytest.mark.parametrize("recorded, found, name", [
    ("", "", backends.DEFAULT),  # older versions wrote no backend for a box run
    ("direct", "", "direct"),
    ("slurm", "", "slurm"),
    ("slurm", "found", "slurm"),
])
def test_a_records_backend_is_the_one_it_names(recorded: str, found: str, name: str) -> None:
    record = RunRecord(host="h", run_id="r", workdir="~/w", backend=recorded, origin=found)
    assert backends.backend_for(record).name == name
