"""Validation of everything a user types that could reach a remote shell.

Messages are the seed's (`praisonai train remote`), word for word, so scripts that
match on them keep working. Every check runs before a connection is opened, and every
pattern matches the whole string (`fullmatch`): with `match`/`$`, a trailing newline
would pass as "the end" and reach the remote shell.
"""

from __future__ import annotations

import math
import os
import re
import unicodedata
from collections.abc import Collection
from pathlib import Path, PurePosixPath

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.safety import template as _template
from rtrain_tui.core.safety.template import python_word

__all__ = [
    "ValidationError", "check_run_id", "check_workdir", "check_fetch_path", "check_python",
    "check_gpus", "parse_env", "check_trainer_template", "check_local_file", "check_host",
    "check_dataset_name", "RUN_DIR_FILES", "python_word", "parse_gpu_ids",
]

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# The workdir reaches the remote shell unquoted so that `~` expands there; this
# character set is what makes that safe.
WORKDIR_RE = re.compile(r"~?[A-Za-z0-9._/-]*")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names the run's wrapper (direct.wrapper, slurm.batch_script) still reads after it
# exports the user's --env: RTRAIN_RUN is the marker that finds a run's escaped workers
# at stop time, RT_GRACE/RT_PROC/RT_SHELL steer its liveness helpers, IFS splits the pid
# lists they build and `proc` is their /proc. Set by the user, stop could miss processes
# or the wrapper could die before writing `status`.
_WRAPPER_PREFIXES = ("RTRAIN_", "RT_")
_WRAPPER_NAMES = frozenset({"IFS", "proc"})
# A leading `~/` is left for the remote shell to expand (see template.python_word).
PYTHON_RE = re.compile(r"(?:~/)?[A-Za-z0-9._/+-][A-Za-z0-9._/+~-]*")
# A name asyncssh may resolve: labels of letters, digits, `-`, `_`; or an IPv6 literal.
HOSTNAME_RE = re.compile(r"[\w-]+(?:\.[\w-]+)*\.?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")
TRAINER_FIELDS = _template.FIELDS

DEFAULT_WORKDIR = "~/.praisonai-train"
DEFAULT_PYTHON = "python3"
DEFAULT_TRAINER = "{python} -m praisonai_train llm {dataset} --config {config}"

# The run directory's own files (docs/design.md, plus what the wrapper and transfers write
# beside them): a dataset shipped under one of these names would replace it.
RUN_DIR_FILES = frozenset({
    "config.yaml", "run.sh", "status", "train.pid", "train.log", "train.ident",
    "stop_requested", "stopped", "lora_model", "run.sbatch", "slurm_job_id", "submit_error",
    "submit_message", "status_attempt",
    # The run's marker: a dataset shipped under this name would replace it, and stop finds
    # the run's escaped workers by it.
    "train.token", "submit_unknown",
    # A Slurm job's sbatch still running (host/submitting.sh): the run reads `starting`.
    "submitting",
    # A resumed run's record of its attempts, and where each ended one's files went.
    "attempts.jsonl", "attempts",
    # The host's queue, retry loop and stall watchdog (the probe reads them), and its own
    # notifications: notify.json holds the webhook URLs, `notified/` the sent markers.
    "gpus", "queued", "running_since", "retry_gave_up", "retry_wait", "retry.pyz",
    "ran_s",  # a requeued Slurm job's earlier seconds (run.sbatch.sh)
    "stalled", "stall_kill", "stall_note", "gpus_idle",
    "notify.json", "notify.pyz", "notify.log", "notified",
})
_RUN_DIR_PREFIXES = ("launch.", ".rtrain")
_TEMP_SUFFIXES = (".tmp", ".part")


def run_dir_own(name: str) -> str:
    """The run dir's own file that the top-level `name` is (or is a temporary copy of,
    or shares a reserved prefix with: `.rtrain`, `launch.*`), '' when it is none."""
    base = name
    for suffix in _TEMP_SUFFIXES:
        base = base.removesuffix(suffix)
    if base in RUN_DIR_FILES:
        return base
    return name if name.startswith(_RUN_DIR_PREFIXES) else ""


def _has_controls(text: str) -> bool:
    """Controls, format characters (bidi, BOM), surrogates, private use or unassigned."""
    return any(unicodedata.category(c)[0] == "C" or c in "\u2028\u2029" for c in text)


