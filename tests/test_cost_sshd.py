"""What a run cost, told by `status --json` against the real sshd: a resumed run's
attempts are read from the host (attempts.jsonl) and summed, to the cent (issue 19)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from rtrain_tui.core.runs.cost import run_cost
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunIndex, parse_time
from tests.conftest import Cli, write_config
from tests.sshd import SshHosts, gpu_state
from tests.test_cli_runs import wait_state
from tests.test_queue_sshd import BUSY, IDLE, gpus, read, start_queued  # noqa: F401 (gpus: a fixture)
from tests.test_resume_sshd import wait_for


@pytest.fixture(autouse=True)
def _config_toml_removed_after(hosts: SshHosts) -> Iterator[None]:
    """config.toml is written in the test hosts' HOME, which every test of this worker
    shares: left there, its URLs and prices would reach the tests that run after."""
    yield
    (hosts.home / ".config" / "rtrain-tui" / "config.toml").unlink(missing_ok=True)


def priced(cli: Cli, line: str) -> None:
    config = cli.hosts.home / ".config" / "rtrain-tui" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"[hosts.gpu]\n{line}\n", encoding="utf-8")


def test_status_json_sums_a_resumed_runs_attempts_to_the_cent(cli: Cli, tmp_path: Path,
                                                              workdir: str) -> None:
    priced(cli, "price_per_hour = 3600")  # a cent per 1/100 s: any second left out shows
    run = Path(workdir) / "r1"
    # Steps slow enough that each attempt outlasts the host's whole-second end times.
    config = write_config(tmp_path / "r1.yaml", steps=6, save_steps=2, die_mid_save=4,
                          step_seconds=0.4)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "r1",
               "--no-follow", "--gpus", "0").rc == 0
    wait_state(cli, "r1", workdir, "failed (exit 137)")
    assert cli("resume", "gpu", "r1", "--workdir", workdir).rc == 0
    wait_state(cli, "r1", workdir, "completed")

    got = json.loads(cli("status", "gpu", "r1", "--workdir", workdir, "--json").out)
    # The elapsed times as the host and the index recorded them: attempt 1 from the run's
    # start to its end, attempt 2 from its start to the `status` file (the gap between is free).
    one, two = (json.loads(line) for line in (run / ".rtrain" / "attempts.jsonl").read_text().splitlines()
                if '"ended"' in line or '"checkpoint"' in line)
    started = parse_time(RunIndex(cli.index).get("gpu", "r1").started_at)
    assert started is not None
    first = Decimal(one["ended"]) - Decimal((started - datetime.fromtimestamp(0, UTC))
                                            .total_seconds()).quantize(Decimal("0.000001"))
    second = Decimal(int(os.stat(run / "status").st_mtime) - two["started"])
    assert first > 0 and second > 0
    want = (first + second).quantize(Decimal("0.01"), ROUND_HALF_UP)
    assert Decimal(str(got["cost"])) == want and got["cost_at_end"] == got["cost"]
    assert got["currency"] == "$" and got["attempt"] == 2
    # The index keeps attempt 1's seconds, so `runs` and `costs` leave the gap out too.
    record = RunIndex(cli.index).get("gpu", "r1")
    assert record is not None and record.attempt_started_at
    assert abs(Decimal(str(record.earlier_s)) - first) < Decimal("0.001")


def test_status_json_projects_a_running_runs_cost_from_its_eta(cli: Cli, tmp_path: Path,
                                                               workdir: str) -> None:
    priced(cli, 'price_per_gpu_hour = 360\ncurrency = "€"')  # 10 cents a second on 1 GPU
    # Held before step 5: its bar says 4/59 with 00:55 left until the hold file appears.
    hold = tmp_path / "go"
    config = write_config(tmp_path / "c.yaml", hf_style=True, steps=59, step_seconds=0.01,
                          hold_at=5, hold_file=str(hold))
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "long",
               "--no-follow", "--gpus", "1").rc == 0

    def projected() -> dict[str, object] | None:
        got = json.loads(cli("status", "gpu", "long", "--workdir", workdir, "--json").out)
        return got if got["state"] == "running" and got["cost_at_end"] is not None else None

    wait_for("a projection", lambda: projected() is not None)
    got = projected()
    hold.touch()
    assert got is not None and got["currency"] == "€"
    assert Decimal(str(got["cost_at_end"])) - Decimal(str(got["cost"])) == Decimal("5.50")
    listed = cli("runs").out.splitlines()
    assert listed[0].split()[-1] == "COST" and listed[1].split()[-1].startswith("€")


def test_a_queued_runs_wait_for_gpus_costs_nothing(cli: Cli, tmp_path: Path, workdir: str,
                                                    gpus: Callable[[str], None]) -> None:  # noqa: F811
    """`start --queue` on a busy box: the wrapper records when the run got its GPUs, and
    the run costs from then, not from its start."""
    priced(cli, "price_per_gpu_hour = 3600")  # a dollar a second on its one GPU
    gpus(BUSY)
    start_queued(cli, write_config(tmp_path / "q.yaml", steps=3, step_seconds=0.3), workdir, "q")
    sampled = gpu_state(cli.hosts.remote_homes["gpu"]) / "sampled"  # the box's queue
    wait_for("its place in the queue", lambda: Path(workdir, "q", "queued").exists())
    seen = {read(sampled)}
    # The host looked for free GPUs twice more: the run has waited at least a second.
    wait_for("two more samples", lambda: seen.add(read(sampled)) or len(seen) >= 3)
    queued = json.loads(cli("status", "gpu", "q", "--workdir", workdir, "--json").out)
    assert queued["state"] == "queued" and queued["cost"] == 0.0
    gpus(IDLE)
    wait_state(cli, "q", workdir, "completed")

    got = json.loads(cli("status", "gpu", "q", "--workdir", workdir, "--json").out)
    launched = parse_time(got["attempts"][0]["launched"])
    started = parse_time(RunIndex(cli.index).get("gpu", "q").started_at)
    assert launched is not None and started is not None and launched - started >= timedelta(seconds=1)
    ended = int(os.stat(Path(workdir, "q", "status")).st_mtime)
    assert Decimal(str(got["cost"])) == Decimal(ended - int(launched.timestamp()))
    # A refresh keeps the launch in the index: `runs` and `costs`, which ask no host,
    # leave the wait out too, and agree with `status --json` to the cent.
    assert cli("runs", "--refresh").rc == 0
    record = RunIndex(cli.index).get("gpu", "q")
    assert record is not None and parse_time(record.running_at) == launched
    listed = [r for r in json.loads(cli("runs", "--json").out) if r["run_id"] == "q"]
    assert [r["cost"] for r in listed] == [got["cost"]]
    spent = json.loads(cli("costs", "--by", "run", "--json").out)["rows"]
    assert [r["cost"] for r in spent if r["run"] == "gpu/q"] == [got["cost"]]


def one_figure(cli: Cli, run_id: str, workdir: str) -> Decimal:
    """The run's cost as `status --json`, `runs`, `costs --by host` and `costs --by run`
    say it (the only run in the index): one figure, or the test fails."""
    said = json.loads(cli("status", "gpu", run_id, "--workdir", workdir, "--json").out)["cost"]
    listed = [r["cost"] for r in json.loads(cli("runs", "--json").out) if r["run_id"] == run_id]
    by_host = sum(r["cost"] for r in json.loads(cli("costs", "--by", "host", "--json").out)["rows"])
    by_run = [r["cost"] for r in json.loads(cli("costs", "--by", "run", "--json").out)["rows"]]
    assert (said, listed, by_host, by_run) == (said, [said], said, [said])
    return Decimal(str(said))


def test_a_completed_runs_cost_is_one_figure_in_every_command_and_never_grows(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """R: a completed run read $0.02 in `status` and $0.08 in `runs` (the index billed it
    to when a look saw it end, `status` to the host's end), and kept growing."""
    priced(cli, "price_per_hour = 3600")  # a cent per 1/100 s
    config = write_config(tmp_path / "r.yaml", steps=4, step_seconds=0.3)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "done",
               "--no-follow", "--gpus", "0").rc == 0
    wait_for("its end", lambda: Path(workdir, "done", "status").exists())
    time.sleep(1.5)  # seen well after it ended: a bill to "when we saw it" would show it
    spent = one_figure(cli, "done", workdir)
    # Billed from its start to the host's end time, which the index now keeps...
    record = RunIndex(cli.index).get("gpu", "done")
    assert record is not None and record.state == "completed"
    ended = datetime.fromtimestamp(int(os.stat(Path(workdir, "done", "status")).st_mtime), UTC)
    started = parse_time(record.started_at)
    assert parse_time(record.ended_at) == ended and started is not None
    want = Decimal(str((ended - started).total_seconds())).quantize(Decimal("0.01"), ROUND_HALF_UP)
    assert spent == want
    # ...so a minute (or a year) later every face still says it: nothing bills to "now".
    price = Price(Decimal(3600))
    for later in (timedelta(minutes=1), timedelta(days=365)):
        got = run_cost(record, price, datetime.now(UTC) + later)
        assert got is not None and got.spent == spent
    assert one_figure(cli, "done", workdir) == spent


