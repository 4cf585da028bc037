"""Past 2,000 runs on one host, in a long workdir, against the real sshd (issue 15 item 3).

The probe of every run is one script of ~600 KB here. Linux refuses any one argument
over 128 KiB (MAX_ARG_STRLEN), so a script passed to `sh -c` failed as a whole and every
run read `unknown`; a script too big for one argument now travels through a pipe. An answer that covers none
of the runs asked about is a failed probe: the runs go stale, never `unknown`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from rtrain_tui.core import ConnectionPool, Engine, RunIndex
from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.transport.shell import SCRIPT_ARG_LIMIT, under_timeout
from tests.conftest import Cli, write_config
from tests.small_disk import small_tmpfs
from tests.sshd import SshHosts
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


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
@pytest.mark.parametrize("size", [1000, 3000])
def test_a_script_under_timeout_reads_none_of_its_stdin_and_leaves_no_descriptor(
        shell: str, size: int) -> None:
    """The form the host's shell runs each script in, under a real dash and bash: a
    script of ~100 KB (one `sh -c` argument) and of ~300 KB (more than one argument may
    hold: through a pipe), whose commands read an empty stdin, not the rest of the
    script, and whose background processes hold only 0, 1 and 2; quotes of both kinds
    reach the script as they are."""
    filler = "".join(f": {'x' * 90} {i}\n" for i in range(size))
    script = (f"{filler}cat; echo after-cat '$HOME' \"'\"\n"
              # Until its exec is done the child holds the shell's own fds too: wait for
              # that (one it inherits for good keeps it looping until timeout's KILL).
              "sleep 5 & while fds=$(ls /proc/$!/fd | tr '\\n' ' '); [ \"$fds\" != '0 1 2 ' ]\n"
              "do :; done; echo \"$fds\"; kill $!; exit 3\n")
    line = under_timeout(script, 10)
    assert ("/dev/fd/3" in line) == (len(script) > SCRIPT_ARG_LIMIT)
    out = subprocess.run([shell], input=(line + "echo rc=$?\n").encode(),
                         capture_output=True, timeout=30).stdout.decode()
    assert out.splitlines() == ["after-cat $HOME '", "0 1 2 ", "rc=3"]


def test_a_host_whose_sh_is_bash_answers_1200_runs_with_its_tmp_full(
        hosts: SshHosts, tmp_path: Path) -> None:
    """bash (the /bin/sh of RHEL, Fedora, Arch) writes a here-document bigger than a pipe
    holds (every one, before 5.1) to a file in $TMPDIR: with it full, every probe failed
    and the runs read unreachable. No script needs the disk on its way to the host."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sh").symlink_to("/bin/bash")  # `exec sh` and the child `sh` are bash
    full = tmp_path / "tmp"
    full.mkdir()
    work = tmp_path / "work"
    for i in range(1200):
        seed_run(work, f"run-{i:04d}")
    records = [RunRecord("bashbox", f"run-{i:04d}", str(work)) for i in range(1200)]
    # Too big for one argument: the probe goes through the pipe (small scripts, such as
    # the shell's own trial and the echo below, are `sh -c` arguments).
    assert len(direct_sh.run_states([(r.workdir, r.run_id) for r in records])) > SCRIPT_ARG_LIMIT
    with small_tmpfs(full, "64k"):
        # Filled to the last block, as /tmp is when a disk fills up.
        subprocess.run(["dd", "if=/dev/zero", f"of={full / 'fill'}", "bs=4k"], capture_output=True)
        entry = hosts.extra_host("bashbox", extra_env={"TMPDIR": str(full)}, bin_dir=bindir)
        config = tmp_path / "ssh_config"
        config.write_text(hosts.ssh_config.read_text() + entry)

        async def go() -> tuple[str, dict[tuple[str, str, str], str]]:
            engine = Engine(ConnectionPool(config), RunIndex(tmp_path / "runs.toml"))
            try:
                shell = (await engine.host("bashbox").run('echo "$BASH_VERSION"')).strip()
                return shell, await engine.refresh(records)
            finally:
                await engine.close()

        shell, states = asyncio.run(go())
    assert shell  # the test means nothing on a host whose sh is not bash
    assert set(states.values()) == {"completed"}
