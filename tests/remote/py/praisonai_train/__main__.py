"""Stand-in trainer: `python -m praisonai_train llm [DATASET] --config config.yaml`.

It checks the argv shape the real trainer demands, then behaves as config.yaml says
(flat `key: value` lines): `steps`, `step_seconds`, `exit_code`, `ignore_term` (keep
running after SIGTERM), `children` (spawn that many sleeping children in its group),
`progress_bar` (write \\r-style progress), `bad_utf8` (write an invalid byte),
`hostile_escapes` (write terminal escapes a hostile trainer could print: see HOSTILE),
`say` (print that text as one line before the steps), `term_exit` (on SIGTERM print a
line and exit with that code, as torchrun and Lightning answer a TERM with exit 1; after
`term_seconds` seconds, as a trainer saving its checkpoint first takes), `fill_disk` (save a checkpoint
until the disk is full, then log a line the full disk cuts short, and exit 1),
`save_steps` (save `outputs/checkpoint-N/` every that many steps as transformers does;
with `output_dir`, `ranks` and `die_mid_save`: see checkpoint.py), `resume_from_checkpoint`
(a checkpoint's path: go on from its `global_step`, logging it as transformers does),
`crash_at` (at that step die as `crash` names, see hf_style.CRASHES; with `crash_once:
true` only the first time: a file `crashed-at-N` in the run dir remembers it), `hang_at`
(at that step print nothing more and sleep, as an NCCL deadlock does; with `hang_once:
true` only the first time), `scribble` (write an `attempts.jsonl` and a `launch.json` of
its own in its working directory, as any trainer may).
It logs Hugging Face style lines, writes lora_model/ and exits with `exit_code`.
"""

import os
import signal
import subprocess
import sys
import time

# What a hostile (or just careless) trainer can print: each would act on the user's
# terminal if shown raw. The tests look for every one of these in tail's output.
HOSTILE = [
    "title \x1b]0;PWNED-TITLE-0\x07 osc0",
    "title \x1b]2;PWNED-TITLE-2\x1b\\ osc2",
    "link \x1b]8;;https://evil.example/\x07PWNED-LINK\x1b]8;;\x07 osc8",
    "clipboard \x1b]52;c;UFdORUQtQ0xJUA==\x07 osc52",
    "clear \x1b[2J\x1b[H csi2J",
    "altscreen \x1b[?1049h csi1049",
    "bell \x07 bel",
    "carriage return\rPWNED-CR overwrite",
]


def fail(msg):
    print(f"praisonai_train: {msg}", file=sys.stderr)
    sys.exit(2)


