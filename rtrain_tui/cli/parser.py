"""Every command's options: `build_parser`, the one argparse tree `entry` parses with."""

from __future__ import annotations

import argparse
from pathlib import Path

from rtrain_tui.cli.base import ALL_HOSTS
from rtrain_tui.core import backends
from rtrain_tui.core.metrics import metrics_format
from rtrain_tui.core.runs.index import PRUNABLE
from rtrain_tui.core.safety import validate
from rtrain_tui.version import __version__


def _add_remote(p: argparse.ArgumentParser, python: bool = True, of_a_run: bool = True) -> None:
    """--workdir (and --python); `of_a_run`: the command names a run, whose recorded
    workdir is the default (`preflight` and `start` have no run yet)."""
    recorded = "the one the run index recorded for this run, else " if of_a_run else ""
    p.add_argument("--workdir", default=None,
                   help=f"run directory parent on the host (default: {recorded}"
                   f"{validate.DEFAULT_WORKDIR})")
    if python:
        p.add_argument("--python", default=validate.DEFAULT_PYTHON,
                       help="python on the host (default: %(default)s)")


HOST_HELP = "an alias from the ssh config (`demo` with --demo)"
RUN_HELP = "the run id `start` printed (`rtrain-tui runs` lists them)"
JSON_HELP = "print JSON instead of text (for scripts)"
GPUS_HELP = "GPUs needed; 0 for a CPU-only run (default: 1; 0 on the demo host)"
DEMO_HELP = "add the built-in demo host `demo` (no GPU box needed)"


def _command_parser() -> argparse.ArgumentParser:
    """Options every command accepts after its name too (`rtrain-tui status demo RUN --demo`).

    SUPPRESS as default: a command that was not given one keeps the value given before
    the command name, instead of resetting it.
    """
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--demo", action="store_true", default=argparse.SUPPRESS, help=DEMO_HELP)
    return common


def _add_slurm(p: argparse.ArgumentParser, start: bool) -> None:
    """The Slurm flags; each overrides the host's config.toml default."""
    g = p.add_argument_group("Slurm (a login node: --backend slurm, or backend = \"slurm\" in config.toml)")
    g.add_argument("--backend", default=None, choices=backends.BACKENDS,
                   help="how runs are launched (default: the host's config.toml setting, else direct)")
    g.add_argument("--partition", default=None, help="Slurm partition")
    g.add_argument("--gpus-per-node", type=int, default=None, help="default: --gpus")
    if not start:
        return
    g.add_argument("--nodes", type=int, default=None, help="nodes (default 1; >1: srun + torchrun)")
    g.add_argument("--time", default=None, help="time limit, e.g. 30, 4:00:00, 1-12:00:00")
    g.add_argument("--account", default=None, help="Slurm account to charge")
    g.add_argument("--qos", default=None, help="Slurm quality of service")
    g.add_argument("--sbatch-arg", action="append", default=[], metavar="--NAME=VALUE",
                   help="one more sbatch option, e.g. --sbatch-arg=--constraint=a100 (repeatable)")


