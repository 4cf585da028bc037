"""GPUs belong to the box (R03): the host's records of which run dirs hold GPUs
(`box_record`, `held_gpus` in backends/direct/gpu_box.sh and gpu_rule.sh) are one per host
and user, whatever the workdir; a run older versions started (its `gpus` in its run dir
only) counts as it did; a record of a run that holds nothing is pruned, under the lock
only, and a live one never.

The rule for whether a run holds its GPUs is stated once more here, in Python
(`holds`), and Hypothesis checks the host's shell against it on generated run dirs, each
recorded the new way, the old way, or both: under `dash`, as a bare Debian host runs it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtrain_tui.core.backends.direct import scripts

# What a run dir can say: live (its wrapper runs), ended (`status`), dead (its wrapper is
# gone), a client's claim of a start still uploading (fresh), one an hour old or from
# before a reboot, a run dir with `gpus` and nothing else, one without `gpus`.
KINDS = ("live", "ended", "dead", "fresh", "stale", "before_reboot", "unclaimed", "no_gpus")


def holds(kind: str) -> bool:
    """The rule, in Python: a run holds its GPUs while it lives, or while a start that
    claimed them within the hour is still uploading."""
    return kind in ("live", "fresh")


@pytest.fixture(scope="module")
def alive() -> Iterator[tuple[int, str]]:
    """A live process and its identity (`START BOOT_ID`, as a wrapper writes train.ident)."""
    proc = subprocess.Popen(["sleep", "600"])
    start = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[19]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    yield proc.pid, f"{start} {boot}"
    proc.kill()
    proc.wait()


def sh(home: Path, script: str, *args: str) -> str:
    return subprocess.run([shutil.which("dash") or "dash", "-c", scripts._LIVENESS + scripts._GPU_RULE + script,
                           "box", *args], capture_output=True, text=True, timeout=20, check=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home)}).stdout


def make_run(run_dir: Path, kind: str, gpus: str, alive: tuple[int, str]) -> None:
    uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    run_dir.mkdir(parents=True)
    files = {"gpus": gpus}
    if kind in ("live", "ended"):
        files |= {"train.pid": str(alive[0]), "train.ident": alive[1]}
    files |= {"ended": {"status": "0"}, "dead": {"train.pid": "999999999", "train.ident": "1 x"},
              "fresh": {"gpus.claimed": str(uptime - 60)}, "stale": {"gpus.claimed": str(uptime - 4000)},
              "before_reboot": {"gpus.claimed": str(uptime + 100)}}.get(kind, {})
    if kind == "no_gpus":
        del files["gpus"]
    for name, text in files.items():
        (run_dir / name).write_text(text + "\n")


def records(home: Path) -> list[str]:
    """The run dirs the box's records name."""
    return sorted(f.read_text().strip() for f in home.glob(".local/state/rtrain-tui/gpus-*/held/*"))


def test_records_of_every_workdir_count_and_only_the_lock_holder_prunes_the_dead(
        tmp_path: Path, alive: tuple[int, str]) -> None:
    home, a, b = tmp_path / "home", tmp_path / "a", tmp_path / "b"
    make_run(a / "live", "live", "0", alive)
    make_run(b / "ended", "ended", "1", alive)
    make_run(b / "dead", "dead", "2", alive)
    make_run(tmp_path / "c" / "uploading", "fresh", "3", alive)
    for run in (a / "live", b / "ended", b / "dead", tmp_path / "c" / "uploading"):
        sh(home, 'box_record "$1"', str(run))
    make_run(a / "old", "live", "4", alive)  # an older version's run: no record
    make_run(tmp_path / "d" / "old", "live", "5", alive)  # the same, in a workdir never given GPUs

    # Asked from a workdir of its own: every recorded run, and the old run of workdir a
    # (the box gave GPUs there); each once.
    out = sh(home, 'held_gpus "$1" "$2"', str(tmp_path / "e"), "")
    assert sorted(out.split()) == ["gpu_held=0,live", "gpu_held=3,uploading", "gpu_held=4,old"]
    assert sorted(sh(home, 'held_gpus "$1" "$2"', str(tmp_path / "d"), "").split()) == [
        "gpu_held=0,live", "gpu_held=3,uploading", "gpu_held=4,old", "gpu_held=5,old"]
    # Not under the lock: nothing pruned (a claim may be writing a record anew).
    assert len(records(home)) == 4
    shutil.rmtree(b)  # a workdir removed: the box forgets it at the next pruning look
    sh(home, 'held_gpus "$1" "$2"', str(tmp_path / "e"), "1")
    assert records(home) == [str(a / "live"), str(tmp_path / "c" / "uploading")]
    workdirs = next(home.glob(".local/state/rtrain-tui/gpus-*/workdirs")).read_text()
    assert workdirs == f"{a}\n{tmp_path / 'c'}\n"


