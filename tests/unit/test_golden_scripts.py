"""The scripts that matter most, rendered with fixed sample values, equal their golden
copies in tests/golden/: a change to what a host runs is a reviewed diff of shell.

Covered: the box's wrapper (`run.sh`), Slurm's `run.sbatch` (one node, with retries, several),
and the refresh probe of each backend (the box's as a refresh sends it: new runs
listed, then the runs' states and the GPU sample).

After an intended change, rewrite the copies and commit them on their own, as with the
snapshot SVGs:

    RTRAIN_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_golden_scripts.py

then read `git diff tests/golden/`: it is exactly what hosts will run differently.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from rtrain_tui.core.backends import LaunchSpec, slurm
from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.backends.direct.backend import DirectBackend
from rtrain_tui.core.backends.slurm.backend import SlurmBackend
from rtrain_tui.core.engine import trainer_command
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.safety.template import render as render_trainer

GOLDEN = Path(__file__).parent.parent / "golden"
TOKEN = "0123456789abcdef0123456789abcdef"
TRAINER = trainer_command("{python} -m praisonai_train llm {dataset} --config {config}",
                          "~/venv/bin/python", "data set's.jsonl", 2)
# As the engine renders it for a job of several nodes: the per-node fields are Slurm's.
MULTI_NODE = render_trainer(slurm.MULTI_NODE_TRAINER, "~/venv/bin/python", "train.jsonl", 4,
                            slurm.trainer_values(2))
ENV = {"HF_HOME": "/scratch/it's here", "WANDB_MODE": "offline"}

GOLDENS: dict[str, Callable[[], str]] = {
    "run.sh": lambda: direct_sh.wrapper(TRAINER, ENV),
    # `start --retries 2 --on-stall restart` with a template that takes the checkpoint as
    # an option, and the host telling failures and stalls itself ([notify] on_host).
    "run-retries.sh": lambda: DirectBackend().launch_text(LaunchSpec(
        "r1", TOKEN, "{python} train.py --config {config} {resume:--resume_from_checkpoint}",
        "~/venv/bin/python", None, 1, ENV, retries=2, retry_base_s=30.0,
        stall_after_s=900, on_stall="restart", notify_on=("failed", "stalled"))),
    "run.sbatch": lambda: slurm.batch_script(
        "r1", TOKEN, TRAINER, ENV,
        slurm.SlurmOptions(partition="gpu", time="1-00:00:00", account="lab",
                           sbatch_args=("--constraint=a100",)), 2),
    # `start --retries 2 --on-stall restart` on one node: the box's retry loop and stall
    # watchdog inside the job.
    "run-retries.sbatch": lambda: SlurmBackend().launch_text(LaunchSpec(
        "r1", TOKEN, "{python} -m praisonai_train llm {dataset} --config {config}",
        "~/venv/bin/python", "data set's.jsonl", 1, ENV,
        options=slurm.SlurmOptions(partition="gpu"), retries=2, retry_base_s=30.0,
        stall_after_s=900, on_stall="restart")),
    # The job telling its end itself ([notify] on_host).
    "run-notify.sbatch": lambda: SlurmBackend().launch_text(LaunchSpec(
        "r1", TOKEN, "{python} -m praisonai_train llm {dataset} --config {config}",
        "~/venv/bin/python", None, 1, {}, options=slurm.SlurmOptions(partition="gpu"),
        notify_on=("failed", "completed"))),
    "run-nodes.sbatch": lambda: slurm.batch_script(
        "r1", TOKEN, MULTI_NODE, {}, slurm.SlurmOptions(nodes=2, gpus_per_node=4), 4),
    "probe-direct.sh": lambda: remote_sh.find_runs(
        ["~/.praisonai-train", "/data/runs"], [{"r1", "r0"}, set()], remote_sh.FIND_LIMIT,
        [{"r0": 1_700_000_042}])
        + direct_sh.run_states([("~/.praisonai-train", "r1"), ("/data/runs", "r-2.b")],
                               need_end=[1], gpus=True),
    "probe-slurm.sh": lambda: slurm.run_states(
        [("~/.praisonai-train", "r1"), ("/data/runs", "r2")], need_end=[1]),
}


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_script_equals_its_golden_copy(name: str) -> None:
    text = GOLDENS[name]()
    path = GOLDEN / name
    if os.environ.get("RTRAIN_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden copy {path}: see this module's docstring to write it"
    assert text == path.read_text(), (
        f"{name} differs from {path}: if the change is intended, update the copies "
        "(RTRAIN_UPDATE_GOLDEN=1, see this module's docstring) and commit them on their own")


def test_every_golden_copy_has_its_script() -> None:
    """A script dropped from GOLDENS leaves no stale copy behind."""
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(GOLDENS)
