"""The one rule that turns a run's host facts into its status word (and the rule's reason).

Every reader asks this function: a probe's `RunProbe.state` (so the CLI, the TUI, `watch`
and the client's notifier, which all word a run from its probe), and the host's own
sender, `notify.pyz` (host_send.py imports it; it ships in the bundle). Where the rule has
to run in `sh` on the host (the wrapper's end, `core/host/notify_send.sh`), it runs as
`state_word` in `core/host/state_rule.sh`, and tests/unit/test_state_rule_agrees.py proves
the two equal on generated facts. Change both together.

The order of the checks is the precedence docs/design.md sets:
- no run directory: `unknown`;
- a stop of ours (`stopped` verified, or `stop_requested` and the trainer ended, or no
  process of it is left): `stopped`, whatever exit code the trainer gave; torchrun and
  Lightning answer SIGTERM with exit 1, and that is still our stop, never a failure (R02);
- a recorded exit code: `completed` (0) or `failed (exit N)`;
- waiting (a host queue, a retry's wait, the scheduler): `queued`; a live process:
  `running`;
- ended with its exit code unwritten (a full disk): `failed`;
- a job whose submission to the scheduler is under way (`sbatch` has not answered yet):
  `starting`, never `lost` (R01);
- never launched: `unknown`; launched and gone with nothing recorded: `lost`.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

# The status vocabulary of docs/design.md. `failed (exit N)` is built by `failed_word`.
STARTING = "starting"  # launching: in the index before launch, or a submission under way
QUEUED = "queued"  # waiting for a scheduler (Slurm); its reason travels beside the word
RUNNING = "running"
COMPLETED = "completed"
STOPPED = "stopped"
LOST = "lost"
UNKNOWN = "unknown"
# Ended with an exit code that could not be recorded (its `status.tmp` left empty, as a
# full disk leaves it): it failed, with the code unknown, and was not lost.
FAILED = "failed"

# The rule's own reason for `starting` by a submission (the scheduler's and the log's
# reasons are found elsewhere: core/logs/run_reason.py).
SUBMITTING = "submitting the job to the scheduler"


def failed_word(code: int) -> str:
    return f"failed (exit {code})"


@dataclass(frozen=True)
class HostFacts:
    """What the host says of one run's directory, as the probe scripts read it.

    exists: the run directory is there. stopped: a stop of ours saw every process gone.
    stop_requested: a stop of ours was issued (`stop_requested` holds a line). exit_code:
    the trainer's code the wrapper recorded (`status`), None when none. queued: it waits
    (a host queue, a retry, the scheduler). alive: a process of the run lives. unwritten:
    the wrapper ended but could not write its code. submitting: `sbatch` for its job is
    still running. launched: a launch was made (`launch.lock`, a pid, a job id).
    """

    exists: bool = True
    stopped: bool = False
    stop_requested: bool = False
    exit_code: int | None = None
    queued: bool = False
    alive: bool = False
    unwritten: bool = False
    submitting: bool = False
    launched: bool = False


def run_state(facts: HostFacts) -> tuple[str, str]:
    """(status word, the rule's reason) for `facts`; the reason is '' but for a submission."""
    if not facts.exists:
        return UNKNOWN, ""
    if facts.stopped:
        return STOPPED, ""
    if facts.exit_code is not None:
        if facts.stop_requested:
            # Our stop ended it: its TERM (143), KILL (137), or the trainer's own answer to
            # the TERM (torchrun and Lightning exit 1). The stop was asked for.
            return STOPPED, ""
        return (COMPLETED if facts.exit_code == 0 else failed_word(facts.exit_code)), ""
    if facts.queued:
        return QUEUED, ""
    if facts.alive:
        return RUNNING, ""  # a stop under way: running while anything of the run lives
    if facts.stop_requested:
        return STOPPED, ""  # every process gone, killed before it recorded anything
    if facts.unwritten:
        return FAILED, ""
    if facts.submitting:
        return STARTING, SUBMITTING
    if not facts.launched:
        return UNKNOWN, ""  # created but never launched: nothing can be told
    return LOST, ""