def test_resuming_a_queued_run_does_not_bill_its_wait_for_gpus(
        cli: Cli, tmp_path: Path, workdir: str, gpus: Callable[[str], None]) -> None:  # noqa: F811
    """R08: a `--queue` run that waited for GPUs, failed and was resumed: the index's
    earlier attempt was billed from its start, its wait included (`runs`, `costs`)."""
    priced(cli, "price_per_gpu_hour = 3600")  # a dollar a second on its one GPU
    gpus(BUSY)
    config = write_config(tmp_path / "q.yaml", steps=6, save_steps=2, die_mid_save=4,
                          step_seconds=0.4)
    start_queued(cli, config, workdir, "rq")
    sampled = gpu_state(cli.hosts.remote_homes["gpu"]) / "sampled"  # the box's queue
    wait_for("its place in the queue", lambda: Path(workdir, "rq", "queued").exists())
    seen = {read(sampled)}
    wait_for("three more samples", lambda: seen.add(read(sampled)) or len(seen) >= 4)
    gpus(IDLE)
    wait_state(cli, "rq", workdir, "failed (exit 137)")
    assert cli("resume", "gpu", "rq", "--workdir", workdir).rc == 0
    wait_state(cli, "rq", workdir, "completed")

    spent = one_figure(cli, "rq", workdir)
    lines = [json.loads(x) for x in Path(workdir, "rq", ".rtrain", "attempts.jsonl").read_text().splitlines()]
    first = {k: v for x in lines if x["attempt"] == 1 for k, v in x.items()}
    second = {k: v for x in lines if x["attempt"] == 2 for k, v in x.items()}
    started = parse_time(RunIndex(cli.index).get("gpu", "rq").started_at)
    assert started is not None and first["launched"] - started.timestamp() >= 2  # it waited
    end = int(os.stat(Path(workdir, "rq", "status")).st_mtime)
    ran = (first["ended"] - first["launched"]) + (end - second.get("launched", second["started"]))
    assert spent == Decimal(ran)
