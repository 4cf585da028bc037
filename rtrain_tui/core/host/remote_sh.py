"""The `sh` text sent to a host that both backends share: small pure functions, one per
remote operation (a backend's own are in its `scripts.py`).

The shell itself lives in `.sh` files in `rtrain_tui/core/host/` (see its `__init__`);
these functions validate what varies per call and put it before the file's text, or
into its `#@` slots. Every value interpolated here is either validated (run id,
workdir) or passed through the one quoting function (`host.assign`, `shlex.quote`). The
workdir is the one value left unquoted, on purpose, so that the remote shell expands
its `~`; `validate.check_workdir` restricts it to characters that no shell treats
specially. Output is line-oriented `key=value` (tab-separated where a line describes
one run) so the parsers in `probes.py` never eval anything.

Scripts run inside a subshell of the host's long-lived `sh` (see `connection.py`), so
they may `exit`, `cd` and set variables freely. They target POSIX `sh` plus Linux
`/proc`, with `ps` as a fallback where `/proc` is missing.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from rtrain_tui.core import host
from rtrain_tui.core.safety import validate


def workdir_assign(workdir: str) -> str:
    # `set --` makes the shell tilde-expand the (validated, unquoted) workdir word.
    return f"set -- {workdir}; wd=$1"


def run_dir_assign(workdir: str, run_id: str) -> str:
    """`set -- RUNDIR; rd=$1`: the run dir in `$rd`, its `~` expanded (see run_dir_word)."""
    return f"set -- {run_dir_word(workdir, run_id)}; rd=$1\n"


def resolve_workdir(workdir: str) -> str:
    """Print the absolute workdir, as the remote shell expands it."""
    return f"{workdir_assign(workdir)}\n" + host.text("resolve_workdir.sh")


def python_facts(python: str) -> str:
    """Print `python=X.Y.Z` (or `missing`) and whether the trainer imports; sets $T.

    Shared by the preflight of a box and of a Slurm login node.
    """
    # Unquoted after `py=`: a leading `~/` expands there (the rest is quoted).
    return f"py={validate.python_word(python)}\n" + host.text("python_facts.sh")


# Free space where the workdir is (or its nearest existing parent): needs $wd.
DISK_FREE = host.text("disk_free.sh")

# `mtimes`: the last-write times of many files by one `stat` (see the file); the probes
# read when runs ended with it, the listing when runs started.
MTIMES = host.text("mtimes.sh")

# Where a run's attempts keep their files (see the file; core/runs/attempt_layout.py):
# every script that reads or writes an attempt's files is sent with it.
ATTEMPT = host.text("attempt.sh")


def check_token(token: str) -> str:
    """A run token is lowercase hex: it reaches scripts and grep patterns unquoted."""
    if not (8 <= len(token) <= 64) or not all(c in "0123456789abcdef" for c in token):
        raise ValueError(f"bad run token {token!r}")
    return token


def make_run_dir(workdir: str, run_id: str, token: str) -> str:
    """Create workdir (0700) and the run dir with `train.token`; print `exists` or its path.

    Idempotent: sent again after a dropped connection, it finds its own token and
    answers the same, so a retry never reads as "someone else's run".
    """
    run_dir_word(workdir, run_id)  # validates both parts
    return (f"{workdir_assign(workdir)}\n" + host.assign(run_id=run_id, tok=check_token(token))
            + ATTEMPT + host.text("make_run_dir.sh"))


def remove_unlaunched(workdir: str, run_id: str, token: str) -> str:
    """Remove a run dir we created but never launched (a start that failed or was cancelled)."""
    return (run_dir_assign(workdir, run_id) + host.assign(tok=check_token(token))
            + ATTEMPT + host.text("remove_unlaunched.sh"))


# Python buffers stdout that goes to a file (see the file); set unless the trainer's
# environment already says.
UNBUFFERED = host.text("unbuffered.sh")


def run_dir_word(workdir: str, run_id: str) -> str:
    """A run dir as one shell word, left unquoted so that a leading `~` expands.

    Safe because both parts are re-validated here: nothing in them is special to sh.
    """
    validate.check_workdir("host", workdir)
    validate.check_run_id(run_id)
    return f"{workdir.rstrip('/') or '/'}/{run_id}"


def mark_stopped(workdir: str, run_id: str, code: int) -> str:
    """Record a verified stop: `status` as the seed's wrapper would (if none), then `stopped`.

    `status` lets `praisonai train remote tail` of the run end and agree; `stopped` is
    ours, so rtrain-tui still says `stopped`. Idempotent.
    """
    return (run_dir_assign(workdir, run_id) + host.assign(code=int(code))
            + host.text("mark_stopped.sh"))


def link_or_copy(source: str, target: str) -> str:
    """Hard-link `source` to `target` (same file system), copying where links fail."""
    return host.assign(src=source, dst=target) + host.text("link_or_copy.sh")


def checksums(directory: str, rel_paths: Sequence[str]) -> str:
    """Print `sha256  ./path` for each file, relative to an absolute directory.

    Each name gets `./` in front: sha256sum reads stdin for a file named `-` even after
    `--` (found by the property tests).
    """
    files = " ".join(shlex.quote(f"./{p}") for p in rel_paths)
    return f"set -- {files}\n" + host.assign(dir=directory) + host.text("checksums.sh")


# --- transfers (see transfers/) ----------------------------------------------------
# One Python program on the host, run with the trainer's interpreter over one exec
# channel: host/transfer_program.py, its protocol described there. Its source is sent,
# its parts (transfer_program_*.py) joined into one text.
TRANSFER_PY = host.joined("transfer_program.py")


def transfer_command(python: str, mode: str, *args: bytes | int) -> str:
    """The exec command that runs TRANSFER_PY: one line, no quote inside the program.

    The program travels base64-encoded and every argument hex-encoded, so the command
    means the same to any login shell (sh, bash, zsh, fish, even csh, which refuses
    newlines inside quotes).
    """
    import base64

    if mode not in ("list", "send", "recv", "delta"):
        raise ValueError(mode)
    code = base64.b64encode(TRANSFER_PY.encode()).decode()
    words = [a.hex() or "-" if isinstance(a, bytes) else str(int(a)) for a in args]
    return (f"{validate.python_word(python)} -c "
            f"'import base64;exec(base64.b64decode(\"{code}\"))' {mode} {' '.join(words)}")


def free_kb(directory: str) -> str:
    """Print the free KiB where `directory` is (an upload that failed asks why)."""
    return host.assign(d=directory) + host.text("free_kb.sh")


def upload_prepare(cache_dir: str, size: int, chunks_dir: str = "") -> str:
    """Before shipping a dataset: make the store, drop stale parts, report space and twins.

    Prints `free_kb=N` and one `same=<name>` per stored dataset of exactly `size` bytes
    (only those can be this dataset, so only then is it worth hashing locally first).
    Temporary files older than a day are left by killed uploads: nothing trusts them,
    and they must not fill the disk. Only our own are removed, by their exact names: the
    store's `.up-*.part` (TRANSFER_PY's recv) and a run dir's `config.yaml.part`,
    `run.sh.part` and `notify.*.part` (SFTP uploads; `notify.json.part`, tokens, after 10
    minutes); a trainer's or user's `*.part` in a run dir is theirs.
    `chunks_dir`: where the stored datasets' chunk manifests are (transfers/delta.py); the
    manifests of datasets no longer stored are removed and the rest counted, `manifests=N`.
    """
    return (host.assign(d=cache_dir, size=int(size), c=chunks_dir)
            + host.text("upload_prepare.sh"))


_MANIFEST = re.compile(r"rtrain-cdc 1 [0-9]+ [0-9]+\n(?:[0-9]+ [0-9a-f]{64}\n)*")


def write_manifest(chunks_dir: str, digest: str, body: str, tag: str = "") -> str:
    """Store `body`, the chunk manifest of the stored dataset `digest` (see
    transfer_program.manifest_bytes), as `chunks_dir/<digest>`, atomically; prints
    `written=1`. Through the long-lived shell: a channel of its own cost a start 0.15-0.3 s.

    `body` must be a manifest's text (digits, hex, spaces, newlines): it goes in a
    here-document, so it is checked whole; `tag` names the temporary file (random if "").
    """
    import secrets

    if len(digest) != 64 or digest.strip("0123456789abcdef"):
        raise ValueError(f"bad digest {digest!r}")
    if not _MANIFEST.fullmatch(body):
        raise ValueError("not a manifest")
    tag = tag or secrets.token_hex(8)
    if not tag.isalnum() or not tag.isascii():
        raise ValueError(f"bad tag {tag!r}")
    return (host.assign(c=chunks_dir, sha=digest, t=f".m-{tag}.part")
            + host.render("write_manifest.sh", body=body))


# How many names `find_runs` looks at per workdir in the refresh probe: the newest, by
# the directory's mtime (a run dir's changes when its files are created, so a run started
# elsewhere is among the newest). A workdir with thousands of old runs then costs one
# `ls` per refresh, not thousands of tests, and at most this many output lines.
FIND_LIMIT = 200


def find_runs(workdirs: Sequence[str], known: Sequence[Collection[str]] = (),
              limit: int | None = None,
              ended: Sequence[Mapping[str, int | tuple[int, int]]] = ()) -> str:
    """List the run directories under each workdir that the caller does not know.

    Prints `wd<TAB>i<TAB>ABSOLUTE WORKDIR` for each workdir, then
    `run<TAB>i<TAB>NAME<TAB>EPOCH` for each directory in it that holds what a run leaves
    (`train.pid`, `status` or `train.log`, from this tool or `praisonai train remote`),
    whose name can be a run id and is not in `known[i]` (run ids, as the index has them
    there); EPOCH is when it started (its config's, pid file's or log's time). Names
    that cannot be run ids (control characters, spaces, `$(...)`, a leading `-`, longer
    than 64) are skipped here, so no name can break the line format; `ls -q` turns a
    newline in a name into `?`. With `limit`, only the newest `limit` names that can be
    run ids are looked at, so the output is at most `limit` lines per workdir.

    Known names print nothing, unless `ended[i]` gives one its recorded end (epoch
    seconds, the host's clock): then, if among the names looked at and its end mark
    (`status`, else `train.log`: what the probes read an end from) was written at
    another time since, it prints `end<TAB>i<TAB>NAME<TAB>END<TAB>ATTEMPTS<TAB>EPOCH`:
    the run went on after the end recorded (a resume, perhaps from another laptop, or
    the host's own retry); ATTEMPTS is how many it has had. An end given as (END,
    ATTEMPTS recorded) prints also when the run has had more attempts than recorded
    (END then reads `went`): a resume in the very second of the end leaves an end mark
    of the same whole second. So a refresh that carries
    this listing prints only the `wd` lines when nothing new is there. Variables are
    prefixed `fr_` so the listing can precede another probe script in one round trip.
    """
    lines = [MTIMES + ATTEMPT + host.text("find_runs.sh")]
    cap = shlex.quote("" if limit is None else str(int(limit)))
    for i, workdir in enumerate(workdirs):
        validate.check_workdir("host", workdir)
        ends = ended[i] if i < len(ended) else {}
        names = [f"{validate.check_run_id(n)}:{_end_word(ends[n])}" if n in ends
                 else validate.check_run_id(n) for n in (sorted(known[i]) if i < len(known) else ())]
        lines.append(f"fr_list {i} {workdir} {shlex.quote(' ' + ' '.join(names) + ' ')} {cap}\n")
    return "".join(lines)


def _end_word(end: int | tuple[int, int]) -> str:
    """`END:ATTEMPTS` for find_runs.sh (ATTEMPTS 0: not known, not compared)."""
    epoch, attempts = end if isinstance(end, tuple) else (end, 0)
    return f"{int(epoch)}:{int(attempts)}"


def checkpoints(workdir: str, run_id: str, marker: str) -> str:
    """List the run's `checkpoint-N` directories for the rule in runs/checkpoints.py.

    `marker` (letters, digits, `_`) ends each trainer_state.json's text: the caller makes
    it a nonce, so no file can end its own block. Prints `nodir` without the run dir.
    """
    if not marker or not marker.replace("_", "").isalnum() or not marker.isascii():
        raise ValueError(f"bad marker {marker!r}")
    return run_dir_assign(workdir, run_id) + host.assign(mk=marker) + host.text("checkpoints.sh")


def resume_facts(workdir: str, run_id: str) -> str:
    """Print what a resume reads of a run dir: `attempts=N`, `token=...`, `spec=<launch.json>`
    (or `nodir`)."""
    return run_dir_assign(workdir, run_id) + ATTEMPT + host.text("resume_facts.sh")


def resume(workdir: str, run_id: str, *, token: str, previous_token: str, attempt: int,
           checkpoint: str, edit_config: bool, separator: str, ended_record: str,
           launch_file: str) -> str:
    """Claim attempt `attempt` of an ended run and ready its directory for it (see
    resume.sh); the backend's launch script follows it in the same round trip.

    `checkpoint` (relative to the run dir, '' = from the start) is validated as a
    checkpoint path (safe characters: it is written into config.yaml in quotes);
    `previous_token` may be '' (a run from before tokens).
    """
    if checkpoint:
        validate.check_fetch_path(checkpoint)
        if not all(c.isalnum() or c in "._-/" for c in checkpoint) or not checkpoint.isascii():
            raise ValueError(f"bad checkpoint path {checkpoint!r}")
    if previous_token:
        check_token(previous_token)
    if attempt < 2 or launch_file not in ("run.sh", "run.sbatch"):
        raise ValueError(f"bad attempt {attempt} or launch file {launch_file!r}")
    return (run_dir_assign(workdir, run_id)
            + host.assign(tok=check_token(token), prev=previous_token, n=int(attempt),
                          p=int(attempt) - 1, ck=checkpoint, cfg=int(edit_config),
                          sep=separator, rec=ended_record, lf=launch_file)
            + host.text("liveness.sh") + host.text("submitting.sh") + ATTEMPT
            + host.text("resume.sh"))


def notify_test_dir(workdir: str) -> str:
    """Make a scratch dir under `workdir` for `notify test HOST`; prints `dir=PATH` (or
    `error=...`). See notify_test_dir.sh."""
    return f"{workdir_assign(workdir)}\n" + host.text("notify_test_dir.sh")


def notify_test_send(scratch: str, python: str, alias: str) -> str:
    """Send the test message from the scratch dir with `python`, then remove the dir;
    prints `URL<TAB>arrived` (or why not) per URL, masked (see notify_test_send.sh)."""
    return (host.assign(nd=scratch, nh=alias) + f"np={validate.python_word(python)}\n"
            + host.text("notify_test_send.sh"))


@dataclass(frozen=True)
class Notify:
    """The host's own notifications ([notify] on_host): the run's Python (one shell word)
    runs notify.pyz for each of `events` (plain words: failed, completed, stalled…)."""

    python_word: str
    events: tuple[str, ...]


# Seconds a Slurm job's end message may take, every URL together (host_send.deliver's
# `within`): the job, and its GPUs, end that much after the trainer at most.
FOREGROUND_SEND_S = 15


def notify_hook(python_word: str, events: Sequence[str], foreground: bool = False) -> str:
    """What a run's wrapper (a box's run.sh, a Slurm job's batch script) needs to tell its
    end (`rt_notify_end CODE`) and a stall (`rt_notify stalled AGE`) itself: see
    notify_send.sh (which needs attempt.sh: the wrapper has it). `python_word` is
    already one shell word (template.python_word).
    `foreground`: the send runs before the wrapper goes on (a job's processes end with it),
    all its URLs within FOREGROUND_SEND_S."""
    for event in events:
        if not event.isascii() or not event.isalpha() or not event.islower():
            raise ValueError(f"bad notification event {event!r}")
    return (f"rt_np={python_word}\n" + host.assign(rt_non=" ".join(events))
            + (host.assign(rt_nfg=1, rt_nw=FOREGROUND_SEND_S) if foreground else host.assign(rt_nw=""))
            + host.text("state_rule.sh") + host.text("claim_notify.sh") + host.text("notify_send.sh"))
