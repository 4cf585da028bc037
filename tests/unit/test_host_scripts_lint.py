"""Every script the client sends to a host passes `shellcheck -s sh` and `dash -n`.

Each script builder is rendered with sample values (the awkward ones: a `~` workdir, a
value with a quote and a space, several runs, every optional part switched on) and the
text is checked as the host would get it. A deliberate exception is written in the
script itself, on the line before the command, as `# shellcheck disable=SCnnnn  # why`.

Both tools must be installed (Debian: `apt-get install shellcheck dash`; `.ci/run` does
it): without them these tests fail saying so, never skip. A new public builder in a
module that builds host scripts fails `test_every_script_builder_is_linted` until it
has a sample here.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
import shutil
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest

import rtrain_tui.core
from rtrain_tui.core import host
from rtrain_tui.core.backends import slurm
from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.engine import trainer_command
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.notify import claims
from rtrain_tui.core.safety.template import render as render_trainer
from rtrain_tui.core.transport import shell

TOKEN = "0123456789abcdef0123456789abcdef"
WORKDIR = "~/.praisonai-train"
RUN_DIR = "/home/u/.praisonai-train/r1"
TRAINER = trainer_command("{python} -m praisonai_train llm {dataset} --config {config}",
                          "~/venv/bin/python", "data set's.jsonl", 2)
ENV = {"HF_HOME": "/scratch/it's here", "WANDB_MODE": "offline"}
SLURM = slurm.SlurmOptions(partition="gpu", time="1-00:00:00", account="lab",
                           sbatch_args=("--constraint=a100",))

# name -> the builder it renders, and the rendering.
SCRIPTS: dict[str, tuple[Callable[..., str], Callable[[], str]]] = {
    "resolve_workdir": (remote_sh.resolve_workdir, lambda: remote_sh.resolve_workdir(WORKDIR)),
    "notify_hook": (remote_sh.notify_hook, lambda: remote_sh.notify_hook("~/'my venv'/bin/python", ("failed", "stalled"))
                    + 'rt_notify_end "$1"\nrt_notify stalled 900\n'),
    "notify_test_dir": (remote_sh.notify_test_dir, lambda: remote_sh.notify_test_dir(WORKDIR)),
    "notify_test_send": (remote_sh.notify_test_send, lambda: remote_sh.notify_test_send(
        "/home/me/.praisonai-train/.notify-test.AbC123", "~/venv/bin/python", "rented box")),
    "claim_notify": (claims.claim_script, lambda: claims.claim_script(
        [(WORKDIR, "r1", "failed"), ("/data/runs", "r-2.b", "stalled")])),
    "python_facts": (remote_sh.python_facts, lambda: remote_sh.python_facts("~/venv/bin/python")),
    "preflight": (direct_sh.preflight, lambda: direct_sh.preflight("python3", WORKDIR)),
    "make_run_dir": (remote_sh.make_run_dir, lambda: remote_sh.make_run_dir(WORKDIR, "r1", TOKEN)),
    "remove_unlaunched": (remote_sh.remove_unlaunched,
                          lambda: remote_sh.remove_unlaunched(WORKDIR, "r1", TOKEN)),
    "wrapper": (direct_sh.wrapper, lambda: direct_sh.wrapper(TRAINER, ENV)),
    "wrapper_no_env": (direct_sh.wrapper, lambda: direct_sh.wrapper(TRAINER, {})),
    "wrapper_retries": (direct_sh.wrapper, lambda: direct_sh.wrapper(TRAINER, ENV, retry=direct_sh.Retry(
        2, 30.0, 1, "python3", True, TRAINER, TRAINER + " --resume " + direct_sh.RESUME_SLOT),
        watch=direct_sh.Watch(900, 60.0, "restart"), notify=direct_sh.Notify("python3", ("failed", "stalled")))),
    "wrapper_queue": (direct_sh.wrapper, lambda: direct_sh.wrapper(TRAINER, ENV, queue=(2, (0, 3)))),
    "claim_gpus": (direct_sh.claim_gpus, lambda: direct_sh.claim_gpus(WORKDIR, "r1", [0, 3])),
    "run_states_then_gpu_sample_held": (direct_sh.held_gpus, lambda: direct_sh.run_states(
        [(WORKDIR, "r1")]) + direct_sh.gpu_sample() + direct_sh.held_gpus(WORKDIR)),
    "launch": (direct_sh.launch, lambda: direct_sh.launch(RUN_DIR, TOKEN)),
    "run_states": (direct_sh.run_states, lambda: direct_sh.run_states(
        [(WORKDIR, "r1"), ("/data/runs", "r-2.b")], need_end=[1])),
    "run_states_none": (direct_sh.run_states, lambda: direct_sh.run_states([])),
    "run_states_gpus": (direct_sh.run_states, lambda: direct_sh.run_states(
        [(WORKDIR, "r1")], gpus=True)),
    # What a refresh sends in one round trip: new runs listed, then the probe.
    "find_runs_then_run_states": (remote_sh.find_runs, lambda: remote_sh.find_runs(
        [WORKDIR, "/data/runs"], [{"r1", "r2"}], remote_sh.FIND_LIMIT)
        + direct_sh.run_states([(WORKDIR, "r1")], [0], gpus=True)),
    "find_runs_unlimited": (remote_sh.find_runs, lambda: remote_sh.find_runs([WORKDIR])),
    "run_states_then_gpu_sample": (direct_sh.gpu_sample, lambda: direct_sh.run_states(
        [(WORKDIR, "r1")]) + direct_sh.gpu_sample()),
    "stop_signal": (direct_sh.stop_signal, lambda: direct_sh.stop_signal(WORKDIR, "r1", TOKEN)),
    "stop_signal_kill": (direct_sh.stop_signal,
                         lambda: direct_sh.stop_signal(WORKDIR, "r1", TOKEN, "KILL")),
    "run_alive_count": (direct_sh.run_alive_count, lambda: direct_sh.run_alive_count(WORKDIR, "r1")),
    # The rest of a ladder, for the attempt its SIGTERM found.
    "stop_signal_kill_attempt": (direct_sh.stop_signal,
                                 lambda: direct_sh.stop_signal(WORKDIR, "r1", TOKEN, "KILL", TOKEN)),
    "run_alive_count_attempt": (direct_sh.run_alive_count,
                                lambda: direct_sh.run_alive_count(WORKDIR, "r1", TOKEN)),
    "mark_stopped": (remote_sh.mark_stopped, lambda: remote_sh.mark_stopped(WORKDIR, "r1", 143)),
    "link_or_copy": (remote_sh.link_or_copy, lambda: remote_sh.link_or_copy(
        "/home/u/.praisonai-train/.datasets/ab12", f"{RUN_DIR}/data set's.jsonl")),
    "checksums": (remote_sh.checksums, lambda: remote_sh.checksums(RUN_DIR, ["a b", "-", "c'd"])),
    "transfer_command": (remote_sh.transfer_command, lambda: remote_sh.transfer_command(
        "~/venv/bin/python", "send", b"/home/u/r1", b"lora_model")),
    "transfer_command_recv": (remote_sh.transfer_command, lambda: remote_sh.transfer_command(
        "python3", "recv", b"/home/u/.datasets", 1234)),
    "resume_facts": (remote_sh.resume_facts, lambda: remote_sh.resume_facts(WORKDIR, "r1")),
    "resume": (remote_sh.resume, lambda: remote_sh.resume(
        WORKDIR, "r1", token=TOKEN, previous_token=TOKEN[::-1], attempt=2,
        checkpoint="outputs/checkpoint-150", edit_config=True,
        separator="=== attempt 2: resuming from outputs/checkpoint-150 ===",
        ended_record='{"attempt": 1, "reason": "it\'s gone"}', launch_file="run.sh")),
    "checkpoints": (remote_sh.checkpoints,
                    lambda: remote_sh.checkpoints(WORKDIR, "r1", "ck_0123456789abcdef_end")),
    "free_kb": (remote_sh.free_kb, lambda: remote_sh.free_kb(f"{RUN_DIR}/it's")),
    "write_manifest": (remote_sh.write_manifest, lambda: remote_sh.write_manifest(
        "/home/u/it's/.dataset-chunks", "ab" * 32,
        "rtrain-cdc 1 30 2\n10 " + "01" * 32 + "\n20 " + "02" * 32 + "\n", "0123abcd")),
    "upload_prepare": (remote_sh.upload_prepare, lambda: remote_sh.upload_prepare(
        "/home/u/.praisonai-train/.datasets", 1234, "/home/u/.praisonai-train/.dataset-chunks")),
    "slurm.batch_script": (slurm.batch_script, lambda: slurm.batch_script(
        "r1", TOKEN, TRAINER, ENV, SLURM, 2)),
    "slurm.batch_script_retries": (slurm.batch_script, lambda: slurm.batch_script(
        "r1", TOKEN, TRAINER, ENV, SLURM, 2, attempt=2, retry=direct_sh.Retry(
            2, 30.0, 2, "python3", True, TRAINER, TRAINER + " --resume " + direct_sh.RESUME_SLOT),
        watch=direct_sh.Watch(900, 60.0, "restart"))),
    "slurm.batch_script_watch": (slurm.batch_script, lambda: slurm.batch_script(
        "r1", TOKEN, TRAINER, {}, SLURM, 1, watch=direct_sh.Watch(900, 60.0, "stop"),
        notify=remote_sh.Notify("python3", ("stalled",)))),
    "slurm.batch_script_notify": (slurm.batch_script, lambda: slurm.batch_script(
        "r1", TOKEN, TRAINER, ENV, SLURM, 2, notify=remote_sh.Notify("python3", ("failed", "completed")))),
    "slurm.batch_script_nodes": (slurm.batch_script, lambda: slurm.batch_script(
        "r1", TOKEN, render_trainer(slurm.MULTI_NODE_TRAINER, "~/venv/bin/python", "t.jsonl", 4,
                                    slurm.trainer_values(2)),
        {}, slurm.SlurmOptions(nodes=2, gpus_per_node=4), 4)),
    "slurm.submit": (slurm.submit, lambda: slurm.submit(RUN_DIR, TOKEN)),
    "slurm.run_states": (slurm.run_states, lambda: slurm.run_states(
        [(WORKDIR, "r1"), ("/data/runs", "r2")])),
    "slurm.stop_signal": (slurm.stop_signal, lambda: slurm.stop_signal(WORKDIR, "r1", TOKEN, False)),
    "slurm.stop_signal_full": (slurm.stop_signal,
                               lambda: slurm.stop_signal(WORKDIR, "r1", TOKEN, True)),
    "slurm.job_state": (slurm.job_state, lambda: slurm.job_state(WORKDIR, "r1")),
    # The rest of a stop, for the job its first sending found.
    "slurm.stop_signal_job": (slurm.stop_signal,
                              lambda: slurm.stop_signal(WORKDIR, "r1", TOKEN, True, "123_4")),
    "slurm.job_state_job": (slurm.job_state, lambda: slurm.job_state(WORKDIR, "r1", "123")),
    "slurm.preflight": (slurm.preflight, lambda: slurm.preflight("python3", WORKDIR)),
    # How the long-lived shell runs each script under timeout(1) (transport/shell.py).
    "connection.under_timeout": (shell.under_timeout, lambda: shell.under_timeout(
        remote_sh.mark_stopped(WORKDIR, "r1", 0), 30)),
    "connection.under_timeout_piped": (shell.under_timeout, lambda: shell.under_timeout(
        remote_sh.mark_stopped(WORKDIR, "r1", 0), 30, piped=True)),
}

# Public functions in the script modules that return a fragment or a checked value, not
# a script: each is rendered inside the scripts above.
NOT_SCRIPTS = {
    "rtrain_tui.core.host.text",  # the loader: what it reads is rendered above
    "rtrain_tui.core.host.render",
    "rtrain_tui.core.host.source",
    "rtrain_tui.core.host.assign",
    "rtrain_tui.core.host.remote_sh.check_token",  # a validated value
    "rtrain_tui.core.host.remote_sh.run_dir_word",  # one word of a script
    "rtrain_tui.core.host.remote_sh.workdir_assign",  # the first line of several scripts
    "rtrain_tui.core.host.remote_sh.run_dir_assign",  # likewise
    # The retry loop and the watchdog: fragments of each backend's wrapper ("wrapper_retries").
    "rtrain_tui.core.host.unattended.retry_loop",
    "rtrain_tui.core.host.unattended.watch_start",
    "rtrain_tui.core.host.unattended.watched",
}


def _script_modules() -> list[object]:
    """The modules that build host scripts: the backends (their scripts.py) and the host
    package (remote_sh)."""
    found: list[object] = []
    for info in pkgutil.walk_packages(rtrain_tui.core.__path__, "rtrain_tui.core."):
        if info.name.split(".")[2] in ("backends", "host"):  # rtrain_tui.core.<this>...
            found.append(importlib.import_module(info.name))
    return found


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: the host scripts are linted with it "
                    f"(Debian: apt-get install {name}; .ci/run installs it)", pytrace=False)
    return path


def lint(text: str) -> list[str]:
    """shellcheck's findings (`line:col: level: message [SCnnnn]`) and dash's syntax errors."""
    check = subprocess.run([_tool("shellcheck"), "--norc", "-s", "sh", "-f", "gcc", "-"],
                           input=text, capture_output=True, text=True, timeout=60)
    problems = [line.removeprefix("-:") for line in check.stdout.splitlines() if line.strip()]
    if check.returncode not in (0, 1) or (check.returncode == 1 and not problems):
        problems.append(f"shellcheck failed: {check.stderr.strip()}")
    return problems + dash_syntax(text)


def dash_syntax(text: str) -> list[str]:
    """dash's syntax errors, as `dash -n: ...`."""
    syntax = subprocess.run([_tool("dash"), "-n"], input=text, capture_output=True, text=True,
                            timeout=60)
    return [f"dash -n: {syntax.stderr.strip()}"] if syntax.returncode != 0 else []


