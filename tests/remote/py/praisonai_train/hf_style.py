"""Stand-in output of a real Hugging Face Trainer run, and of the ways real runs die.

`hf_style: true` prints what transformers' Trainer writes into a non-TTY log: the
`***** Running training *****` header, tqdm redraws on stderr (`\\r`, no newline), the
loss dicts on stdout (transformers 5 style quoted numbers with `quoted: true`), an eval
dict every `eval_steps`, a "Writing model shards" bar and the final `train_runtime` dict.
With `tqdm_write: true` each loss dict is printed as transformers' ProgressCallback does,
through `tqdm.write`: the bar erased with `\r<spaces>\r`, the line, the bar drawn again.

`crash: NAME` ends the run the way a real one dies, with the real wording (copied from
PyTorch and Python) and exit code: the names in CRASHES (cuda_oom, module,
glued_traceback, torchrun_index, torchrun_sigkill, nccl_timeout).
"""

import os
import sys
import time


def _torchrun_end(exitcode, traceback):
    """What torchrun prints after worker rank 1 (pid 140261) ended with `exitcode`: its
    log lines, its own traceback, and torch.distributed.elastic's error summary."""
    site = "/opt/venv/lib/python3.11/site-packages/torch/distributed"
    return [
        "W1201 21:03:15.102000 140201 torch/distributed/elastic/multiprocessing/api.py:858] "
        "Sending process 140260 closing signal SIGTERM",
        "E1201 21:03:15.267000 140201 torch/distributed/elastic/multiprocessing/api.py:833] "
        f"failed (exitcode: {exitcode}) local_rank: 1 (pid: 140261) of binary: /opt/venv/bin/python3",
        "Traceback (most recent call last):",
        '  File "/opt/venv/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "             ^^^^^^",
        f'  File "{site}/elastic/multiprocessing/errors/__init__.py", line 348, in wrapper',
        "    return f(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^",
        f'  File "{site}/run.py", line 901, in main',
        "    run(args)",
        f'  File "{site}/run.py", line 892, in run',
        "    elastic_launch(",
        f'  File "{site}/launcher/api.py", line 133, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{site}/launcher/api.py", line 264, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-12-01_21:03:15",
        "  host      : gpu-box",
        "  rank      : 1 (local_rank: 1)",
        f"  exitcode  : {exitcode} (pid: 140261)",
        "  error_file: <N/A>",
        f"  traceback : {traceback}",
        "============================================================",
    ]


