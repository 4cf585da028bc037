"""What Slurm changes: how a run is launched, probed and stopped on a cluster's login node.

Everything else (connections, the run directory, transfers, logs, fetch, the index) is
the engine's, shared with the direct backend. On a cluster:

- **launch**: the run directory gets `run.sbatch` instead of `run.sh`, and `submit`
  hands it to `sbatch --parsable` from the run directory (a shared file system: the
  compute node writes `train.log` and `status` there). The trainer never runs on the
  login node. The job id is kept in `slurm_job_id`.
- **probe**: one script per host reads every run's files and asks Slurm once about all
  their jobs: `squeue -t all -O` (ended jobs stay there for MinJobAge), `scontrol -o show
  job` for what squeue left out, `sacct` when accounting is enabled.
- **stop**: `scancel --signal=TERM --full`, the grace period, then `scancel` (Slurm's own
  TERM, KillWait, KILL), verified by the job's state. A queued job is cancelled at once.

Files: `options.py` (what a start may ask for, validated), `scripts.py` (the shell text),
`parse.py` (reading the answers).
"""

from rtrain_tui.core.backends.slurm.options import (
    MASTER_PORT,
    MULTI_NODE_TRAINER,
    SlurmOptions,
    check_sbatch_arg,
    trainer_values,
)
from rtrain_tui.core.backends.slurm.parse import (
    FAILURE_STATES,
    JobInfo,
    Partition,
    job_gone,
    parse_jobs,
    parse_partitions,
    parse_preflight,
    parse_run_states,
)
from rtrain_tui.core.backends.slurm.scripts import (
    batch_script,
    job_state,
    preflight,
    run_states,
    stop_signal,
    submit,
)

__all__ = [
    "FAILURE_STATES", "MASTER_PORT", "MULTI_NODE_TRAINER", "JobInfo", "Partition", "SlurmOptions",
    "batch_script", "check_sbatch_arg", "job_gone", "job_state", "parse_jobs", "parse_partitions",
    "parse_preflight", "parse_run_states", "preflight", "run_states", "stop_signal", "submit",
    "trainer_values",
]
