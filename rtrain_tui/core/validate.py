"""Validation of everything a user types that could reach a remote shell.

Messages are the seed's (`praisonai train remote`), word for word, so scripts that
match on them keep working. Every check runs before a connection is opened.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from rtrain_tui.core.errors import ValidationError

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The workdir reaches the remote shell unquoted so that `~` expands there; this
# character set is what makes that safe.
WORKDIR_RE = re.compile(r"^~?[A-Za-z0-9._/-]*$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PYTHON_RE = re.compile(r"^[A-Za-z0-9._/+~-]+$")
TRAINER_FIELDS = ("python", "dataset", "config", "gpus")

DEFAULT_WORKDIR = "~/.praisonai-train"
DEFAULT_PYTHON = "python3"
DEFAULT_TRAINER = "{python} -m praisonai_train llm {dataset} --config {config}"


def check_run_id(run_id: str) -> str:
    """Return `run_id` if usable as a directory name on the host, else raise."""
    if not RUN_ID_RE.match(run_id or ""):
        raise ValidationError(
            f"run id {run_id!r} is not usable: letters, digits, dot, dash and underscore only, "
            "starting with a letter or digit, up to 64 chars."
        )
    return run_id


def check_workdir(host: str, workdir: str) -> str:
    """Return `workdir` if it is safe to hand to the remote shell unquoted."""
    if not workdir or not WORKDIR_RE.match(workdir) or "~" in workdir[1:]:
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
    return str(PurePosixPath(path))


def check_python(python: str) -> str:
    """The interpreter is quoted anyway; refuse only what cannot be a program path."""
    if not PYTHON_RE.match(python or ""):
        raise ValidationError(
            f"python {python!r} is not usable: give a program name or path such as "
            "'python3' or '/opt/conda/bin/python'."
        )
    return python


def check_gpus(gpus: int) -> int:
    if gpus < 0:
        raise ValidationError(f"--gpus must be 0 or more, not {gpus}; use 0 for a CPU-only run.")
    return gpus


def parse_env(pairs: list[str]) -> dict[str, str]:
    """Turn `KEY=VALUE` strings into a dict; keys must be shell identifiers."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_KEY_RE.match(key):
            raise ValidationError(
                f"--env {pair!r} is not usable: write KEY=VALUE with KEY made of letters, "
                "digits and underscores, not starting with a digit."
            )
        env[key] = value
    return env


def check_trainer_template(template: str) -> str:
    """Refuse templates with unknown `{fields}` so a typo is caught before launch."""
    names = re.findall(r"{([^{}]*)}", template)
    unknown = sorted({n for n in names if n not in TRAINER_FIELDS})
    if not template.strip() or unknown:
        raise ValidationError(
            f"--trainer template {template!r} is not usable: it may use only "
            "{python}, {dataset}, {config} and {gpus}"
            + (f" (unknown: {', '.join(unknown)})." if unknown else ".")
        )
    return template


def check_local_file(kind: str, path: str | os.PathLike[str]) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValidationError(f"{kind} file {str(path)!r} does not exist or is not a file.")
    return p


def check_host(host: str) -> str:
    """A host alias goes to asyncssh, never a shell, but must still look like one."""
    if not host or host.startswith("-") or any(c.isspace() for c in host):
        raise ValidationError(f"host {host!r} is not usable: give an alias from ~/.ssh/config.")
    return host