def test_a_claim_records_the_run_on_the_box_and_another_workdirs_claim_is_refused(
        tmp_path: Path, alive: tuple[int, str]) -> None:
    """claim_gpus.sh itself: the first claim of GPU 0 is recorded in the box's records;
    a second, for a run of another workdir, finds it held; once the first run has ended,
    the next claim gets GPU 0 and prunes the ended run's record."""
    home = tmp_path / "home"
    (tmp_path / "a" / "r1").mkdir(parents=True)
    (tmp_path / "b" / "r2").mkdir(parents=True)

    def claim(workdir: str, run: str) -> str:
        script = (scripts._LIVENESS + scripts._GPU_RULE + 'wd=$1; rd=$1/$2; want=0; share=0\n'
                  + scripts._file("claim_gpus.sh"))
        return subprocess.run([shutil.which("dash") or "dash", "-c", script, "claim",
                               str(tmp_path / workdir), run], capture_output=True, text=True,
                              timeout=20, check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(home)}).stdout

    assert claim("a", "r1") == "claimed=1\n"
    assert records(home) == [str(tmp_path / "a" / "r1")]
    assert claim("b", "r2") == "held=0,r1\n"
    (tmp_path / "a" / "r1" / "status").write_text("0\n")
    assert claim("b", "r2") == "claimed=1\n"
    assert records(home) == [str(tmp_path / "b" / "r2")]
    assert not (tmp_path / "a" / ".queue").exists() and not (tmp_path / "b" / ".queue").exists()


RUNS = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(("box", "old", "both")),
                          st.sampled_from(("a", "b")), st.integers(0, 7)), max_size=8)


@settings(max_examples=25, deadline=None)
@given(runs=RUNS, caller=st.sampled_from(("a", "b", "z")))
def test_a_run_holds_its_gpus_by_one_rule_whether_the_box_or_its_run_dir_records_it(
        runs: list[tuple[str, str, str, int]], caller: str, alive: tuple[int, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = root / "home"
        # Both workdirs are ones the box has given GPUs in before (a line each in `workdirs`).
        sh(home, 'box_dir "$1"; mkdir -p "$bx"; printf "%s\\n" "$1/a" "$1/b" > "$bx/workdirs"', str(root))
        want, recorded = [], []
        for n, (kind, layout, workdir, gpu) in enumerate(runs):
            run_dir = root / workdir / f"run{n}"
            make_run(run_dir, kind, str(gpu), alive)
            if layout != "old":
                sh(home, 'box_record "$1"', str(run_dir))
                recorded.append((str(run_dir), holds(kind)))
            if holds(kind):
                want.append(f"gpu_held={gpu},run{n}")
        assert sorted(sh(home, 'held_gpus "$1" "$2"', str(root / caller), "").split()) == sorted(want)
        # The lock holder's look prunes exactly the records of runs that hold nothing,
        # and says the same.
        assert sorted(sh(home, 'held_gpus "$1" "$2"', str(root / caller), "1").split()) == sorted(want)
        assert records(home) == sorted(path for path, live in recorded if live)