def _shown(value: str, limit: int = 80) -> str:
    """`repr` for a message: escapes every control; a very long value is cut."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "…"


def check_run_id(run_id: str) -> str:
    """Return `run_id` if usable as a directory name on the host, else raise."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise ValidationError(
            f"run id {run_id!r} is not usable: letters, digits, dot, dash and underscore only, "
            "starting with a letter or digit, up to 64 chars."
        )
    return run_id


def check_workdir(host: str, workdir: str) -> str:
    """Return `workdir` if it is safe to hand to the remote shell unquoted."""
    if (not workdir or not WORKDIR_RE.fullmatch(workdir) or "~" in workdir[1:]
            or workdir.startswith("-")):
        raise ValidationError(
            f"{host}: workdir {workdir!r} may only contain letters, digits and ._-/~ "
            "-- it is expanded by the remote shell."
        )
    return workdir


def check_fetch_path(path: str) -> str:
    """Return the normalised relative path, refusing anything that leaves the run dir."""
    parts = PurePosixPath(path).parts if path else ()
    if not path or not path.strip() or path.startswith("/") or ".." in parts:
        raise ValidationError(
            f"{path!r} points outside the run directory. Fetch paths are relative to it, "
            "e.g. 'lora_model' or 'train.log'."
        )
    if _has_controls(path):
        raise ValidationError(
            f"fetch path {_shown(path)} holds control characters; name the file as the "
            "fetch browser lists it, e.g. 'lora_model' or 'train.log'."
        )
    return str(PurePosixPath(path))


def check_grace(grace: float) -> float:
    """Return the stop ladder's grace (seconds between SIGTERM and SIGKILL) if usable.

    nan compares false with every deadline, so the ladder would wait forever and never
    send SIGKILL to a trainer that ignores SIGTERM; inf is that wait, asked for.
    """
    if not math.isfinite(grace) or grace < 0:
        raise ValidationError(f"--grace must be 0 or more seconds, not {grace:g}.")
    return grace


def check_python(python: str) -> str:
    """The interpreter is quoted anyway; refuse only what cannot be a program path.

    A leading `~/` is allowed: it is left unquoted so the remote shell expands it.
    """
    if not isinstance(python, str) or not PYTHON_RE.fullmatch(python) or python.startswith("-"):
        raise ValidationError(
            f"python {python!r} is not usable: give a program name or path such as "
            "'python3' or '/opt/conda/bin/python'."
        )
    return python


def check_gpus(gpus: int) -> int:
    if gpus < 0:
        raise ValidationError(f"--gpus must be 0 or more, not {gpus}; use 0 for a CPU-only run.")
    return gpus


GPU_IDS_RE = re.compile(r"[0-9]{1,3}(?:,[0-9]{1,3})*")
MAX_GPU_ID = 63  # nvidia-smi's rows are believed for at most 64 GPUs (probes.MAX_GPUS)


def parse_gpu_ids(text: str) -> tuple[int, ...]:
    """`--gpu-ids 0,3`: GPU numbers, commas between, no repeats. Whether each exists on
    the host is checked against its GPUs at start (gpus.choose_gpus)."""
    if not GPU_IDS_RE.fullmatch(text):
        raise ValidationError(f"--gpu-ids {_shown(text)} is not usable: write GPU numbers "
                              "separated by commas, like 0,3.")
    ids = tuple(int(part) for part in text.split(","))
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValidationError(f"--gpu-ids {text} names GPU {repeated[0]} twice; name each GPU once.")
    if max(ids) > MAX_GPU_ID:
        raise ValidationError(f"--gpu-ids {text}: GPU {max(ids)} is beyond the {MAX_GPU_ID + 1} "
                              "GPUs a host can report; use the numbers `rtrain-tui preflight` shows.")
    return ids


