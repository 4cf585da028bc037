"""sync_metrics over a real sshd's SFTP: train.log and metrics.jsonl, read incrementally."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex
from rtrain_tui.core.metrics.metrics import MetricsParser
from rtrain_tui.core.metrics.metrics_cache import cache_path
from rtrain_tui.core.metrics.metrics_jsonl import MAX_LINE
from rtrain_tui.core.metrics.metrics_sync import READ_SIZE, sync_metrics
from tests.conftest import Cli
from tests.sshd import SshHosts

# The log of a run that also writes metrics.jsonl: its bar, header and dicts carry the
# same steps as the jsonl below (the values differ by 0.01 to tell the sources apart).
LOG = ("loading model\n  Total optimization steps = 40\n"
       "\r 25%|##  | 10/40 [00:10<00:30,  1.00it/s]{'loss': 2.5, 'grad_norm': 0.7, 'learning_rate': 1e-05, 'epoch': 0.25}\n"
       "\r 50%|### | 20/40 [00:20<00:20,  1.00it/s]{'loss': 2.25, 'grad_norm': 0.6, 'learning_rate': 9e-06, 'epoch': 0.5}\n"
       "{'eval_loss': 2.4, 'epoch': 0.5}\n")


def lines(*records: object) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


JSONL = lines({"step": 10, "loss": 2.51, "learning_rate": 1e-05, "epoch": 0.25},
              {"step": 20, "loss": 2.26, "learning_rate": 9e-06, "epoch": 0.5},
              {"step": 20, "eval_loss": 2.41})


class Run:
    """A run directory on the 'host' (the same machine) and its metrics cache."""

    def __init__(self, hosts: SshHosts, tmp_path: Path, run_id: str = "run") -> None:
        self.hosts, self.tmp = hosts, tmp_path
        self.workdir = str(tmp_path / "work")
        self.run_id = run_id
        self.dir = tmp_path / "work" / run_id
        self.dir.mkdir(parents=True)
        self.log = self.dir / "train.log"
        self.jsonl = self.dir / "metrics.jsonl"
        self.cache_dir = tmp_path / "cache"
        self.log.write_text("loading model\n")

    def sync(self) -> MetricsParser:
        engine = Engine(ConnectionPool(self.hosts.ssh_config), RunIndex(self.tmp / "runs.toml"))

        async def go() -> MetricsParser:
            try:
                return await sync_metrics(engine, "gpu", self.workdir, self.run_id, self.cache_dir)
            finally:
                await engine.close()

        return asyncio.run(go())

    @property
    def cache(self) -> Path:
        return cache_path(self.cache_dir, "gpu", self.workdir, self.run_id)

    def offsets(self) -> tuple[int, int]:
        data = json.loads(self.cache.read_text())
        return data["offset"], data["jsonl_offset"]


def test_jsonl_only_run_has_its_curves_and_progress(hosts: SshHosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    run.jsonl.write_bytes(lines({"max_steps": 40}, {"step": 10, "loss": 2.0, "grad_norm": 0.9},
                                {"step": 20, "loss": 1.5, "grad_norm": 0.8}, {"step": 20, "eval_loss": 1.7}))
    p = run.sync()
    assert p.losses == [(10, 2.0), (20, 1.5)] and p.grad_norms == [(10, 0.9), (20, 0.8)]
    assert p.eval_losses == [(20, 1.7)] and p.learning_rates == []
    s = p.summary()
    assert (s.step, s.total, s.loss, s.eval_loss) == (20, 40, 1.5, 1.7)
    assert run.offsets() == (run.log.stat().st_size, run.jsonl.stat().st_size)


def test_log_and_jsonl_with_the_same_steps_give_each_point_once(hosts: SshHosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    run.log.write_text(LOG)
    run.jsonl.write_bytes(JSONL)
    p = run.sync()
    assert p.losses == [(10, 2.51), (20, 2.26)]
    assert p.eval_losses == [(20, 2.41)]
    assert p.learning_rates == [(10, 1e-05), (20, 9e-06)]
    assert p.grad_norms == [(10, 0.7), (20, 0.6)]  # only the log has them
    s = p.summary()
    assert (s.step, s.total, s.eta_seconds) == (20, 40, 20)  # progress from the log's bar
    # A second sync with nothing new adds nothing either.
    again = run.sync()
    assert again.losses == p.losses and again.eval_losses == p.eval_losses


def test_cli_metrics_csv_has_one_row_per_step_with_a_jsonl(
        cli: Cli, hosts: SshHosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    run.log.write_text(LOG)
    run.jsonl.write_bytes(JSONL)
    r = cli("metrics", "gpu", "run", "--workdir", run.workdir, "--csv")
    assert r.rc == 0, r.err
    assert list(csv.reader(io.StringIO(r.out)))[1:] == [
        ["10", "2.51", "", "1e-05", "0.7"], ["20", "2.26", "2.41", "9e-06", "0.6"]]


def test_a_growing_jsonl_is_read_from_its_offset_only(hosts: SshHosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    run.jsonl.write_bytes(lines({"step": 1, "loss": 3.0}))
    assert run.sync().losses == [(1, 3.0)]
    first = run.jsonl.stat().st_size
    assert run.offsets()[1] == first
    # Bytes already read are not read again: change them in place (same length) ...
    run.jsonl.write_bytes(lines({"step": 1, "loss": 9.0}) + lines({"step": 2, "loss": 2.0}))
    p = run.sync()
    assert p.losses == [(1, 3.0), (2, 2.0)]  # ... and the old value stays
    assert run.offsets()[1] == run.jsonl.stat().st_size > first


def test_a_resumed_runs_curves_go_on_from_its_checkpoint_in_both_sources(
        hosts: SshHosts, tmp_path: Path) -> None:
    """Attempt 1 got to step 4 past checkpoint-2 and died; attempt 2 goes on from step 3,
    in train.log after its separator and in the same metrics.jsonl: read across two
    syncs (the cache between), each step is shown once, the new attempt's."""
    run = Run(hosts, tmp_path)
    crashed = "".join(f"{{'loss': {2.0 / n:.4f}, 'step': {n}}}\n" for n in range(1, 5))
    run.log.write_text(crashed)
    run.jsonl.write_bytes(lines(*({"step": n, "loss": round(2.0 / n, 4)} for n in range(1, 5))))
    assert [s for s, _ in run.sync().losses] == [1, 2, 3, 4]
    with run.log.open("a") as log:
        log.write("=== attempt 2: resuming from outputs/checkpoint-2 ===\n{'loss': 0.6, 'step': 3}\n")
    with run.jsonl.open("ab") as jsonl:
        jsonl.write(lines({"step": 3, "loss": 0.6}))
    p = run.sync()
    assert p.losses == [(1, 2.0), (2, 1.0), (3, 0.6)]
    assert p.log_losses == [(1, 2.0), (2, 1.0), (3, 0.6)]
    assert p.summary().step == 3


