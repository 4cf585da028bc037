"""The stand-in's checkpoints, saved as transformers' Trainer saves them.

`save(step, cfg, history)` writes `<output_dir>/checkpoint-N/` (config `output_dir`,
default `outputs`, as praisonai-train's) in the Trainer's order: config, weights,
training args, optimizer, scheduler, each rank's RNG state (`rng_state.pth` for one
process, `rng_state_K.pth` for each of `ranks`), and `trainer_state.json` last with
`global_step` N (indent 2, sorted keys). With `die_mid_save: N` the save of step N stops
after the optimizer and the process is SIGKILLed there, as a crash mid-save leaves it;
an attempt that resumes (`resume_from_checkpoint`) saves it whole: the crash was once.
"""

import json
import os
import signal


def save(step, cfg, history):
    directory = os.path.join(cfg.get("output_dir", "outputs"), f"checkpoint-{step}")
    os.makedirs(directory, exist_ok=True)
    ranks = int(cfg.get("ranks", 1))
    rng = ["rng_state.pth"] if ranks == 1 else [f"rng_state_{k}.pth" for k in range(ranks)]
    files = ["adapter_config.json", "adapter_model.safetensors", "training_args.bin",
             "optimizer.pt", "scheduler.pt", *rng]
    for name in files:
        with open(os.path.join(directory, name), "wb") as f:
            f.write(os.urandom(64))
        if (name == "optimizer.pt" and cfg.get("die_mid_save") == str(step)
                and not cfg.get("resume_from_checkpoint")):
            print(f"killed while saving {directory}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    state = {"epoch": step / int(cfg.get("steps", 5)), "global_step": step,
             "log_history": history, "max_steps": int(cfg.get("steps", 5)),
             "save_steps": int(cfg["save_steps"])}
    with open(os.path.join(directory, "trainer_state.json"), "w") as f:
        f.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
    print(f"Saving model checkpoint to {directory}", flush=True)
