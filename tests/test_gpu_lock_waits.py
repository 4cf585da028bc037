"""The host's GPU lock (`q_lock` in backends/direct/gpu_rule.sh) under waiters that race:
a holder seen at the last look is waited for, a lock made an instant ago is not broken,
two waiters breaking one dead lock never both hold it.

Moved out of tests/unit (tests/unit/test_gpu_rule_agrees.py holds the rule's other
tests): each runs `dash` waiters side by side and waits out the lock's real seconds (a
lock is broken after 3 s without an owner), and the fast lane starts nothing and
sleeps nowhere.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from rtrain_tui.core.backends.direct import scripts


def test_a_gpu_lock_that_another_taker_holds_at_the_last_look_is_waited_for_not_given_up(
        tmp_path: Path) -> None:
    """Three looks in a row found the lock neither made nor held (takers came and went in
    between), and at the last one another taker holds it: the lock works, so `q_lock`
    waits on as ever (here until that holder, which never writes its owner, is broken)."""
    bin_dir, count = tmp_path / "bin", tmp_path / "count"
    bin_dir.mkdir()
    real = shutil.which("mkdir")
    # `mkdir DIR/lock` fails its first 3 calls without making it, and at the 4th another
    # taker makes it first; every other call is the real mkdir.
    (bin_dir / "mkdir").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *-p*) exec {real} "$@";; esac\n'
        f'n=$(cat {count} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {count}\n'
        f'if [ $n -le 3 ]; then echo "mkdir: cannot create directory: File exists" >&2; exit 1; fi\n'
        f'if [ $n = 4 ]; then {real} "$1"; echo "mkdir: cannot create directory: File exists" >&2; exit 1; fi\n'
        f'exec {real} "$@"\n')
    (bin_dir / "mkdir").chmod(0o755)
    (tmp_path / "work" / ".queue").mkdir(parents=True)
    script = (scripts._LIVENESS + scripts._GPU_RULE
              + 'if q_lock "$1/.queue"; then echo taken; else echo "why=$ql_why"; fi')
    out = subprocess.run([shutil.which("dash") or "dash", "-c", script, "q", str(tmp_path / "work")],
                         capture_output=True, text=True, timeout=20, check=True,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"}).stdout
    assert out == "taken\n"


def test_a_lock_just_made_by_another_taker_is_not_broken_by_one_that_waited_long(
        tmp_path: Path) -> None:
    """A lock is broken when it has had no owner for 3 s (its taker died between making
    it and writing its owner): 30 looks in a row that found none, not 30 looks in all. A
    waiter that had waited 3 s on a live holder broke the next taker's lock in the instant
    between its mkdir and its owner line, and both went on holding it."""
    import os
    import time

    bin_dir, count = tmp_path / "bin", tmp_path / "count"
    bin_dir.mkdir()
    real = shutil.which("mkdir")
    (bin_dir / "mkdir").write_text(  # counts the waiter's looks (its tries to make the lock)
        "#!/bin/sh\n"
        f'case "$*" in *-p*) exec {real} "$@";; esac\n'
        f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}.tmp; mv {count}.tmp {count}\n'
        f'exec {real} "$@"\n')
    (bin_dir / "mkdir").chmod(0o755)

    def looks() -> int:
        try:
            return int(count.read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def wait_for_looks(n: int) -> None:  # or for the waiter to have taken the lock
        deadline = time.monotonic() + 30
        while looks() < n and waiter.poll() is None:
            assert time.monotonic() < deadline, looks()
            time.sleep(0.05)

    lock = tmp_path / "work" / ".queue" / "lock"
    lock.mkdir(parents=True)
    uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    (lock / "owner").write_text(f"{uptime} {os.getpid()}\n")  # a live holder, just now
    script = (scripts._LIVENESS + scripts._GPU_RULE
              + 'if q_lock "$1/.queue"; then echo taken; else echo "why=$ql_why"; fi')
    waiter = subprocess.Popen([shutil.which("dash") or "dash", "-c", script, "q", str(tmp_path / "work")],
                              stdout=subprocess.PIPE, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    try:
        wait_for_looks(35)  # over 3 s of waiting on the live holder
        # The holder lets go and another taker makes the lock: its owner is not written yet.
        (lock / "owner").unlink()
        seen = looks()
        wait_for_looks(seen + 10)
        assert waiter.poll() is None, "a lock made an instant ago was broken and taken"
        # Ownerless for 3 s: its taker died; the waiter breaks it and takes the lock.
        out, _ = waiter.communicate(timeout=30)
    finally:
        waiter.kill()
        waiter.wait()
    assert out == "taken\n"


def test_two_waiters_breaking_one_dead_lock_never_both_hold_it(tmp_path: Path) -> None:
    """Two waiters find the lock of a dead taker. One judges it dead and is paused (here:
    its first `rm` waits to be let go, as a descheduled process would) before removing it;
    meanwhile the other breaks it and takes the lock. Removed by its path, the paused one
    then removed the other's new lock and took it too: two runs could be given one GPU."""
    import time

    real_rm, real_mkdir = shutil.which("rm"), shutil.which("mkdir")
    paused, go, count, release = (tmp_path / n for n in ("paused", "go", "count", "release"))
    bin_a, bin_b = tmp_path / "bin_a", tmp_path / "bin_b"
    bin_a.mkdir()
    bin_b.mkdir()
    (bin_a / "rm").write_text(  # the first rm of waiter A waits until the test lets it go
        "#!/bin/sh\n"
        f'if [ ! -e {paused} ]; then : > {paused}; while [ ! -e {go} ]; do sleep 0.02; done; fi\n'
        f'exec {real_rm} "$@"\n')
    (bin_b / "mkdir").write_text(  # counts waiter B's looks (its tries to make the lock)
        "#!/bin/sh\n"
        f'case "$*" in *-p*) exec {real_mkdir} "$@";; esac\n'
        f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}.tmp; mv {count}.tmp {count}\n'
        f'exec {real_mkdir} "$@"\n')
    for f in (bin_a / "rm", bin_b / "mkdir"):
        f.chmod(0o755)
    work = tmp_path / "work"
    lock = work / ".queue" / "lock"
    lock.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    (lock / "owner").write_text(f"{uptime} {dead.pid}\n")  # its taker is gone
    # Holding: `held` made by whoever has the lock; one that finds it made holds it too.
    # B, once it holds the lock, keeps it until told ($2).
    script = (scripts._LIVENESS + scripts._GPU_RULE
              + 'q_lock "$1/.queue" || exit 1\n'
              + 'if mkdir "$1/held" 2>/dev/null; then echo taken; else echo both; fi\n'
              + '[ -z "$2" ] || while [ ! -e "$2" ]; do sleep 0.02; done\n'
              + 'rmdir "$1/held" 2>/dev/null; q_unlock "$1/.queue"\n')
    sh = shutil.which("dash") or "dash"
    out_a, out_b = tmp_path / "a.out", tmp_path / "b.out"

    def waiter(bin_dir: Path, out: Path, *held_until: str) -> subprocess.Popen[bytes]:
        with out.open("w") as f:
            return subprocess.Popen([sh, "-c", script, "q", str(work), *held_until], stdout=f,
                                    env={"PATH": f"{bin_dir}:/usr/bin:/bin"})

    def until(what: str, predicate) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 30
        while not predicate():
            assert time.monotonic() < deadline, what
            time.sleep(0.02)

    a = waiter(bin_a, out_a)
    b = None
    try:
        until("A judging the dead lock", paused.exists)
        b = waiter(bin_b, out_b, str(release))
        # B takes the lock (the old break let it), or keeps waiting on A's break.
        until("B taking the lock or waiting on", lambda: out_b.read_text() != ""
              or int((count.read_text() if count.exists() else "") or 0) >= 10)
        b_before = out_b.read_text()
        go.touch()
        # A takes the lock (B holds it already with the old break: A must not take it then),
        # or B took it after A's break and holds it until released.
        until("a taker after A's break", lambda: out_a.read_text() != ""
              or (b_before == "" and out_b.read_text() != ""))
        release.touch()
        assert a.wait(30) == 0 and b.wait(30) == 0
    finally:
        go.touch()
        release.touch()
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert (out_a.read_text(), out_b.read_text()) == ("taken\n", "taken\n")
