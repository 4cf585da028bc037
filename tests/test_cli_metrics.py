"""`rtrain-tui metrics` against a real sshd, with a stand-in trainer printing real HF output."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest

from rtrain_tui.core.metrics.metrics import MetricsParser
from tests.conftest import Cli, write_config


def start_hf(cli: Cli, tmp_path: Path, workdir: str, run_id: str, **cfg: object) -> None:
    config = write_config(tmp_path / f"{run_id}.yaml", hf_style=True, **cfg)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id)
    assert r.rc == 0, r.err


def test_metrics_json_has_the_loss_curve_eval_and_final_progress(cli: Cli, tmp_path: Path, workdir: str) -> None:
    start_hf(cli, tmp_path, workdir, "hf5", steps=20, eval_steps=10, quoted=True)
    r = cli("metrics", "gpu", "hf5", "--workdir", workdir, "--json")
    assert r.rc == 0, r.err
    got = json.loads(r.out)
    loss = got["series"]["loss"]
    assert [s for s, _ in loss] == list(range(2, 21, 2))  # steps from the bar, not counted
    assert loss[0][1] == 2.8 and loss[-1][1] == 1.0
    assert got["series"]["eval_loss"] == [[10, 2.1], [20, 1.1]]
    summary = got["summary"]
    # "Writing model shards 1/1" came last: it must not be the run's progress.
    assert (summary["step"], summary["total"], summary["finished"]) == (20, 20, True)
    assert summary["eta_seconds"] == 0.0


def test_metrics_csv_and_plain_table(cli: Cli, tmp_path: Path, workdir: str) -> None:
    start_hf(cli, tmp_path, workdir, "hf4", steps=10, eval_steps=5)
    r = cli("metrics", "gpu", "hf4", "--workdir", workdir, "--csv")
    assert r.rc == 0, r.err
    table = list(csv.reader(io.StringIO(r.out)))
    assert table[0] == ["step", "loss", "eval_loss", "learning_rate", "grad_norm"]
    assert table[1] == ["2", "2.6", "", "1.6e-05", "1.25"]
    assert ["10", "1.0", "1.1", "0.0", "1.25"] in table
    plain = cli("metrics", "gpu", "hf4", "--workdir", workdir)
    assert plain.rc == 0, plain.err
    lines = plain.out.splitlines()
    assert lines[0].startswith("step 10/10 (100%) · loss 1.0000 · eval loss 1.1000")
    assert lines[1].split() == ["STEP", "LOSS", "EVAL_LOSS", "LR", "GRAD_NORM"]
    assert lines[2].split() == ["2", "2.6000", "1.600e-05", "1.2500"]


def test_metrics_reads_only_new_bytes_and_survives_a_corrupt_cache(cli: Cli, hosts, tmp_path: Path, workdir: str) -> None:
    start_hf(cli, tmp_path, workdir, "grow", steps=4, eval_steps=100)
    assert len(json.loads(cli("metrics", "gpu", "grow", "--workdir", workdir, "--json").out)["series"]["loss"]) == 2
    cache_dir = hosts.root / "xdg-cache" / "rtrain-tui" / "metrics"
    [cache] = [p for p in cache_dir.glob("grow-*.json")]
    offset = json.loads(cache.read_text())["offset"]
    log = Path(workdir) / "grow" / "train.log"
    assert offset == log.stat().st_size
    # The log grows: only the new line is read, and the old points stay.
    with log.open("a") as f:
        f.write("{'loss': 0.5, 'grad_norm': 1.0, 'learning_rate': 1e-06, 'epoch': 2.0}\n")
    loss = json.loads(cli("metrics", "gpu", "grow", "--workdir", workdir, "--json").out)["series"]["loss"]
    assert [v for _, v in loss] == [2.0, 1.0, 0.5]
    assert json.loads(cache.read_text())["offset"] == log.stat().st_size
    # Proof the cache is used: what it says wins over bytes it has already covered.
    state = json.loads(cache.read_text())
    planted = MetricsParser()
    planted.feed(b"{'loss': 9.0, 'step': 1}\n")
    state["state"]["losses"] = planted.to_state()["losses"]
    cache.write_text(json.dumps(state))
    loss = json.loads(cli("metrics", "gpu", "grow", "--workdir", workdir, "--json").out)["series"]["loss"]
    assert loss == [[1, 9.0]]
    cache.write_text("{ not json")
    r = cli("metrics", "gpu", "grow", "--workdir", workdir, "--json")
    assert r.rc == 0, r.err
    assert [v for _, v in json.loads(r.out)["series"]["loss"]] == [2.0, 1.0, 0.5]


def test_metrics_of_a_missing_run_is_one_line(cli: Cli, workdir: str) -> None:
    r = cli("metrics", "gpu", "nosuchrun", "--workdir", workdir)
    assert r.rc == 1
    assert r.err == "rtrain-tui: no run nosuchrun on gpu\n"
    bad = cli("metrics", "gpu", "../etc", "--workdir", workdir)
    assert bad.rc == 1 and len(bad.err.splitlines()) == 1


def test_status_json_says_why_a_run_died_and_status_stays_one_word(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "oom.yaml", crash="cuda_oom")
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "oom")
    assert r.rc == 1
    plain = cli("status", "gpu", "oom", "--workdir", workdir)
    assert plain.out == "failed (exit 1)\n"
    got = json.loads(cli("status", "gpu", "oom", "--workdir", workdir, "--json").out)
    assert got["state"] == "failed (exit 1)"
    assert got["reason"].startswith("CUDA out of memory: tried to allocate 2.00 GiB on GPU 0")
    # The same reason beside the word, on stderr: a person sees it, a script's word stays.
    assert plain.err == f"rtrain-tui: oom on gpu: {got['reason']}\n"


def test_status_json_names_a_missing_module_and_the_pip_command(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "mod.yaml", crash="module")
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "mod").rc == 1
    got = json.loads(cli("status", "gpu", "mod", "--workdir", workdir, "--json").out)
    assert got["reason"] == "missing Python module peft: pip install peft on gpu"


def test_python_dash_m_of_a_module_the_host_lacks_names_the_pip_command(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """The trainer's own module missing on the host (issue 15 item 28)."""
    config = write_config(tmp_path / "nomod.yaml")
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "nomod",
            "--trainer", "{python} -m no_such_trainer llm --config {config}")
    assert r.rc == 1
    got = json.loads(cli("status", "gpu", "nomod", "--workdir", workdir, "--json").out)
    assert got["reason"] == "missing Python module no_such_trainer: pip install no_such_trainer on gpu"


