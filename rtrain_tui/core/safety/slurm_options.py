"""What a Slurm start may ask the scheduler for, checked before anything reaches a host.

Every value that reaches an `#SBATCH` line or a shell is validated here with a strict
character set (`SlurmOptions.validated`, `check_sbatch_arg`). The Slurm flags of `start`
and `preflight` and config.toml's per-host Slurm defaults are both this record, so it
lives below the two that read it, the Slurm backend and the host config
(core/runs/hostconfig.py): neither has to import the other. The backend's `options.py`
re-exports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rtrain_tui.core.errors import ValidationError

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PARTITION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(?:,[A-Za-z0-9][A-Za-z0-9_.-]{0,63}){0,15}")
# Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_TIME_RE = re.compile(r"[0-9]{1,6}(?::[0-9]{1,2}){0,2}|[0-9]{1,4}-[0-9]{1,2}(?::[0-9]{1,2}){0,2}|UNLIMITED|INFINITE")
_SBATCH_ARG_RE = re.compile(r"--([a-z][a-z0-9-]{0,40})(?:=([A-Za-z0-9_.,:=/+@%-]{1,200}))?")
# Options this module sets itself (or that would break the contract: one job per run,
# its log in train.log, submitted without waiting); each has its own flag or none.
_OWN_OPTIONS = {
    "output": None, "error": None, "input": None, "chdir": None, "wrap": None,
    "parsable": None, "array": None, "wait": None, "test-only": None, "job-name": None,
    "open-mode": None, "partition": "--partition", "nodes": "--nodes",
    "gpus-per-node": "--gpus-per-node", "time": "--time", "account": "--account",
    "qos": "--qos",
}


@dataclass(frozen=True)
class SlurmOptions:
    """What a Slurm start asks the scheduler for; None/empty means the cluster's default."""

    partition: str = ""
    nodes: int = 1
    gpus_per_node: int | None = None  # None: the run's --gpus
    time: str = ""
    account: str = ""
    qos: str = ""
    sbatch_args: tuple[str, ...] = ()

    def validated(self) -> SlurmOptions:
        """Check every field; raises ValidationError with one line that says what to do."""
        for flag, value, pattern in (("--partition", self.partition, _PARTITION_RE),
                                     ("--account", self.account, _NAME_RE),
                                     ("--qos", self.qos, _NAME_RE)):
            if value and not pattern.fullmatch(value):
                raise ValidationError(f"{flag} {value!r} is not a Slurm name: use letters, "
                                      "digits, '.', '_' and '-' only.")
        if self.time and not _TIME_RE.fullmatch(self.time):
            raise ValidationError(f"--time {self.time!r} is not a Slurm time limit: use MINUTES, "
                                  "HH:MM:SS or D-HH:MM:SS (e.g. 30, 4:00:00, 1-12:00:00).")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or not 1 <= self.nodes <= 1024:
            raise ValidationError(f"--nodes must be a whole number from 1 to 1024, not {self.nodes!r}.")
        g = self.gpus_per_node
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= 64):
            raise ValidationError(f"--gpus-per-node must be a whole number from 0 to 64, not {g!r}.")
        for arg in self.sbatch_args:
            check_sbatch_arg(arg)
        return self

    def sbatch_lines(self, run_id: str, gpus: int) -> list[str]:
        """The `#SBATCH` lines of run.sbatch (values already validated: no quoting needed)."""
        gpn = gpus if self.gpus_per_node is None else self.gpus_per_node
        lines = [f"--job-name=rtrain-{run_id}", "--output=train.log", "--open-mode=append",
                 f"--nodes={self.nodes}", "--ntasks-per-node=1"]
        if gpn:
            lines.append(f"--gpus-per-node={gpn}")
        for flag, value in (("--partition", self.partition), ("--time", self.time),
                            ("--account", self.account), ("--qos", self.qos)):
            if value:
                lines.append(f"{flag}={value}")
        lines.extend(self.sbatch_args)
        return [f"#SBATCH {line}" for line in lines]


def check_sbatch_arg(arg: str) -> str:
    """One `--sbatch-arg`: `--name` or `--name=value`, long form, plain characters."""
    m = _SBATCH_ARG_RE.fullmatch(arg) if isinstance(arg, str) else None
    if not m:
        raise ValidationError(f"--sbatch-arg {arg!r} is not usable: pass one long option as "
                              "--name=value (letters, digits and .,:=/+@%_- only), e.g. "
                              "--sbatch-arg=--constraint=a100.")
    name = m.group(1)
    if name in _OWN_OPTIONS:
        own = _OWN_OPTIONS[name]
        how = f"use {own} instead" if own else "rtrain-tui sets it itself"
        raise ValidationError(f"--sbatch-arg {arg!r} is not allowed: {how}.")
    return arg