RAW_HELP = ("print the log's bytes as the trainer wrote them, escape sequences included "
            "(default: terminal control sequences are removed)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rtrain-tui",
        description="Start, watch, fetch from and stop fine-tuning runs on SSH GPU hosts. "
        "With no command: the full-screen app.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--ssh-config", type=Path, default=None,
                        help="ssh config to read hosts from (default: ~/.ssh/config)")
    parser.add_argument("--index", type=Path, default=None,
                        help="run index (default: $XDG_DATA_HOME/rtrain-tui/runs.toml)")
    parser.add_argument("--demo", action="store_true", help=DEMO_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = [_command_parser()]

    p = sub.add_parser("preflight", help="check that a host is ready to train", parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("--gpus", type=int, default=None, help=GPUS_HELP)
    _add_remote(p, of_a_run=False)
    _add_slurm(p, start=False)
    p.add_argument("--json", action="store_true", help=JSON_HELP)

    p = sub.add_parser("start", help="ship config and dataset, launch the trainer detached",
                       parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("-c", "--config", required=True, help="training config (YAML)")
    p.add_argument("-d", "--dataset", default=None, help="dataset file, shipped under its own name")
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs needed; 0 for a CPU-only run (default: 1, or as many as --gpu-ids "
                   "names). The least busy free ones are chosen and set as CUDA_VISIBLE_DEVICES")
    p.add_argument("--gpu-ids", default=None, metavar="IDS",
                   help="choose the GPUs by hand, e.g. 0,3 (nvidia-smi's numbers)")
    p.add_argument("--allow-busy", action="store_true",
                   help="take GPUs another process is using rather than refuse")
    p.add_argument("--retries", type=int, default=None, metavar="N",
                   help="when the trainer fails (not by a stop), the host resumes it from its "
                   "newest complete checkpoint, up to N times (default: config.toml's "
                   "`retries`, else 0); a Slurm job of one node retries inside the job")
    p.add_argument("--queue", action="store_true",
                   help="fewer GPUs free than asked: wait for them on the host, in its queue "
                   "(state `queued`), rather than refuse; the host gives them in queue order")
    p.add_argument("--stall-after", default=None, metavar="DURATION",
                   help="a running run whose log has not grown this long is stalled, e.g. 20m "
                   "(default: config.toml's `stall_after`, else 15m; 0: never)")
    p.add_argument("--on-stall", default="warn", choices=("warn", "stop", "restart"),
                   help="what the host does with a stalled run: say so (default), stop it, or "
                   "stop and resume it from its newest complete checkpoint (counts as a retry)")
    p.add_argument("--run-id", default=None, help="default: run-<epoch>")
    _add_remote(p, of_a_run=False)
    p.add_argument("--follow", action=argparse.BooleanOptionalAction, default=True,
                   help="stream the log until the run ends (default: on)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment for the trainer (repeatable)")
    p.add_argument("--raw", action="store_true", help=RAW_HELP)
    p.add_argument("--trainer", default=validate.DEFAULT_TRAINER, metavar="TEMPLATE",
                   help="command template with {python} {dataset} {config} {gpus}, and "
                   "{nodes} {node_rank} {master_addr} {master_port} for Slurm jobs of several "
                   "nodes (default: %(default)s)")
    _add_slurm(p, start=True)

    for name, text in (("tail", "replay and follow a run's log until it ends"),
                       ("status", "print the run's state")):
        p = sub.add_parser(name, help=text, parents=common)
        p.add_argument("host", help=HOST_HELP)
        p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
        _add_remote(p)
        if name == "status":
            p.add_argument("--json", action="store_true", help=JSON_HELP)
        else:
            p.add_argument("--raw", action="store_true", help=RAW_HELP)

    p = sub.add_parser("metrics", help="print a run's loss curve, progress and ETA parsed from its log",
                       parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
    _add_remote(p, python=False)
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="summary and series as JSON")
    shape.add_argument("--csv", action="store_true",
                       help="one row per step: " + ",".join(metrics_format.COLUMNS))

    p = sub.add_parser("fetch", help="copy a file or directory from the run directory",
                       parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
    p.add_argument("path", metavar="PATH", help="relative to the run dir, e.g. lora_model")
    p.add_argument("--out", type=Path, default=Path("."), help="local directory (default: .)")
    p.add_argument("--incomplete", action="store_true",
                   help="fetch a checkpoint-N directory even when it was cut off mid-save")
    _add_remote(p, python=False)
    p.add_argument("--python", default=None,
                   help="python on the host, which runs the transfer (default: the one the run "
                   f"index recorded for this run, else {validate.DEFAULT_PYTHON})")

    p = sub.add_parser("stop", help="stop the run's whole process group and verify it is gone",
                       parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds between SIGTERM and SIGKILL (default: %(default)s)")
    _add_remote(p)

    p = sub.add_parser("resume", help="a new attempt of a run that ended failed, stopped or lost, "
                       "in its run directory, from its newest complete checkpoint", parents=common)
    p.add_argument("host", help=HOST_HELP)
    p.add_argument("run_id", metavar="RUN_ID", help=RUN_HELP)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--from", dest="from_path", default=None, metavar="PATH",
                     help="resume from this complete checkpoint-N directory (relative to the "
                     "run dir, e.g. outputs/checkpoint-150) instead of the newest one")
    how.add_argument("--restart", action="store_true",
                     help="run it again from the start (no checkpoint), in the same directory")
    p.add_argument("--queue", action="store_true",
                   help="GPUs busy: wait for them on the host, in its queue, rather than refuse "
                   "(as start --queue)")
    _add_remote(p, python=False)

    p = sub.add_parser("runs", help="list the runs in the local index", parents=common)
    p.add_argument("--refresh", action="store_true",
                   help="update the runs' states from their hosts (a run that ended, with its "
                   "end time known, is not asked again)")
    p.add_argument("--all", action="store_true", dest="all_runs",
                   help="with --refresh: ask about the ended runs too")
    p.add_argument("--discover", nargs="?", const=ALL_HOSTS, default=None, metavar="HOST",
                   help="first add the runs found on HOST (default: every host in the index) "
                   "that were started elsewhere, e.g. by `praisonai train remote`")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.add_argument("--prune", action="store_true",
                   help="remove old ended runs from the index (never anything on a host), "
                   "saying which first; needs --older-than")
    p.add_argument("--older-than", default=None, metavar="AGE",
                   help="with --prune: runs that ended more than AGE ago (90d, 12w, 36h)")
    p.add_argument("--state", default=None, metavar="STATES",
                   help="with --prune: only these, comma-separated (default: "
                   f"{','.join(PRUNABLE)})")
    p.add_argument("--dry-run", action="store_true", help="with --prune: say what it would remove")

    p = sub.add_parser("watch", help="headless: refresh every host in the index every N "
                       "seconds and send the notifications it sees; Ctrl-C ends it", parents=common)
    p.add_argument("--every", type=float, default=30.0, metavar="SECONDS",
                   help="seconds between refreshes (default: %(default)s)")

    p = sub.add_parser("notify", help="notifications: `notify test [HOST]` sends a test "
                       "message to every URL in config.toml and says which arrived", parents=common)
    p.add_argument("action", choices=("test",),
                   help="`test`: send a test message to every URL and say which arrived")
    p.add_argument("host", nargs="?", default=None, metavar="HOST",
                   help="only the URLs for HOST's runs ([notify] urls and its own notify); "
                   "with [notify] on_host, HOST also sends its webhook URLs the test itself")

    p = sub.add_parser("costs", help="what the runs in the index cost (config.toml's "
                       "price_per_hour / price_per_gpu_hour); asks no host", parents=common)
    p.add_argument("--since", default=None, metavar="AGE",
                   help="only what was spent in the last AGE (7d, 12w, 36h)")
    p.add_argument("--by", default="host", choices=("host", "day", "run"),
                   help="one line per host, per UTC day or per run (default: %(default)s)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser
