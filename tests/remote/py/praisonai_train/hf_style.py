"""Stand-in output of a real Hugging Face Trainer run, and of the ways real runs die.

`hf_style: true` prints what transformers' Trainer writes into a non-TTY log: the
`***** Running training *****` header, tqdm redraws on stderr (`\\r`, no newline), the
loss dicts on stdout (transformers 5 style quoted numbers with `quoted: true`), an eval
dict every `eval_steps`, a "Writing model shards" bar and the final `train_runtime` dict.

`crash: NAME` ends the run the way a real one dies, with the real wording (copied from
PyTorch, NCCL and Python) and exit code: cuda_oom, module, nccl_timeout, no_space,
dataset_missing, traceback.
"""

import sys
import time

CRASHES = {
    "cuda_oom": (1, [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main',
        '  File "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3612, in training_step',
        "    self.accelerator.backward(loss, **kwargs)",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/autograd/__init__.py", line 289, in backward',
        "    _engine_run_backward(",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
        "has 78.12 GiB memory in use. Of the allocated memory 75.21 GiB is allocated by PyTorch, and "
        "1.43 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
        "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
    ]),
    "module": (1, [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/opt/venv/lib/python3.11/site-packages/praisonai_train/llm.py", line 12, in <module>',
        "    from peft import LoraConfig",
        "ModuleNotFoundError: No module named 'peft'",
    ]),
}


def bar(n, total, began):
    pct = n * 100 // total
    fill = "█" * (pct // 10)
    return f"\r{pct:3d}%|{fill:<10}| {n}/{total} [00:{n:02d}<00:{total - n:02d},  4.00it/s]"


def run(cfg):
    steps = int(cfg.get("steps", 20))
    pause = float(cfg.get("step_seconds", 0.01))
    eval_steps = int(cfg.get("eval_steps", 10))
    quoted = cfg.get("quoted") == "true"
    q = "'" if quoted else ""
    print("***** Running training *****\n  Num examples = 1,000\n  Num Epochs = 1\n"
          f"  Total optimization steps = {steps:,}\n  Number of trainable parameters = 4,194,304",
          flush=True)
    began = time.monotonic()
    sys.stderr.write(f"\r  0%|          | 0/{steps} [00:00<?, ?it/s]")
    for n in range(1, steps + 1):
        time.sleep(pause)
        sys.stderr.write(bar(n, steps, began))
        sys.stderr.flush()
        if n % 2 == 0:
            loss = 3.0 - 2.0 * n / steps
            print(f"{{'loss': {q}{loss:.4f}{q}, 'grad_norm': {q}1.25{q}, "
                  f"'learning_rate': {q}{2e-05 * (1 - n / steps):.3e}{q}, 'epoch': {q}{n / steps:.2f}{q}}}",
                  flush=True)
        if n % eval_steps == 0:
            print(f"{{'eval_loss': {3.1 - 2.0 * n / steps:.4f}, 'eval_runtime': 0.5, "
                  f"'eval_samples_per_second': 200.0, 'eval_steps_per_second': 25.0, 'epoch': {n / steps:.2f}}}",
                  flush=True)
    sys.stderr.write("\nWriting model shards: 100%|██████████| 1/1 [00:00<00:00,  9.80it/s]\n")
    print(f"{{'train_runtime': {time.monotonic() - began:.4f}, 'train_samples_per_second': 100.0, "
          f"'train_steps_per_second': 4.0, 'train_loss': 2.0, 'epoch': 1.0}}", flush=True)


def crash(name):
    code, lines = CRASHES[name]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    sys.exit(code)