def parse_env(pairs: list[str]) -> dict[str, str]:
    """Turn `KEY=VALUE` strings into a dict; keys must be shell identifiers."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_KEY_RE.fullmatch(key):
            raise ValidationError(
                f"--env {pair!r} is not usable: write KEY=VALUE with KEY made of letters, "
                "digits and underscores, not starting with a digit."
            )
        if key.startswith(_WRAPPER_PREFIXES) or key in _WRAPPER_NAMES:
            raise ValidationError(
                f"--env {key} is not usable: the run's wrapper on the host relies on it "
                "(RTRAIN_*, RT_*, IFS and proc are rtrain-tui's own); use another name."
            )
        if "\0" in value:
            raise ValidationError(
                f"--env {pair!r} is not usable: a value cannot hold a NUL character."
            )
        env[key] = value
    return env


def check_trainer_template(template: str) -> str:
    """Refuse templates the trainer command cannot be built from, before launch.

    Unknown `{fields}`, unbalanced braces and placeholders the template quotes itself
    are refused here; see `template.parse` for the rules.
    """
    _template.parse(template)
    return template


def check_local_file(kind: str, path: str | os.PathLike[str]) -> Path:
    try:
        p = Path(path).expanduser()
        is_file = p.is_file()
    except (ValueError, OSError, RuntimeError):  # NUL in the name, ~user unknown, too long
        is_file = False
    if not is_file:
        raise ValidationError(f"{kind} file {_shown(str(path), 200)} does not exist or is not a file.")
    return p


def check_dataset_name(name: str) -> str:
    """A dataset is shipped into the run dir under its own file name: make sure it can be.

    Refuses a name that would replace one of the run's own files (config.yaml, status…),
    one the trainer would read as an option (leading `-`), and control characters.
    """
    shown = _shown(name)
    if not name or name in (".", "..") or "/" in name or _has_controls(name):
        raise ValidationError(
            f"dataset file name {shown} is not usable: rename the file to a plain name "
            "such as 'train.jsonl'."
        )
    if len(name.encode("utf-8", "surrogateescape")) > 200:
        raise ValidationError(
            f"dataset file name {shown} is too long (over 200 bytes): rename the file."
        )
    if name.startswith("-"):
        raise ValidationError(
            f"dataset file name {shown} starts with '-', which the trainer would read as an "
            "option: rename the file."
        )
    if clash := run_dir_own(name):
        raise ValidationError(
            f"dataset file name {shown} collides with the run directory's own {clash!r}: "
            "rename the dataset file."
        )
    return name


def check_host(host: str, aliases: Collection[str] | None = None) -> str:
    """A host alias goes to asyncssh, never a shell, but must still look like one.

    An alias listed in the ssh config (`aliases`) may be any text without controls;
    anything else must be a name a resolver accepts (no empty label as in `a..b`, labels
    of at most 63 characters), so asyncssh never meets a name it cannot encode.
    """
    ok = (isinstance(host, str) and 0 < len(host) <= 255 and not host.startswith("-")
          and not _has_controls(host))
    if ok and not (aliases is not None and host in aliases):
        ok = bool(HOSTNAME_RE.fullmatch(host)) and len(host.rstrip(".")) <= 253
        if ok and ":" not in host:
            try:
                host.encode("idna")
            except UnicodeError:
                ok = False
    if not ok:
        raise ValidationError(
            f"host {_shown(host if isinstance(host, str) else str(host))} is not usable: "
            "give an alias from ~/.ssh/config."
        )
    return host


MAX_RETRIES = 20


def check_retries(retries: int) -> int:
    """`--retries N` / config.toml's `retries`: how often a failed run is tried again."""
    if not 0 <= retries <= MAX_RETRIES:
        raise ValidationError(f"--retries must be 0 to {MAX_RETRIES}, not {retries}.")
    return retries


_DURATION_RE = re.compile(r"([0-9]{1,6})([smh]?)")
DEFAULT_STALL_AFTER = 15 * 60


def parse_duration(text: str, what: str) -> int:
    """`20m`, `90s`, `2h` (a bare number is seconds; `0` turns it off) as seconds."""
    match = _DURATION_RE.fullmatch(text.strip())
    if not match:
        raise ValidationError(f"{what} {text!r} is not a duration: a number and s, m or h, "
                              "e.g. 20m (0: never).")
    return int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


ON_STALL = ("warn", "stop", "restart")


def check_on_stall(on_stall: str, retries: int | None, stall_after_s: int | None = None) -> str:
    """`--on-stall`: one of ON_STALL; `restart` counts against --retries, so needs some.

    `stop`/`restart` with `--stall-after 0` (never stalled) would silently do nothing, so
    they are refused; `stall_after_s` None: not known yet (the host's default applies).
    """
    if on_stall not in ON_STALL:
        raise ValidationError(f"--on-stall must be one of {', '.join(ON_STALL)}, not {on_stall!r}.")
    if on_stall != "warn" and stall_after_s == 0:
        raise ValidationError(f"--on-stall {on_stall} never acts with --stall-after 0 (never "
                              "stalled): give --stall-after a duration, e.g. 20m.")
    if on_stall == "restart" and retries == 0:
        raise ValidationError("--on-stall restart needs --retries N (each restart counts as "
                              "one retry), e.g. --retries 2.")
    return on_stall