@pytest.mark.parametrize("crash,why", [
    ("torchrun_index", "[rank1]: IndexError: list index out of range"),  # issue 15 item 31
    ("torchrun_sigkill", "[rank1]: killed by SIGKILL, most likely the kernel's OOM killer"),
    ("glued_traceback", "ValueError: Asking to pad but the tokenizer does not have a padding token."),  # item 33
])
def test_status_json_gives_the_real_reason_under_torchrun_and_before_the_first_line(
        cli: Cli, tmp_path: Path, workdir: str, crash: str, why: str) -> None:
    config = write_config(tmp_path / f"{crash}.yaml", crash=crash)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", crash).rc == 1
    got = json.loads(cli("status", "gpu", crash, "--workdir", workdir, "--json").out)
    assert got["reason"].startswith(why)


def test_a_completed_run_has_no_reason(cli: Cli, tmp_path: Path, workdir: str) -> None:
    start_hf(cli, tmp_path, workdir, "fine", steps=2)
    got = json.loads(cli("status", "gpu", "fine", "--workdir", workdir, "--json").out)
    assert (got["state"], got["reason"]) == ("completed", "")


def test_a_stopped_run_shows_no_live_eta_or_rate(cli: Cli, tmp_path: Path, workdir: str) -> None:
    """Issue 15 item 21: `metrics` (plain and --json) of a run stopped mid-way."""
    config = write_config(tmp_path / "halt.yaml", hf_style=True, steps=2000, step_seconds=0.05)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "halt",
               "--no-follow").rc == 0
    deadline = time.monotonic() + 30
    while True:  # until the bar has given an ETA and a rate
        live = json.loads(cli("metrics", "gpu", "halt", "--workdir", workdir, "--json").out)
        if live["summary"]["eta_seconds"] is not None and live["summary"]["step"]:
            break
        assert time.monotonic() < deadline, live
    assert live["state"] == "running" and live["summary"]["steps_per_second"] == 4.0
    assert cli("stop", "gpu", "halt", "--workdir", workdir).rc == 0
    got = json.loads(cli("metrics", "gpu", "halt", "--workdir", workdir, "--json").out)
    assert got["state"] == "stopped" and got["summary"]["step"] >= live["summary"]["step"]
    assert (got["summary"]["eta_seconds"], got["summary"]["steps_per_second"]) == (None, None)
    plain = cli("metrics", "gpu", "halt", "--workdir", workdir).out.splitlines()[0]
    assert plain.startswith("step ") and "ETA" not in plain and "steps/s" not in plain
