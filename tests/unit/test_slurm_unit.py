"""The Slurm backend's pure parts: option checks, run.sbatch, parsing Slurm's answers.

The multi-node script is run under /bin/sh here with stand-ins for `srun` and
`scontrol` (one machine cannot be two compute nodes): it proves the rendezvous values
each node's launcher receives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtrain_tui.core import backends
from rtrain_tui.core.backends.slurm import (
    MULTI_NODE_TRAINER,
    SlurmOptions,
    batch_script,
    check_sbatch_arg,
    parse_jobs,
    parse_partitions,
    parse_run_states,
    trainer_values,
)
from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.runs import hostconfig, probes
from rtrain_tui.core.safety import template

# Not test_remote_sh's token: the direct probes scan /proc for processes carrying theirs.
TOKEN = "5107" * 8


def run_line(i: int, job: str = "7", code: str = "", stop: str = "0", stopped: str = "0") -> str:
    return f"{i}\texists=1\tjob={job}\tcode={code}\tstop={stop}\tstopped={stopped}\tlaunched=1"


@pytest.mark.parametrize("run, slurm_line, word, reason", [
    (run_line(0), "J\t7|PENDING|Resources|0|", "queued", "Resources"),
    (run_line(0), "J\t7|PENDING|QOSMaxJobsPerUserLimit|0|", "queued", "QOSMaxJobsPerUserLimit"),
    (run_line(0), "J\t7|PENDING|Priority|0|\nQ\t7|3", "queued", "Priority, 3rd in the queue"),
    (run_line(0), "J\t7|PENDING|Priority|0|\nQ\t7|12", "queued", "Priority, 12th in the queue"),
    (run_line(0), "J\t7|PENDING|Priority|0|\nQ\t8|1", "queued", "Priority"),  # another job's place
    (run_line(0), "J\t7|RUNNING|None|0|", "running", ""),
    (run_line(0), "J\t7|COMPLETING|None|0|", "running", ""),
    (run_line(0, code="0"), "J\t7|COMPLETED|None|0|", "completed", ""),
    (run_line(0, code="3"), "J\t7|FAILED|NonZeroExitCode|768|", "failed (exit 3)", ""),
    (run_line(0, code="143"), "J\t7|TIMEOUT|TimeLimit|15|", "failed (exit 143)", "TIMEOUT"),
    (run_line(0), "J\t7|TIMEOUT|TimeLimit|15|", "failed (exit 143)", "TIMEOUT"),
    (run_line(0), "J\t7|OUT_OF_MEMORY|OutOfMemory|9|", "failed (exit 137)", "OUT_OF_MEMORY"),
    (run_line(0), "J\t7|NODE_FAIL|NodeDown|0|", "failed (exit 1)", "NODE_FAIL"),
    (run_line(0, stop="1"), "J\t7|CANCELLED|None|15|", "stopped", ""),
    (run_line(0, stopped="1", code="143"), "J\t7|CANCELLED|None|15|", "stopped", ""),
    (run_line(0), "J\t7|CANCELLED|None|15|", "lost", "CANCELLED"),  # someone else's scancel
    (run_line(0), "", "lost", ""),  # Slurm forgot the job and nothing was recorded
    (run_line(0, code="0"), "", "completed", ""),  # forgotten, but the exit was recorded
    (run_line(0), "C\tJobId=7 JobName=x JobState=FAILED Reason=NonZeroExitCode ExitCode=2:0",
     "failed (exit 2)", ""),
    (run_line(0), "A\t7|OUT_OF_MEMORY|0:9", "failed (exit 137)", "OUT_OF_MEMORY"),
    (run_line(0), "A\t7|CANCELLED by 0|0:0", "lost", "CANCELLED"),
    ("0\texists=1\tjob=\tcode=\tstop=0\tstopped=0\tlaunched=0", "", "unknown", ""),
    ("0\texists=0", "", "unknown", ""),
    # R02: our stop's TERM answered with exit 1 (torchrun, Lightning) is our stop
    (run_line(0, stop="1", code="1"), "J\t7|FAILED|NonZeroExitCode|256|", "stopped", ""),
    (run_line(0, stop="1", code="1"), "", "stopped", ""),
    # R01: its sbatch has not answered yet: starting, never lost
    ("0\texists=1\tjob=\tcode=\tstop=0\tstopped=0\tlaunched=1\tsubmitting=1", "", "starting",
     "submitting the job to the scheduler"),
    ("0\texists=1\tjob=\tcode=\tstop=0\tstopped=0\tlaunched=1\tsubmitting=0", "", "lost", ""),
])
def test_status_words_from_files_and_slurm(run: str, slurm_line: str, word: str, reason: str) -> None:
    [probe] = parse_run_states(f"{run}\n{slurm_line}\n", 1)
    assert (probe.state, probe.reason) == (word, reason)


WAIT = "retrying in 60 s after NCCL timeout (attempt 2 of 3)"
GAVE_UP = "missing Python module peft: pip install peft on the host (not retried: repeating cannot fix it)"


@pytest.mark.parametrize("run, slurm_line, word, reason", [
    # The job's retry loop waits between attempts: the job runs, the run waits, as on a box.
    (run_line(0) + f"\tretry={WAIT}", "J\t7|RUNNING|None|0|0|", "queued", WAIT),
    (run_line(0) + "\tretry=", "J\t7|RUNNING|None|0|0|", "running", ""),
    # A retry_wait left by a job that is gone (scancel during the wait) says nothing.
    (run_line(0, stop="1") + f"\tretry={WAIT}", "J\t7|CANCELLED|None|15|0|", "stopped", ""),
    # It gave up: why, beside the failed attempt's word.
    (run_line(0, code="1") + f"\tretry={GAVE_UP}", "J\t7|FAILED|NonZeroExitCode|256|0|",
     "failed (exit 1)", GAVE_UP),
    (run_line(0, code="0") + f"\tretry={GAVE_UP}", "J\t7|COMPLETED|None|0|0|", "completed", ""),
])
def test_the_jobs_retry_loop_is_said_as_a_boxes_is(run: str, slurm_line: str, word: str,
                                                   reason: str) -> None:
    [probe] = parse_run_states(f"{run}\n{slurm_line}\n", 1)
    assert (probe.state, probe.reason) == (word, reason)


@pytest.mark.parametrize("facts, slurm_line, word, reason, stalled, idle", [
    ("\tstalled=1020\tgpus_idle=", "J\t7|RUNNING|None|0|0|", "running", "stalled: no output for 17m", 1020, None),
    ("\tstalled=\tgpus_idle=720", "J\t7|RUNNING|None|0|0|", "running", "GPUs idle for 12m", None, 720),
    ("\tstalled=\tgpus_idle=", "J\t7|RUNNING|None|0|0|", "running", "", None, None),
    # The watchdog's file outlives a job Slurm ended: it says nothing then.
    ("\tstalled=1020", "J\t7|PENDING|Priority|0|0|", "queued", "Priority", None, None),
])
def test_the_jobs_stall_watchdog_is_said_as_a_boxes_is(facts: str, slurm_line: str, word: str,
                                                       reason: str, stalled: int | None,
                                                       idle: int | None) -> None:
    [probe] = parse_run_states(f"{run_line(0)}{facts}\n{slurm_line}\n", 1)
    assert (probe.state, probe.reason, probe.stalled_for, probe.gpus_idle_for) == (
        word, reason, stalled, idle)


@pytest.mark.parametrize("attempt, slurm_line, word", [
    # `scontrol requeue`: attempt 0 wrote 143 when the requeue's SIGTERM ended it
    ("0", "J\t7|PENDING|BeginTime|0|1|", "queued"),
    ("0", "J\t7|REQUEUED|None|0|1|", "running"),
    ("0", "J\t7|RUNNING|None|0|1|", "running"),
    ("", "J\t7|RUNNING|None|0|1|", "running"),  # no attempt recorded: the first one's
    ("0", "C\tJobId=7 JobState=PENDING Reason=BeginTime Restarts=1 ExitCode=0:15", "queued"),
    ("1", "J\t7|RUNNING|None|0|1|", "failed (exit 143)"),  # this attempt's own end
    ("0", "J\t7|TIMEOUT|TimeLimit|0|0|", "failed (exit 143)"),
    ("0", "A\t7|FAILED|0:15", "failed (exit 143)"),  # sacct does not say: the file stands
])
def test_an_exit_code_counts_only_for_the_attempt_that_wrote_it(attempt: str, slurm_line: str,
                                                                word: str) -> None:
    run = f"0\texists=1\tjob=7\tcode=143\tattempt={attempt}\tstop=0\tstopped=0\tlaunched=1"
    [probe] = parse_run_states(f"{run}\n{slurm_line}\n", 1)
    assert probe.state == word


def test_queued_is_a_word_of_its_own_and_not_final() -> None:
    assert probes.QUEUED == "queued" and not probes.is_final(probes.QUEUED)


def test_squeue_wins_over_scontrol_and_sacct_and_host_text_is_made_inert() -> None:
    jobs = parse_jobs("J\t5|PENDING|Pri\x1b]0;x\x07ority|0|\n"
                      "C\tJobId=5 JobState=RUNNING Reason=None ExitCode=0:0\n"
                      "A\t5|COMPLETED|0:0\nJ\tgarbage\nA\tx|y\n")
    assert list(jobs) == ["5"] and jobs["5"].state == "PENDING"
    assert "\x1b" not in jobs["5"].reason and "\x07" not in jobs["5"].reason


def test_one_probe_line_per_run_even_for_many_runs() -> None:
    out = "\n".join(run_line(i, job=str(100 + i)) for i in range(20))
    out += "\n" + "\n".join(f"J\t{100 + i}|RUNNING|None|0|" for i in range(20))
    assert [p.state for p in parse_run_states(out, 20)] == ["running"] * 20


def test_partitions_count_gpus_per_node_once() -> None:
    rows = ["gpu*|n1|idle|gpu:a100:4(S:0-1)|gpu:a100:1(IDX:0)|",
            "gpu*|n2|mixed|gpu:4|gpu:4(IDX:0-3)|",
            "cpu|c1|down*|(null)|gpu:0|",
            "gpu*|n1|idle|gpu:a100:4(S:0-1)|gpu:a100:1(IDX:0)|"]
    gpu, cpu = parse_partitions(rows[2:] + rows[:2])
    assert (gpu.name, gpu.default, gpu.gpus_total, gpu.gpus_used) == ("gpu", True, 8, 5)
    assert gpu.summary() == "gpu*: 2 node(s) (1 idle, 1 mixed); GPUs 3 free of 8"
    assert (cpu.name, cpu.default, cpu.gpus_total) == ("cpu", False, 0)


@pytest.mark.parametrize("arg", ["--constraint=a100", "--exclusive", "--mem=64G",
                                 "--mail-user=me@lab.org", "--gres=gpu:a100:2"])
def test_sbatch_args_accepted(arg: str) -> None:
    assert check_sbatch_arg(arg) == arg


@pytest.mark.parametrize("arg, why", [
    ("--output=/etc/passwd", "rtrain-tui sets it itself"), ("--wrap=id", "sets it itself"),
    ("--partition=x", "use --partition instead"), ("--time=5", "use --time instead"),
    ("-p gpu", "not usable"), ("--comment=a b", "not usable"), ("--x=$(id)", "not usable"),
    ("--x=`id`", "not usable"), ("--x=a\n#SBATCH --wrap=id", "not usable"), ("", "not usable"),
])
def test_sbatch_args_refused(arg: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        check_sbatch_arg(arg)


@pytest.mark.parametrize("field, value, message", [
    ("partition", "gpu;id", "not a Slurm name"), ("account", "a b", "not a Slurm name"),
    ("qos", "-x", "not a Slurm name"), ("time", "1h", "not a Slurm time limit"),
    ("time", "4:00:00\n", "not a Slurm time limit"), ("nodes", 0, "from 1 to 1024"),
    ("gpus_per_node", 65, "from 0 to 64"), ("nodes", True, "from 1 to 1024"),
])
def test_slurm_options_refused_with_one_line(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as err:
        SlurmOptions(**{field: value}).validated()  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_accepted_options_make_sbatch_lines_without_spaces_or_shell_text(text: str) -> None:
    """Whatever is accepted becomes `#SBATCH --name=value` lines sbatch reads one word each."""
    for opts in (SlurmOptions(partition=text), SlurmOptions(time=text), SlurmOptions(account=text),
                 SlurmOptions(sbatch_args=(text,))):
        try:
            opts.validated()
        except ValidationError:
            continue
        for line in opts.sbatch_lines("r1", 1):
            rest = line.removeprefix("#SBATCH ")
            assert rest.startswith("--") and not any(c in rest for c in " \t\n\r$`'\"\\;|&<>()")


def test_sbatch_lines_from_options() -> None:
    opts = SlurmOptions(partition="gpu", nodes=2, gpus_per_node=4, time="1-00:00:00",
                        account="lab", qos="high", sbatch_args=("--constraint=a100",))
    assert opts.sbatch_lines("r1", 1) == [
        "#SBATCH --job-name=rtrain-r1", "#SBATCH --output=train.log", "#SBATCH --open-mode=append",
        "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=gpu", "#SBATCH --time=1-00:00:00", "#SBATCH --account=lab",
        "#SBATCH --qos=high", "#SBATCH --constraint=a100"]
    assert "#SBATCH --gpus-per-node=2" in SlurmOptions().sbatch_lines("r", 2)
    assert not any("gpus" in line for line in SlurmOptions().sbatch_lines("r", 0))


def _stand_ins(bin_dir: Path) -> None:
    """`srun` runs its command once per node as Slurm would (SLURM_NODEID differs per node);
    `scontrol show hostnames` expands the node list."""
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        '#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\n'
        'i=0; while [ $i -lt "$SLURM_NNODES" ]; do SLURM_NODEID=$i "$@" & i=$((i + 1)); done\n'
        'wait\n')
    (bin_dir / "scontrol").write_text('#!/bin/sh\nprintf "node-a\\nnode-b\\n"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)


def test_two_node_script_gives_each_node_its_rank_and_the_first_node_as_rendezvous(tmp_path: Path) -> None:
    _stand_ins(tmp_path / "bin")
    # The trainer stand-in prints what torchrun would receive on each node.
    trainer = ("echo node={node_rank} of={nodes} at={master_addr}:{master_port} "
               "gpus={gpus} {dataset} >> ranks.txt")
    opts = SlurmOptions(nodes=2, gpus_per_node=4)
    cmd = template.render(trainer, "python3", "data set.jsonl", 4, trainer_values(2))
    script = batch_script("r1", TOKEN, cmd, {"HF_HOME": "/x y"}, opts, 4)
    (tmp_path / "run.sbatch").write_text(script)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
           "SLURM_JOB_ID": "42", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node-[a-b]",
           "SLURM_RESTART_COUNT": "2"}
    p = subprocess.run(["/bin/sh", "run.sbatch"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    assert sorted((tmp_path / "ranks.txt").read_text().splitlines()) == [
        "node=0 of=2 at=node-a:29500 gpus=4 data set.jsonl",
        "node=1 of=2 at=node-a:29500 gpus=4 data set.jsonl"]
    assert (tmp_path / "status").read_text() == "0\n"
    assert (tmp_path / "status_attempt").read_text() == "2\n"  # the third attempt wrote it
    assert (tmp_path / "slurm_job_id").read_text() == "42\n"


def test_a_job_holds_its_gpus_per_node_on_each_of_its_nodes() -> None:
    slurm = backends.get("slurm")
    assert slurm.placement(2, SlurmOptions(nodes=3)) == (3, 2)  # --gpus per node by default
    assert slurm.placement(1, SlurmOptions(nodes=2, gpus_per_node=4)) == (2, 4)
    assert backends.get("direct").placement(2, None) == (1, 2)


def test_default_multi_node_command_is_torchrun_with_rendezvous() -> None:
    cmd = template.render(MULTI_NODE_TRAINER, "python3", None, 8, trainer_values(4))
    assert cmd == ('python3 -m torch.distributed.run --nnodes "$SLURM_NNODES" --node_rank '
                   '"$SLURM_NODEID" --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint '
                   '"$MASTER_ADDR":"$MASTER_PORT" -m praisonai_train llm --config config.yaml')


def test_one_node_fields_are_plain_values() -> None:
    assert template.render("x {nodes} {node_rank} {master_addr} {master_port}", "p", None, 1) == \
        "x 1 0 127.0.0.1 29500"


def test_batch_script_runs_the_trainer_unbuffered_unless_asked_otherwise(tmp_path: Path) -> None:
    """Issue 15 item 19, for Slurm jobs too: their output is a file as well."""
    for env, want in (({}, "[1]\n"), ({"PYTHONUNBUFFERED": "0"}, "[0]\n")):
        script = batch_script("r1", TOKEN, "echo \"[${PYTHONUNBUFFERED-unset}]\" > out.txt", env,
                              SlurmOptions(), 0)
        (tmp_path / "run.sbatch").write_text(script)
        subprocess.run(["/bin/sh", "run.sbatch"], cwd=tmp_path, env={"PATH": os.environ["PATH"]},
                       capture_output=True, timeout=20)
        assert (tmp_path / "out.txt").read_text() == want


def test_batch_script_records_the_trainers_exit_code_and_forwards_sigterm(tmp_path: Path) -> None:
    # `a; b` stays one background job: the first part never runs in the batch shell.
    script = batch_script("r1", TOKEN, "trap 'exit 9' TERM; sh -c 'exit 3'", {}, SlurmOptions(), 0)
    (tmp_path / "run.sbatch").write_text(script)
    p = subprocess.run(["/bin/sh", "run.sbatch"], cwd=tmp_path, capture_output=True, timeout=20)
    assert p.returncode == 3 and (tmp_path / "status").read_text() == "3\n"
    # TERM to the batch shell reaches the trainer, and the shell still records its end.
    script = batch_script("r1", TOKEN, "sh -c 'trap \"exit 7\" TERM; while :; do sleep 0.1; done'",
                          {}, SlurmOptions(), 0)
    (tmp_path / "run.sbatch").write_text(script)
    proc = subprocess.Popen(["/bin/sh", "run.sbatch"], cwd=tmp_path, start_new_session=True)
    try:
        time.sleep(0.5)
        proc.terminate()
        assert proc.wait(10) == 7
    finally:
        try:  # its own session: only what this test started (nothing, when all went well)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert (tmp_path / "status").read_text() == "7\n"


def test_host_config_reads_backend_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[hosts.uni]\nbackend = "slurm"\npartition = "gpu"\ntime = "4:00:00"\n'
                    'gpus_per_node = 4\n[hosts.box]\n')
    conf = hostconfig.load(path)
    assert conf.for_host("uni").backend == "slurm"
    assert conf.for_host("uni").slurm == SlurmOptions(partition="gpu", time="4:00:00", gpus_per_node=4)
    assert conf.for_host("box").backend == "direct" and conf.for_host("other").backend == "direct"
    assert hostconfig.load(tmp_path / "missing.toml").hosts == {}


@pytest.mark.parametrize("text, message", [
    ('[hosts.uni]\nbackend = "pbs"\n', "--backend 'pbs' is unknown"),
    ('[hosts.uni]\npartiton = "gpu"\n', r"unknown key\(s\) partiton"),
    ('[hosts.uni]\ngpus_per_node = "4"\n', "gpus_per_node must be a whole number"),
    ('[hosts.uni]\ntime = "soon"\n', "not a Slurm time limit"),
    ("[hosts.uni\n", "cannot read"),
    ('hosts = 3\n', "must be tables"),
])
def test_bad_host_config_is_one_line_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ValidationError, match=message) as err:
        hostconfig.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def _submit_with(tmp_path: Path, stdout: str) -> tuple[list[str], Path]:
    """Run `submit` with a stand-in `sbatch` that prints `stdout` (exit 0) and talks on
    stderr before and after it, as clusters do; its answer lines and the run dir."""
    from rtrain_tui.core.backends.slurm import submit

    (tmp_path / "bin").mkdir()
    sbatch = tmp_path / "bin" / "sbatch"
    sbatch.write_text(f"#!/bin/sh\necho 'sbatch: notice one' >&2\nprintf '%s\\n' '{stdout}'\n"
                      "echo 'sbatch: notice two' >&2\n")
    sbatch.chmod(0o755)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "train.token").write_text(TOKEN + "\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    p = subprocess.run(["/bin/sh", "-c", submit(str(run_dir), TOKEN)], env=env,
                       capture_output=True, text=True, timeout=20)
    return p.stdout.splitlines(), run_dir


# A site's wrapper around sbatch may print a banner before the id (on stdout).
@pytest.mark.parametrize("stdout", ["42", "42;rtraintest", "Welcome to the cluster!\n42",
                                    "GPU-hours left: 12\n7;other\n42;rtraintest"])
def test_submit_takes_the_job_id_from_stdout_alone_and_keeps_stderr_as_a_message(
        tmp_path: Path, stdout: str) -> None:
    answer, run_dir = _submit_with(tmp_path, stdout)
    assert answer == ["job=42", "message=sbatch: notice one sbatch: notice two "]
    assert (run_dir / "slurm_job_id").read_text() == "42\n"
    assert not (run_dir / "submitting").exists()  # the submission's marker goes with it


def test_an_accepted_submit_with_no_job_id_in_sight_is_not_a_failed_one(tmp_path: Path) -> None:
    """sbatch said yes (exit 0) but no line is a job id: the job may be queued, so the
    start is not undone (launch.lock stays) and the answer says the id is unknown."""
    answer, run_dir = _submit_with(tmp_path, "Submitted, have a nice day")
    assert answer == ["unknown=Submitted, have a nice day ",
                      "message=sbatch: notice one sbatch: notice two "]
    assert (run_dir / "launch.lock").is_dir()
    assert not (run_dir / "submit_error").exists() and not (run_dir / "slurm_job_id").exists()


def test_a_submit_whose_job_id_was_not_seen_is_never_lost() -> None:
    """sbatch exited 0 but printed no job id (kept in `submit_unknown`): Slurm may hold the
    job queued. Until its batch script records the id, nothing can be told: it read `lost`."""
    run = "0\texists=1\tjob=\tcode=\tattempt=\tstop=0\tstopped=0\tlaunched=1\tunknown=1"
    [probe] = parse_run_states(run + "\n", 1, "uni")
    assert probe.state == "unknown"
    assert probe.reason == "sbatch printed no job id: the job may be queued (check squeue on uni)"
    # Once the batch script runs, it records the job's id and the run is read from Slurm.
    [probe] = parse_run_states(run.replace("job=", "job=42") + "\nJ\t42|RUNNING|None|0|\n", 1)
    assert probe.state == "running"