def test_a_jsonl_line_still_being_written_waits_for_its_newline(hosts: SshHosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    done = lines({"step": 1, "loss": 3.0})
    run.jsonl.write_bytes(done + b'{"step": 2, "lo')
    assert run.sync().losses == [(1, 3.0)]
    assert run.offsets()[1] == len(done)
    with run.jsonl.open("ab") as f:
        f.write(b'ss": 2.5}\n')
    assert run.sync().losses == [(1, 3.0), (2, 2.5)]
    assert run.offsets()[1] == run.jsonl.stat().st_size


def test_a_replaced_shorter_jsonl_starts_over_and_the_log_stays(hosts: SshHosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    run.log.write_text(LOG)
    run.jsonl.write_bytes(JSONL)
    assert run.sync().losses == [(10, 2.51), (20, 2.26)]
    run.jsonl.write_bytes(lines({"step": 5, "eval_loss": 3.0}))
    p = run.sync()
    assert p.eval_losses == [(5, 3.0)]
    assert p.losses == [(10, 2.5), (20, 2.25)]  # the new jsonl has no loss: the log's
    assert run.offsets() == (run.log.stat().st_size, run.jsonl.stat().st_size)
    run.jsonl.unlink()  # gone: its points go with it
    assert run.sync().eval_losses == [(20, 2.4)]
    assert run.offsets()[1] == 0


def test_an_old_cache_without_the_jsonl_offset_is_used_and_the_jsonl_read_from_zero(
        hosts: SshHosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    run.log.write_text(LOG)
    run.sync()
    # The cache as the release before metrics.jsonl wrote it, with a planted point that
    # the log does not have: proof the file is read, not rebuilt.
    data = json.loads(run.cache.read_text())
    del data["jsonl_offset"], data["state"]["jsonl"]
    planted = MetricsParser()
    planted.feed(b"{'loss': 9.0, 'step': 1}\n")
    data["state"]["losses"] = planted.to_state()["losses"]
    run.cache.write_text(json.dumps(data))
    run.jsonl.write_bytes(lines({"step": 20, "eval_loss": 2.41}))
    p = run.sync()
    assert p.losses == [(1, 9.0)]
    assert p.eval_losses == [(20, 2.41)]
    assert run.offsets() == (run.log.stat().st_size, run.jsonl.stat().st_size)


@pytest.mark.parametrize("junk", ['{"offset": 0, "jsonl_offset": -5, "state": {}}', "{ not json"])
def test_a_corrupt_cache_is_rebuilt(hosts: SshHosts, tmp_path: Path, junk: str) -> None:
    run = Run(hosts, tmp_path)
    run.log.write_text(LOG)
    run.jsonl.write_bytes(JSONL)
    run.cache.parent.mkdir(parents=True)
    run.cache.write_text(junk)
    p = run.sync()
    assert p.losses == [(10, 2.51), (20, 2.26)] and p.log_losses == [(10, 2.5), (20, 2.25)]
    assert run.offsets() == (run.log.stat().st_size, run.jsonl.stat().st_size)


def test_hostile_jsonl_lines_are_skipped(hosts: SshHosts, tmp_path: Path) -> None:
    run = Run(hosts, tmp_path)
    huge = b'{"step": 2, "loss": 1.0, "pad": "' + b"x" * (READ_SIZE + MAX_LINE) + b'"}\n'
    run.jsonl.write_bytes(lines({"step": 1, "loss": 3.0}) + huge
                          + b"not json\n[1, 2]\n\xff\xfe\n" + b'{"step": "three", "loss": 1}\n'
                          + b'{"step": 4, "loss": "low", "grad_norm": NaN}\n'
                          + lines({"step": 5, "loss": 0.5}))
    p = run.sync()
    assert p.losses == [(1, 3.0), (5, 0.5)]
    assert len(p.grad_norms) == 1 and p.grad_norms[0][0] == 4 and p.grad_norms[0][1] != p.grad_norms[0][1]
    assert run.offsets()[1] == run.jsonl.stat().st_size
    # A huge line that has not ended yet is skipped as it comes, not read again each sync.
    with run.jsonl.open("ab") as f:
        f.write(b'{"step": 6, "pad": "' + b"y" * (MAX_LINE + 10))
    run.sync()
    assert run.offsets()[1] == run.jsonl.stat().st_size
    with run.jsonl.open("ab") as f:
        f.write(b'"}\n' + lines({"step": 7, "loss": 0.25}))
    assert run.sync().losses == [(1, 3.0), (5, 0.5), (7, 0.25)]
