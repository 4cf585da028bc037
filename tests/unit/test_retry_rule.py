"""Retry by itself (issue 18): the host's decision (core/logs/retry_rule.py) is the
client's rules, run by the host's Python from the shipped zip."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtrain_tui.core import backends, host
from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.host import unattended
from rtrain_tui.core.logs import retry_rule
from rtrain_tui.core.logs.reasons import repeat_cannot_fix, why_it_ended
from rtrain_tui.core.runs import checkpoints
from tests.checkpoint_files import save_order, write_checkpoint

NCCL = ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1325, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600038 milliseconds before timing out.")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total"
MODULE = ["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'peft'"]


def steps(*numbers: int) -> str:
    return "".join(f"{{'loss': 1.0, 'step': {n}, 'epoch': 0.1}}\n" for n in numbers)


def listing(run: Path) -> str:
    """host/checkpoints.sh's real output for `run` (the retry loop pipes the same)."""
    script = host.assign(rd=str(run), mk="MK") + host.text("checkpoints.sh")
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout


def test_a_transient_failure_is_retried_after_base_times_attempt_from_the_newest_complete_checkpoint(
        tmp_path: Path) -> None:
    write_checkpoint(tmp_path, "outputs/checkpoint-2", 2, save_order())
    write_checkpoint(tmp_path, "outputs/checkpoint-4", 4, save_order()[:-1])  # cut off mid-save
    found = checkpoints.parse_listing(listing(tmp_path), "MK")
    v = retry_rule.decide(134, steps(1, 2, 3, 4) + NCCL + "\n", found, 1, 3, 30.0, None)
    assert (v.go, v.wait_s, v.checkpoint, v.step) == (True, 60.0, "outputs/checkpoint-2", 4)
    assert v.why == ("retrying in 60 s after NCCL timeout: ALLREDUCE collective did not finish "
                     "after 600 s (attempt 2 of 3)")
    assert v.reason == why_it_ended("failed", 134, False, [NCCL])


def test_no_checkpoint_means_from_the_start_and_the_last_attempt_gives_up() -> None:
    v = retry_rule.decide(1, NCCL, [], 1, 3, 30.0, None)
    assert (v.go, v.checkpoint) == (True, "")
    v = retry_rule.decide(1, NCCL, [], 3, 3, 30.0, None)
    assert not v.go and v.why.endswith("(gave up after 3 attempts)")


@pytest.mark.parametrize(("code", "tail", "why"), [
    (1, "\n".join(MODULE), "repeating cannot fix it"),
    (1, "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.jsonl'",
     "repeating cannot fix it"),
    (1, "OSError: org/nope is not a local folder and is not a valid model identifier listed",
     "repeating cannot fix it"),
    (2, "praisonai_train: dataset must come before --config", "a usage error (exit 2)"),
])
def test_what_repeating_cannot_fix_is_not_retried(code: int, tail: str, why: str) -> None:
    v = retry_rule.decide(code, tail, [], 1, 5, 30.0, None)
    assert not v.go and v.why.endswith(f"(not retried: {why})")


def test_cuda_oom_is_retried_once_but_not_again_at_the_same_step() -> None:
    first = retry_rule.decide(1, steps(7) + OOM, [], 1, 5, 1.0, None)
    assert first.go and first.step == 7
    before = {"attempt": 1, "reason": first.reason, "step": 7}
    again = retry_rule.decide(1, "=== attempt 2: restarting from the start ===\n" + steps(7) + OOM,
                              [], 2, 5, 1.0, before)
    assert not again.go and again.why.endswith("(not retried: out of memory again at step 7)")
    later = retry_rule.decide(1, steps(9) + OOM, [], 2, 5, 1.0, before)
    assert later.go
    assert repeat_cannot_fix("NCCL error", 1, "NCCL error", 7, 7) == ""


def test_only_the_last_attempts_lines_decide() -> None:
    tail = "\n".join(MODULE) + "\n=== attempt 2: resuming from outputs/checkpoint-2 ===\n" + NCCL
    assert retry_rule.decide(134, tail, [], 2, 3, 0.0, None).go


