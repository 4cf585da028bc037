"""Stand-in for `torchrun` (torch.distributed.run) on the test hosts.

`python -m fake_torchrun [--workers N] [--term-seconds S]` does what matters to a stop:
like torchrun's SubprocessHandler it starts every worker in a session of its own
(`start_new_session=True`), so the workers are *not* in the wrapper's process group.
Each worker writes a checkpoint file every 0.1 s under `ckpt/`, and on SIGTERM keeps
"saving" (writing checkpoints) for S seconds before it exits — a slow save. The launcher
records pids in `launcher.pid` / `worker-N.pid` so tests can check and kill them.
"""

import argparse
import os
import subprocess
import sys

WORKER = r"""
import os, signal, sys, time
rank, term_seconds = int(sys.argv[1]), float(sys.argv[2])
stop_at = None
def on_term(*_):
    global stop_at
    print(f"worker {rank}: SIGTERM, saving for {term_seconds} s", flush=True)
    stop_at = time.monotonic() + term_seconds
signal.signal(signal.SIGTERM, on_term)
with open(f"worker-{rank}.pid", "w") as f:
    f.write(f"{os.getpid()}\n")
os.makedirs("ckpt", exist_ok=True)
n = 0
while stop_at is None or time.monotonic() < stop_at:
    n += 1
    with open(f"ckpt/w{rank}-{n:06d}", "w") as f:
        f.write("x")
    time.sleep(0.1)
print(f"worker {rank}: saved, exiting", flush=True)
sys.exit(143)
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--term-seconds", type=float, default=2.0)
    args = parser.parse_args()
    with open("launcher.pid", "w") as f:
        f.write(f"{os.getpid()}\n")
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(rank), str(args.term_seconds)],
                         start_new_session=True)
        for rank in range(args.workers)
    ]
    print(f"launched {len(workers)} workers in sessions of their own", flush=True)
    codes = [w.wait() for w in workers]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
