"""A box: the run's wrapper detached with `setsid`, found and stopped by its marker.

- **launch**: `run.sh` (the wrapper) is started once, detached in its own session; it
  records its pid, runs the trainer with `RTRAIN_RUN=<token>` in its environment, and
  writes the exit code into `status`.
- **probe**: one script reads every run's files; a run whose wrapper is gone without a
  code is looked for by its marker, once for all runs.
- **stop**: SIGTERM to every process carrying the run's marker (and the wrapper's group),
  the grace period, SIGKILL, then every member re-probed (zombies count as gone).
- **GPU choice** (its capability): the client picks free GPUs from a sample taken with
  the probe and hands them to the trainer as CUDA_VISIBLE_DEVICES.

The shell text is `scripts.py`'s and the `.sh` files beside it (what both backends
send is core/host's `remote_sh`).
"""

from rtrain_tui.core.backends.direct.backend import DirectBackend

__all__ = ["DirectBackend"]