def fill_disk():
    """A checkpoint save that fills the run's disk; the log's next line is cut by it."""
    try:
        with open("checkpoint-1.bin", "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError:
        pass
    try:
        sys.stdout.write("{'loss': 2.3141, 'grad_norm': 1.25, 'learning_rate': 2e-05} " * 500)
        sys.stdout.flush()
    except OSError:
        pass
    os._exit(1)  # as a trainer that dies on the failed save; nothing more reaches the log


def main():
    args = sys.argv[1:]
    if not args or args[0] != "llm":
        fail(f"expected 'llm' first, got {args}")
    rest = args[1:]
    if "--config" not in rest:
        fail("missing --config")
    i = rest.index("--config")
    config_path = rest[i + 1]
    positional = rest[:i] + rest[i + 2:]
    if len(positional) > 1 or (i + 2 < len(rest)):
        fail(f"dataset must come before --config: {args}")
    cfg = {}
    with open(config_path) as f:
        for line in f:
            key, sep, value = line.partition(":")
            if sep:
                cfg[key.strip()] = value.strip()
    dataset = positional[0] if positional else None
    if dataset is not None and not os.path.isfile(dataset):
        fail(f"dataset {dataset!r} not found")
    print(f"argv={args!r}", flush=True)
    if cfg.get("hostile_escapes") == "true":
        for line in HOSTILE:
            sys.stdout.write("hostile: " + line + "\n")
        sys.stdout.flush()
    print(f"env STANDIN_TEST_ENV={os.environ.get('STANDIN_TEST_ENV', '')}", flush=True)
    print(f"env CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} "
          f"CUDA_DEVICE_ORDER={os.environ.get('CUDA_DEVICE_ORDER', '<unset>')}", flush=True)
    if "say" in cfg:
        print(cfg["say"], flush=True)
    if cfg.get("scribble") == "true":
        # A trainer's own files that happen to bear rtrain-tui's old names, in its cwd.
        with open("attempts.jsonl", "w") as f:
            f.write('{"attempt": 7, "state": "completed", "exit": 0, "reason": "the trainer\'s"}\n')
        with open("launch.json", "w") as f:
            f.write('{"trainer": "rm -rf ~", "python": "python3"}\n')
    if cfg.get("fill_disk") == "true":
        fill_disk()
    if "term_exit" in cfg:
        def term_exit(*_: object) -> None:
            print(f"SIGTERM received: exiting {cfg['term_exit']}", flush=True)
            time.sleep(float(cfg.get("term_seconds", 0)))
            os._exit(int(cfg["term_exit"]))

        signal.signal(signal.SIGTERM, term_exit)
    if cfg.get("ignore_term") == "true":
        signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
    children = [subprocess.Popen(["sleep", "3600"]) for _ in range(int(cfg.get("children", 0)))]
    if children:
        print("children=" + ",".join(str(c.pid) for c in children), flush=True)
    if cfg.get("hf_style") == "true" or (cfg.get("crash") and not cfg.get("crash_at")):
        from praisonai_train import hf_style  # real Trainer output and real deaths

        if cfg.get("hf_style") == "true":
            hf_style.run(cfg)
        if cfg.get("crash"):
            hf_style.crash(cfg["crash"])
        sys.exit(int(cfg.get("exit_code", 0)))
    steps = int(cfg.get("steps", 5))
    pause = float(cfg.get("step_seconds", 0.05))
    save_steps = int(cfg.get("save_steps", 0))
    history = []
    first = 1
    resume = cfg.get("resume_from_checkpoint", "").strip("'\"")
    if resume:
        import json

        with open(os.path.join(resume, "trainer_state.json")) as f:
            state = json.load(f)
        history = state["log_history"]
        first = state["global_step"] + 1
        print(f"env RTRAIN_RESUME_FROM={os.environ.get('RTRAIN_RESUME_FROM', '<unset>')}", flush=True)
        print("  Continuing training from checkpoint, will skip to saved global_step", flush=True)
        print(f"  Continuing training from global step {state['global_step']}", flush=True)
    for step in range(first, steps + 1):
        if cfg.get("crash_at") and step == int(cfg["crash_at"]):
            mark = f"crashed-at-{step}"
            if not (cfg.get("crash_once") == "true" and os.path.exists(mark)):
                open(mark, "w").close()
                from praisonai_train import hf_style

                hf_style.crash(cfg.get("crash", "nccl_timeout"))
        if cfg.get("hang_at") and step == int(cfg["hang_at"]):
            mark = f"hung-at-{step}"
            if not (cfg.get("hang_once") == "true" and os.path.exists(mark)):
                open(mark, "w").close()
                while True:
                    time.sleep(3600)
        if cfg.get("progress_bar") == "true":
            sys.stdout.write(f"progress {step}/{steps}\r")
        print(f"{{'loss': {2.0 / step:.4f}, 'step': {step}, 'epoch': {step / steps:.2f}}}", flush=True)
        history.append({"loss": round(2.0 / step, 4), "step": step})
        if save_steps and step % save_steps == 0:
            from praisonai_train import checkpoint

            checkpoint.save(step, cfg, history)
        if cfg.get("bad_utf8") == "true" and step == 1:
            sys.stdout.buffer.write(b"bad byte \xff here\n")
            sys.stdout.flush()
        time.sleep(pause)
    os.makedirs("lora_model", exist_ok=True)
    with open("lora_model/adapter_config.json", "w") as f:
        f.write('{"r": 8, "lora_alpha": 16}\n')
    with open("lora_model/adapter_model.safetensors", "wb") as f:
        f.write(os.urandom(200_000))
    for c in children:
        c.terminate()
    code = int(cfg.get("exit_code", 0))
    print(f"training done, exit {code}", flush=True)
    sys.exit(code)


main()
