"""When runs ended and started, read by one `stat` for all of them (issue 17 item 2).

A probe asked for the end time of every run that had just ended with a `date -r` each,
and the listing for the start time of every run it found: 2,000 of them cost 6.6 s of
one probe. The scripts run here under the real `/bin/sh`, with `date` and `stat` on the
PATH replaced by stand-ins that note each call and run the real tool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from rtrain_tui.core.backends import slurm
from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes
from tests.test_discover import STARTED, seed_run

RUNS = 30


def counted_tools(tmp_path: Path) -> tuple[Path, Path]:
    """A bin dir whose `date` and `stat` note each call (a word in the returned file)
    and run the real tool."""
    bindir, log = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir(exist_ok=True)
    for tool in ("date", "stat"):
        real = shutil.which(tool)
        assert real, tool
        (bindir / tool).write_text(f'#!/bin/sh\necho {tool} >> "{log}"\nexec {real} "$@"\n')
        (bindir / tool).chmod(0o755)
    log.unlink(missing_ok=True)
    return bindir, log


def counted_sh(script: str, tmp_path: Path) -> tuple[str, list[str]]:
    """`script`'s output under /bin/sh, and the `date` and `stat` commands it ran."""
    bindir, log = counted_tools(tmp_path)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    out = subprocess.run(["/bin/sh"], input=script, capture_output=True, text=True, env=env,
                         timeout=60).stdout  # on stdin: 2,000 runs' probe is no argument
    return out, log.read_text().split() if log.exists() else []


def _ended_runs(work: Path) -> list[tuple[str, str]]:
    runs = []
    for i in range(RUNS):
        run_dir = seed_run(work, f"r{i:02d}", code=None if i == 0 else f"{i % 2}\n")
        if i == 0:  # lost: no status; its log's last write is its end
            os.utime(run_dir / "train.log", (STARTED + 7, STARTED + 7))
        else:
            os.utime(run_dir / "status", (STARTED + i, STARTED + i))
        runs.append((str(work), f"r{i:02d}"))
    return runs


def test_the_box_probe_reads_every_ended_runs_end_time_with_one_stat(tmp_path: Path) -> None:
    runs = _ended_runs(tmp_path / "work")
    out, calls = counted_sh(direct_sh.run_states(runs, need_end=range(RUNS)), tmp_path)
    found = probes.parse_run_states(out, RUNS)
    assert [p.ended_at for p in found] == [STARTED + 7] + [STARTED + i for i in range(1, RUNS)]
    assert [p.state for p in found[:3]] == ["lost", "failed (exit 1)", "completed"]
    assert calls.count("date") == 0 and calls.count("stat") <= 2, calls


def test_a_probe_not_asked_for_end_times_reads_none(tmp_path: Path) -> None:
    runs = _ended_runs(tmp_path / "work")
    out, calls = counted_sh(direct_sh.run_states(runs, need_end=[3]), tmp_path)
    assert [i for i, p in enumerate(probes.parse_run_states(out, RUNS)) if p.ended_at] == [3]
    out, calls = counted_sh(direct_sh.run_states(runs), tmp_path)
    assert not any(p.ended_at for p in probes.parse_run_states(out, RUNS)) and calls == []


def test_the_login_node_probe_reads_when_each_job_ended(tmp_path: Path) -> None:
    """Slurm's runs had no end time at all, so an ended one was never settled."""
    work = tmp_path / "work"
    runs = _ended_runs(work)
    for i in range(RUNS):
        (work / f"r{i:02d}" / "slurm_job_id").write_text(f"{100 + i}\n")
    # No squeue here: every job is gone from Slurm, and the recorded codes say the rest.
    out, calls = counted_sh(slurm.run_states(runs, need_end=range(RUNS)), tmp_path)
    found = slurm.parse_run_states(out, RUNS)
    assert [p.ended_at for p in found[1:]] == [STARTED + i for i in range(1, RUNS)]
    assert [p.state for p in found[1:3]] == ["failed (exit 1)", "completed"]
    assert calls.count("date") == 0 and calls.count("stat") <= 2, calls


def test_the_listing_reads_every_found_runs_start_with_one_stat(tmp_path: Path) -> None:
    work = tmp_path / "work"
    _ended_runs(work)
    out, calls = counted_sh(remote_sh.find_runs([str(work)]), tmp_path)
    _, found = probes.parse_found_runs(out, 1)
    assert sorted((f.run_id, f.started) for f in found) == [(f"r{i:02d}", STARTED) for i in range(RUNS)]
    assert calls.count("date") == 0 and calls.count("stat") <= 2, calls


def test_thousands_of_ended_runs_are_read_in_a_few_stats(tmp_path: Path) -> None:
    """The list goes to `stat` every 2,000 files, gathered 50 at a time: a shell string
    grown one run at a time is copied whole at each append (5,000 runs in one string:
    ~1 s of dash, 14 s of bash), and each `stat` list costs a few forks."""
    work = tmp_path / "work"
    runs = []
    for i in range(2100):
        os.utime(seed_run(work, f"r{i:04d}") / "status", (STARTED + i, STARTED + i))
        runs.append((str(work), f"r{i:04d}"))
    out, calls = counted_sh(direct_sh.run_states(runs, need_end=range(2100)), tmp_path)
    assert [p.ended_at for p in probes.parse_run_states(out, 2100)] == [STARTED + i for i in range(2100)]
    # Which stat, then 2 lists (xargs splits one past 128 KiB of paths: these are long).
    assert calls.count("date") == 0 and 3 <= calls.count("stat") <= 5, calls


BSD_STAT = r'''#!/bin/sh
# A BSD stat: no -c; `-f FORMAT FILE...` with %m (last write, epoch) and %N (the name).
[ "$1" = -f ] || { echo "stat: illegal option -- ${1#-}" >&2; exit 1; }
fmt=$2; shift 2; rc=0
for f in "$@"; do
  t=$(REAL -c %Y -- "$f" 2>/dev/null) || { echo "stat: $f: No such file or directory" >&2; rc=1; continue; }
  line=$(printf '%s' "$fmt" | sed "s/%m/$t/")
  printf '%s\n' "${line%\%N}$f"
done
exit $rc
'''


def test_a_host_whose_stat_is_bsds_reads_the_end_times_too(tmp_path: Path) -> None:
    """No GNU `stat -c` on the PATH (macOS, the BSDs): `stat -f '%m %N'` is used, under
    dash, and run dirs whose path has a space in it read the same."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool_dir in ("/usr/local/bin", "/usr/bin", "/bin"):  # every tool but GNU stat
        for tool in Path(tool_dir).iterdir():
            if tool.name != "stat" and not (bindir / tool.name).exists():
                (bindir / tool.name).symlink_to(tool)
    real = shutil.which("stat")
    assert real
    (bindir / "stat").write_text(BSD_STAT.replace("REAL", real))
    (bindir / "stat").chmod(0o755)
    home = tmp_path / "a home"  # `~/work` expands to a path with a space
    runs = [("~/work", run_id) for _, run_id in _ended_runs(home / "work")]
    out = subprocess.run(["/bin/sh"], input=direct_sh.run_states(runs, need_end=range(RUNS)),
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": str(bindir), "HOME": str(home)}).stdout
    found = probes.parse_run_states(out, RUNS)
    assert [p.ended_at for p in found] == [STARTED + 7] + [STARTED + i for i in range(1, RUNS)]
