"""Past 2,000 runs on one host, in a long workdir, against the real sshd (issue 15 item 3).

The probe of every run is one script of ~600 KB here. Linux refuses any one argument
over 128 KiB (MAX_ARG_STRLEN), so a script passed to `sh -c` failed as a whole and every
run read `unknown`; scripts now travel on the shell's stdin. An answer that covers none
of the runs asked about is a failed probe: the runs go stale, never `unknown`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rtrain_tui.core import RunIndex, probes
from rtrain_tui.core.connection import _under_timeout
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.index import RunRecord
from tests.conftest import Cli, write_config
from tests.test_discover import seed_run

RUNS = 2100
# 5 × 38 characters: a deep project tree, as on a shared cluster's scratch space.
LONG = "/".join(["a-rather-long-directory-name-for-a-run"] * 5)


def test_past_2000_runs_in_a_long_workdir_discover_refresh_gpu_sample_and_stop_work(
    cli: Cli, tmp_path: Path, workdir: str,
) -> None:
    work = Path(workdir) / LONG
    for i in range(RUNS):
        seed_run(work, f"old-{i:04d}")
    wd = str(work)
    # The index knows one run there: discover lists that workdir (and the default one).
    RunIndex(cli.index).add(RunRecord("gpu", "old-0000", wd, state="running"))
    r = cli("runs", "--discover", "gpu", "--json", timeout=180)
    assert r.rc == 0, r.err
    head, _, ids = r.err.rstrip("\n").partition(": old-")
    assert head == f"rtrain-tui: gpu: found {RUNS - 1} runs started elsewhere"
    assert sorted(f"old-{ids}".split(", ")) == [f"old-{i:04d}" for i in range(1, RUNS)]
    r = cli("runs", "--refresh", "--json", timeout=180)
    assert r.rc == 0, r.err
    runs = json.loads(r.out)
    assert len(runs) == RUNS
    assert {(x["state"], x["stale"]) for x in runs} == {("completed", False)}
    # The start's GPU sample names the processes of every run the index has on the host.
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.05)
    r = cli("start", "gpu", "-c", str(config), "--workdir", wd, "--run-id", "live",
            "--gpus", "1", "--no-follow", timeout=180)
    assert r.rc == 0, r.err
    assert r.out.startswith("started live on gpu\n")
    assert (work / "live" / "run.sh").read_text().count("CUDA_VISIBLE_DEVICES=0") == 1
    r = cli("stop", "gpu", "live", "--workdir", wd, "--grace", "5", timeout=180)
    assert (r.rc, r.out) == (0, "stopped live on gpu\n"), r.err
    r = cli("runs", "--refresh", "--json", timeout=180)
    states = {x["run_id"]: x["state"] for x in json.loads(r.out)}
    assert len(states) == RUNS + 1 and states["live"] == "stopped"


def test_a_probe_answer_about_none_of_the_runs_is_a_failed_probe() -> None:
    with pytest.raises(RemoteError) as err:
        probes.parse_run_states("sh: 1: timeout: Argument list too long\n", 3, "gpu")
    assert str(err.value) == ("gpu: the probe of 3 run(s) got no answer about any of them: sh: 1: "
                              "timeout: Argument list too long; the runs keep their last known state.")
    # Partly answered: the run it said nothing about is unknown, as before.
    assert [p.exists for p in probes.parse_run_states("1\texists=1\tcode=0\n", 2)] == [False, True]
    assert probes.parse_run_states("", 0) == []


def test_a_script_under_timeout_comes_on_stdin_reads_none_of_it_and_leaves_no_descriptor() -> None:
    """The form the host's shell runs each script in, under a real /bin/sh: a 300 KB
    script (more than one argument may hold), whose commands read an empty stdin, not
    the rest of the script, and whose background processes hold only 0, 1 and 2."""
    filler = "".join(f": {'x' * 90} {i}\n" for i in range(3000))
    script = (f"{filler}cat; echo after-cat\n"
              "sleep 5 & ls /proc/$!/fd | tr '\\n' ' '; kill $!\necho; exit 3\n")
    line = _under_timeout(script, 10, "__rtrain_test_1__")
    assert len(script) > 128 * 1024
    out = subprocess.run(["/bin/sh"], input=(line + "echo rc=$?\n").encode(),
                         capture_output=True, timeout=30).stdout.decode()
    assert out.splitlines() == ["after-cat", "0 1 2 ", "rc=3"]
    with pytest.raises(ValueError):
        _under_timeout("echo a\n__rtrain_test_1__\necho b", 10, "__rtrain_test_1__")