CRASHES = {
    # torch 2.x's NCCL watchdog on a collective that never finished (a peer hung or a
    # link dropped): it logs, then aborts the process (SIGABRT: 128 + 6).
    "nccl_timeout": (134, [
        "[rank0]:[E1201 21:03:14.981000 140260 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1325, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600038 milliseconds before timing out.",
        "[rank0]:[E1201 21:03:14.982000 140260 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) "
        "Rank 0] Exception (either an error or timeout) detected by watchdog at work: 1325, last "
        "enqueued NCCL work: 1325, last completed NCCL work: 1324.",
        "[rank0]:[E1201 21:03:14.982000 140260 ProcessGroupNCCL.cpp:630] [Rank 0] Some NCCL operations "
        "have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
        "operations might run on corrupted/incomplete data.",
        "[rank0]:[E1201 21:03:14.982000 140260 ProcessGroupNCCL.cpp:636] [Rank 0] To avoid data "
        "inconsistency, we are taking the entire process down.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    ]),
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
    # Raised at the first batch, before any log line: the traceback goes to stderr right
    # after tqdm's first redraw, so it starts on the bar's line.
    "glued_traceback": (1, [
        "\r  0%|          | 0/1000 [00:00<?, ?it/s]Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2241, in train',
        "    return inner_training_loop(",
        '  File "/opt/venv/lib/python3.11/site-packages/transformers/data/data_collator.py", line 271, in __call__',
        "    batch = pad_without_fast_tokenizer_warning(",
        "ValueError: Asking to pad but the tokenizer does not have a padding token. Please select a "
        "token to use as `pad_token` `(tokenizer.pad_token = tokenizer.eos_token e.g.)` or add a new "
        "pad token via `tokenizer.add_special_tokens({'pad_token': '[PAD]'})`.",
    ]),
    # torchrun, 2 workers (torch 2.4): rank 1 raises; its lines carry `[rank1]:`, then the
    # launcher's own traceback and torch.distributed.elastic's error summary.
    "torchrun_index": (1, [
        "W1201 21:03:11.517000 140201 torch/distributed/run.py:779] ",
        "W1201 21:03:11.517000 140201 torch/distributed/run.py:779] *****************************************",
        "W1201 21:03:11.517000 140201 torch/distributed/run.py:779] Setting OMP_NUM_THREADS environment "
        "variable for each process to be 1 in default, to avoid your system being overloaded, please "
        "further tune the variable for optimal performance in your application as needed. ",
        "W1201 21:03:11.517000 140201 torch/distributed/run.py:779] *****************************************",
        "{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 4e-05, 'epoch': 0.1}",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/home/u/train.py", line 41, in <module>',
        "[rank1]:     trainer.train()",
        '[rank1]:   File "/opt/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2241, in train',
        "[rank1]:     return inner_training_loop(",
        "[rank1]:            ^^^^^^^^^^^^^^^^^^^^",
        '[rank1]:   File "/home/u/train.py", line 22, in collate',
        "[rank1]:     return batch[7]",
        "[rank1]:            ~~~~~^^^",
        "[rank1]: IndexError: list index out of range",
        *_torchrun_end(1, "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"),
    ]),
    # torchrun, rank 1 killed by the kernel's OOM killer: no traceback of its own.
    "torchrun_sigkill": (1, [
        "{'loss': 2.31, 'grad_norm': 1.2, 'learning_rate': 4e-05, 'epoch': 0.1}",
        *_torchrun_end(-9, "Signal 9 (SIGKILL) received by PID 140261"),
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
    # transformers' ProgressCallback prints each dict with `tqdm.write`: it erases the bar
    # (`\r<spaces>\r`), prints the line, and draws the bar again.
    tqdm_write = cfg.get("tqdm_write") == "true"
    # hold_at: N and hold_file: PATH: before step N, wait (at most 60 s) until PATH exists,
    # so a test sees the run live for as long as it needs, however loaded the machine.
    hold_at, hold_file = int(cfg.get("hold_at", 0)), cfg.get("hold_file", "")
    q = "'" if quoted else ""
    print("***** Running training *****\n  Num examples = 1,000\n  Num Epochs = 1\n"
          f"  Total optimization steps = {steps:,}\n  Number of trainable parameters = 4,194,304",
          flush=True)
    began = time.monotonic()
    sys.stderr.write(f"\r  0%|          | 0/{steps} [00:00<?, ?it/s]")
    for n in range(1, steps + 1):
        if n == hold_at:
            held_until = time.monotonic() + 60
            while not os.path.exists(hold_file) and time.monotonic() < held_until:
                time.sleep(0.05)
        time.sleep(pause)
        sys.stderr.write(bar(n, steps, began))
        sys.stderr.flush()
        if n % 2 == 0:
            loss = 3.0 - 2.0 * n / steps
            if tqdm_write:
                sys.stderr.write("\r" + " " * (len(bar(n, steps, began)) - 1) + "\r")
                sys.stderr.flush()
            print(f"{{'loss': {q}{loss:.4f}{q}, 'grad_norm': {q}1.25{q}, "
                  f"'learning_rate': {q}{2e-05 * (1 - n / steps):.3e}{q}, 'epoch': {q}{n / steps:.2f}{q}}}",
                  flush=True)
            if tqdm_write:
                sys.stderr.write(bar(n, steps, began))
                sys.stderr.flush()
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