@functools.cache
def _shellchecked() -> dict[str, list[str]]:
    """shellcheck's findings for every sample, as `lint` words them, from one shellcheck
    per CPU (two here) over a share of the files, side by side.

    shellcheck's time goes with the text it reads (5 s of CPU for these samples, in one
    process or in fifty), so one per sample left the second core idle while the fast
    lane waited. Each file is checked on its own (no `source` is followed), as alone."""
    import os
    import tempfile

    texts = {name: make() for name, (_, make) in SCRIPTS.items()}
    shares: list[list[str]] = [[] for _ in range(max(1, min(4, os.cpu_count() or 1)))]
    sizes = [0] * len(shares)
    for name in sorted(texts, key=lambda n: -len(texts[n])):  # the biggest first, to the lightest share
        i = sizes.index(min(sizes))
        shares[i].append(name)
        sizes[i] += len(texts[name])
    found: dict[str, list[str]] = {name: [] for name in texts}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in texts.items():
            Path(tmp, f"{name}.sh").write_text(text)
        runs = [(share, subprocess.Popen(
            [_tool("shellcheck"), "--norc", "-s", "sh", "-f", "gcc", *(f"{n}.sh" for n in share)],
            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            for share in shares if share]
        for share, proc in runs:
            out, err = proc.communicate(timeout=300)
            for line in out.splitlines():
                file, _, finding = line.partition(":")
                if line.strip():
                    found[file.removesuffix(".sh")].append(finding)
            if proc.returncode not in (0, 1) or (proc.returncode == 1 and not any(
                    found[n] for n in share)):
                for name in share:
                    found[name].append(f"shellcheck failed: {err.strip()}")
    return found


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_host_script_passes_shellcheck_and_dash(name: str) -> None:
    text = SCRIPTS[name][1]()
    problems = _shellchecked()[name] + dash_syntax(text)
    numbered = "\n".join(f"{i:4} {line}" for i, line in enumerate(text.splitlines(), 1))
    assert not problems, f"{name}:\n" + "\n".join(problems) + f"\n--- the script ---\n{numbered}"


def test_every_script_builder_is_linted() -> None:
    rendered = {fn for fn, _ in SCRIPTS.values()}
    missing = []
    for module in _script_modules():
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            qual = f"{fn.__module__}.{name}"
            if (fn.__module__ == module.__name__ and not name.startswith("_")  # type: ignore[attr-defined]
                    and fn.__annotations__.get("return") == "str"
                    and fn not in rendered and qual not in NOT_SCRIPTS):
                missing.append(qual)
    assert not missing, f"script builders with no sample in SCRIPTS: {missing}"


def test_every_host_file_is_in_a_linted_script() -> None:
    """No `.sh` file in the package escapes the lint: each one's lines (slots aside) are
    in some rendered sample."""
    rendered = [make() for _, make in SCRIPTS.values()]
    core = Path(rtrain_tui.core.__file__).parent
    files = sorted(core.rglob("*.sh"))
    assert core / "host" / "make_run_dir.sh" in files
    assert core / "host" / "liveness.sh" in files
    assert core / "backends" / "slurm" / "submit.sh" in files
    unused = []
    for path in files:
        package = ".".join(("rtrain_tui", "core", *path.parent.relative_to(core).parts))
        text = host.text(path.name, package)
        pieces = [p for p in re.split(r"^#@ [a-z_]+\n", text, flags=re.M) if p]
        if not any(all(p in r for p in pieces) for r in rendered):
            unused.append(str(path.relative_to(core)))
    assert not unused, f"host files in no sample of SCRIPTS: {unused}"


def test_host_files_fill_every_slot_and_drop_reader_notes() -> None:
    direct = direct_sh.__package__
    assert "\n## " in (resources.files(host) / "liveness.sh").read_text()
    assert "\n## " not in host.text("liveness.sh")
    assert "#@" not in direct_sh.wrapper("true", {})
    with pytest.raises(ValueError, match="slots"):
        host.render("wrapper.sh", direct, trainer="true\n")
    with pytest.raises(ValueError, match="whole lines"):
        host.render("preflight.sh", direct, python_facts="x", disk_free="")
    assert host.assign(a="it's", b=3) == "a='it'\"'\"'s'\nb=3\n"


def test_lint_catches_what_it_is_for() -> None:
    """The gate can fail: a non-POSIX test, an unused variable, a syntax error."""
    assert any("SC3013" in p for p in lint('[ "$1" -ef "$2" ] && echo same\n'))
    assert any("SC2034" in p for p in lint("unused=1\necho hi\n"))
    assert any(p.startswith("dash -n") for p in lint("if true; then echo x\n"))
    assert lint('x=1\necho "$x"\n') == []
