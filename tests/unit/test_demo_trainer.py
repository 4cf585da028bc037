"""The demo trainer writes what a real Hugging Face Trainer run writes, so `--demo` shows curves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.metrics.metrics import parse_text
from rtrain_tui.core.runs import checkpoints
from rtrain_tui.demo.server import SAMPLES


def test_demo_log_reads_as_an_hf_run_with_a_falling_loss_and_evals(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("max_steps: 60\nstep_seconds: 0\nlogging_steps: 5\neval_steps: 20\n")
    log = tmp_path / "train.log"
    with log.open("wb") as out:  # stdout and stderr merged, as the wrapper does
        rc = subprocess.run([sys.executable, "-m", "rtrain_tui.demo.trainer", "llm",
                             str(SAMPLES / "pirate_chat.jsonl"), "--config", str(config)],
                            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=60).returncode
    assert rc == 0
    text = log.read_bytes().decode()  # read_text would turn each \r into \n
    assert "  Total optimization steps = 60\n" in text
    assert "'step'" not in text  # like real Trainer dicts: the step lives in the bar
    assert "\r 50%|█████     | 30/60 [" in text
    p = parse_text(text)
    assert [s for s, _ in p.losses] == list(range(5, 61, 5))
    first, last = p.losses[0][1], p.losses[-1][1]
    assert last < first  # it learns
    assert [s for s, _ in p.eval_losses] == [20, 40, 60]
    assert p.learning_rates[0][1] > p.learning_rates[-1][1]  # linear decay
    s = p.summary()
    assert (s.step, s.total, s.finished) == (60, 60, True)


# Runs a command and writes its peak RSS to a file. A child's ru_maxrss on Linux starts at
# its parent's peak (exec keeps the old memory's high-water mark), and pytest's grows with
# the suite (395 MB late in a run): started from this fresh, small Python, the trainer's
# peak is its own.
PEAK_OF_CHILD = """import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(rc)
"""


def test_a_300_mb_dataset_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    """Issue 15 item 30: the process stays under 200 MB (read whole, it grew to 17 GB)."""
    data = tmp_path / "big.jsonl"
    block = "".join(json.dumps({"text": f"ahoy matey, record {i} sails the seven seas: " + "arr " * 30})
                    + "\n" for i in range(4000)).encode()
    with data.open("wb") as f:
        while f.tell() < 300 << 20:
            f.write(block)
    config = tmp_path / "config.yaml"
    config.write_text("max_steps: 30\nstep_seconds: 0\nlogging_steps: 5\neval_steps: 10\n")
    peak = tmp_path / "peak_kib"
    with (tmp_path / "train.log").open("wb") as out:
        rc = subprocess.call([sys.executable, "-c", PEAK_OF_CHILD, str(peak), sys.executable, "-m",
                              "rtrain_tui.demo.trainer", "llm", str(data), "--config", str(config)],
                             stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    assert rc == 0, (tmp_path / "train.log").read_text()[-2000:]
    peak_kib = int(peak.read_text())  # KiB on Linux
    assert peak_kib < 200 * 1024, f"peak RSS {peak_kib // 1024} MB"
    p = parse_text((tmp_path / "train.log").read_bytes().decode())
    assert p.summary().finished and [s for s, _ in p.eval_losses] == [10, 20, 30]
    assert f"  Num examples = {(data.stat().st_size // len(block)) * 4000:,}\n" in \
        (tmp_path / "train.log").read_text()


def test_demo_checkpoints_are_complete_by_the_resume_rule_with_trainer_state_last(
        tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("max_steps: 45\nstep_seconds: 0\nsave_steps: 20\nlogging_steps: 5\n")
    rc = subprocess.run([sys.executable, "-m", "rtrain_tui.demo.trainer", "llm",
                         str(SAMPLES / "pirate_chat.jsonl"), "--config", str(config)],
                        capture_output=True, cwd=tmp_path, timeout=60).returncode
    assert rc == 0
    script = remote_sh.checkpoints(str(tmp_path.parent), tmp_path.name, "ck_mark")
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                         timeout=30).stdout
    assert [c.line for c in checkpoints.judge(checkpoints.parse_listing(out, "ck_mark"))] == [
        "checkpoint-40 ✓", "checkpoint-20 ✓"]
    saved = tmp_path / "checkpoint-40"
    times = {p.name: p.stat().st_mtime_ns for p in saved.iterdir()}
    assert {"adapter_model.safetensors", "training_args.bin", "optimizer.pt", "scheduler.pt",
            "rng_state.pth"} < set(times)
    assert times["trainer_state.json"] == max(times.values())
    state = json.loads((saved / "trainer_state.json").read_text())
    assert state["global_step"] == 40 and [e["step"] for e in state["log_history"]][-1] == 40


def test_the_demo_trainer_resumes_from_the_checkpoint_its_config_names(tmp_path: Path) -> None:
    """As `rtrain-tui resume` tells it (config.yaml's resume_from_checkpoint): the weights,
    the step and the log history go on from the checkpoint; the bar starts at its step."""
    def train(config_text: str) -> str:
        config = tmp_path / "config.yaml"
        config.write_text(config_text)
        with (tmp_path / "train.log").open("ab") as out:
            rc = subprocess.run([sys.executable, "-m", "rtrain_tui.demo.trainer", "llm",
                                 str(SAMPLES / "pirate_chat.jsonl"), "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=60).returncode
        assert rc == 0
        return (tmp_path / "train.log").read_bytes().decode()

    base = "max_steps: 40\nstep_seconds: 0\nsave_steps: 20\nlogging_steps: 5\n"
    first = parse_text(train(base)).losses
    with (tmp_path / "train.log").open("a") as log:
        log.write("=== attempt 2: resuming from checkpoint-20 ===\n")
    text = train(base + "resume_from_checkpoint: 'checkpoint-20'\n")
    after = text.partition("=== attempt 2: resuming from checkpoint-20 ===\n")[2]
    assert "  Continuing training from global step 20\n" in after
    assert "| 20/40 [00:00<?, ?it/s]" in after and "| 1/40 [" not in after
    resumed = parse_text(text).losses
    assert [s for s, _ in resumed] == list(range(5, 41, 5))
    assert resumed[:4] == first[:4]  # steps up to the checkpoint: attempt 1's
    assert resumed[4][1] < first[0][1]  # trained weights, not a fresh start
    state = json.loads((tmp_path / "checkpoint-40" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"]] == list(range(5, 41, 5))
    final = parse_text(after).summary()
    # Its rate counts this attempt's 20 steps, not the 20 before its checkpoint too.
    assert final.steps_per_second and final.runtime_seconds
    assert abs(final.steps_per_second * final.runtime_seconds - 20) < 1