def test_the_shipped_zip_runs_under_an_isolated_python_and_agrees_with_the_client(
        tmp_path: Path) -> None:
    """The zip holds every module the rule imports (`python -I -S`: no rtrain_tui installed,
    not even as this checkout's editable install),
    and its verdict on a run dir is the in-process one."""
    write_checkpoint(tmp_path, "outputs/checkpoint-2", 2, save_order())
    (tmp_path / "train.log").write_text(steps(1, 2, 3) + NCCL + "\n")
    (tmp_path / unattended.RETRY_PROGRAM).write_bytes(unattended.retry_program())
    before = int(time.time())
    out = subprocess.run([sys.executable, "-I", "-S", unattended.RETRY_PROGRAM, "134", "1", "3", "0.5", "MK"],
                         input=listing(tmp_path), capture_output=True, text=True, cwd=tmp_path,
                         check=True).stdout
    said = subprocess.run(["sh", "-c", out + 'printf "%s|%s|%s|%s\\n" "$rt_go" "$rt_wait" "$rt_ck" "$rt_why"; '
                           'printf "%s\\n%s\\n" "$rt_sep" "$rt_rec"'],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    found = checkpoints.parse_listing(listing(tmp_path), "MK")
    v = retry_rule.decide(134, (tmp_path / "train.log").read_text(), found, 1, 3, 0.5, None)
    assert said[0] == f"1|1|outputs/checkpoint-2|{v.why}"
    assert said[1] == "=== attempt 2: resuming from outputs/checkpoint-2 ==="
    record = json.loads(said[2])
    # When it ended, so the wait before the next attempt costs nothing (core/runs/cost.py).
    assert before <= record.pop("ended") <= time.time()
    assert record == {"attempt": 1, "exit": 134, "state": "failed (exit 134)",
                      "reason": v.reason, "step": 3, "retried": True}


def test_retries_on_slurm_are_for_one_node_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from rtrain_tui.core.backends.slurm import SlurmOptions

    backends.get("direct").check_retries(3)
    backends.get("slurm").check_retries(1, "warn", SlurmOptions())
    with pytest.raises(ValidationError) as caught:
        backends.get("slurm").check_retries(1, "warn", SlurmOptions(nodes=2))
    assert str(caught.value) == (
        "--retries works in a job of one node, not 2: leave out --retries (and config.toml's "
        "`retries`) and use `rtrain-tui resume HOST RUN` after a failure.")
    backends.get("slurm").check_retries(0, "warn", SlurmOptions(nodes=2))
    backends.get("slurm").check_retries(1, "restart", SlurmOptions())
    with pytest.raises(ValidationError) as caught:
        backends.get("slurm").check_retries(0, "stop", SlurmOptions(nodes=3))
    assert str(caught.value) == (
        "--on-stall stop works in a job of one node, not 3: leave out --on-stall (a stall is "
        "still said) and end a stalled job with `rtrain-tui stop`.")
    monkeypatch.setenv(retry_rule.BASE_ENV, "0.5")
    assert retry_rule.base_seconds() == 0.5
    assert retry_rule.base_seconds({retry_rule.BASE_ENV: "-1"}) == retry_rule.DEFAULT_BASE_S
    assert retry_rule.base_seconds({}) == 30.0


def test_config_toml_retries_per_host(tmp_path: Path) -> None:
    from rtrain_tui.core.runs import hostconfig

    path = tmp_path / "config.toml"
    path.write_text("[hosts.gpu]\nretries = 2\n")
    assert hostconfig.load(path).for_host("gpu").retries == 2
    assert hostconfig.load(path).for_host("other").retries == 0
    path.write_text("[hosts.gpu]\nretries = 99\n")
    with pytest.raises(ValidationError, match=r"\[hosts.gpu\]: --retries must be 0 to 20, not 99"):
        hostconfig.load(path)


def test_a_stall_is_worded_once_for_the_row_the_probe_and_status() -> None:
    from rtrain_tui.core.host_view import stall_cell
    from rtrain_tui.core.runs import probes

    out = "0\texists=1\tpid=5\talive=1\tcode=\tstop=0\tstopped=0\tlaunched=1\tstalled=1020\n"
    p = probes.parse_run_states(out, 1)[0]
    assert (p.state, p.stalled_for, p.reason) == ("running", 1020, "stalled: no output for 17m")
    assert probes.stall_reason(45) == "stalled: no output for 45s"
    assert probes.stall_reason(None, 720) == "GPUs idle for 12m"
    assert probes.stall_reason(61, 720) == "stalled: no output for 1m"  # the log's first
    idle = out.replace("stalled=1020", "gpus_idle=720")
    assert probes.parse_run_states(idle, 1)[0].reason == "GPUs idle for 12m"
    assert stall_cell(p.reason, "step 40/100") == "⚠ stalled: no output for 17m · step 40/100"
    dead = out.replace("alive=1", "alive=0")
    assert probes.parse_run_states(dead, 1)[0].stalled_for is None


def test_stall_settings(tmp_path: Path) -> None:
    from rtrain_tui.core.runs import hostconfig
    from rtrain_tui.core.safety import validate

    assert validate.parse_duration("20m", "--stall-after") == 1200
    assert validate.parse_duration("0", "--stall-after") == 0
    with pytest.raises(ValidationError, match="is not a duration"):
        validate.parse_duration("20 minutes", "--stall-after")
    path = tmp_path / "config.toml"
    path.write_text('[hosts.gpu]\nstall_after = "20m"\n')
    assert hostconfig.load(path).for_host("gpu").stall_after_s == 1200
    assert hostconfig.load(path).for_host("other").stall_after_s == 900
    with pytest.raises(ValidationError, match="restart needs --retries"):
        validate.check_on_stall("restart", 0)
    assert retry_rule.decide(143, "", [], 1, 2, 0.0, None, stalled="stalled: no output for 17m").go
