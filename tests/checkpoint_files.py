"""Checkpoint directories as transformers' Trainer writes them, for the tests of the
"newest complete checkpoint" rule (unit and over sshd)."""

from __future__ import annotations

import json
from pathlib import Path


def state_json(step: int, entries: int = 3) -> str:
    """trainer_state.json as transformers writes it (indent 2, sorted keys)."""
    log = [{"epoch": i / 10, "learning_rate": 1e-4, "loss": 2.0 - i / 100, "step": i}
           for i in range(1, entries + 1)]
    return json.dumps({"best_global_step": None, "epoch": 1.0, "global_step": step,
                       "log_history": log, "max_steps": 500, "save_steps": 50,
                       "trial_params": None}, indent=2, sort_keys=True) + "\n"


def save_order(ranks: int = 1) -> list[str]:
    """The files of a checkpoint in the order Trainer writes them (trainer_state.json last)."""
    rng = ["rng_state.pth"] if ranks == 1 else [f"rng_state_{k}.pth" for k in range(ranks)]
    return ["config.json", "adapter_model.safetensors", "training_args.bin", "optimizer.pt",
            "scheduler.pt", *rng, "trainer_state.json"]


def write_checkpoint(run_dir: Path, rel: str, step: int, files: list[str],
                     state: str | None = None) -> None:
    """Files as a save writes them, in `files` order; trainer_state.json gets `state`."""
    d = run_dir / rel
    d.mkdir(parents=True)
    for name in files:
        body = (state_json(step) if state is None else state) if name == "trainer_state.json" \
            else "w" * 10
        (d / name).write_text(body)
