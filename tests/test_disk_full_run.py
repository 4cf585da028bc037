"""A run that fills its workdir's disk reads `failed`, with the full disk as its reason
(issue 15 item 32), against the real sshd on a 1 MiB tmpfs workdir.

With the disk full, the wrapper's last line (`echo $rc > status.tmp && mv ...`) makes an
empty `status.tmp` and cannot write the code, and the log is cut mid-line. That run
ended: it must never read `lost` (its processes did not vanish without trace).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Cli, write_config
from tests.test_resume_sshd import wait_for
from tests.test_transfer_upload import small_disk  # noqa: F401  (the 1 MiB tmpfs workdir)


def test_a_run_that_filled_the_disk_reads_failed_with_no_space_left(
        cli: Cli, tmp_path: Path, small_disk: Path) -> None:  # noqa: F811
    config = write_config(tmp_path / "full.yaml", fill_disk=True)
    r = cli("start", "gpu", "-c", str(config), "--workdir", str(small_disk), "--run-id", "full")
    run_dir = small_disk / "full"
    # What a full disk leaves: no status, an empty status.tmp, a log cut mid-line.
    assert not (run_dir / "status").exists(), r.err
    assert (run_dir / "status.tmp").stat().st_size == 0
    assert not (run_dir / "train.log").read_bytes().endswith(b"\n")
    status = cli("status", "gpu", "full", "--workdir", str(small_disk))
    assert status.out == "failed\n", status.err
    got = json.loads(cli("status", "gpu", "full", "--workdir", str(small_disk), "--json").out)
    assert (got["state"], got["reason"]) == ("failed", "no space left on device on gpu")


def test_a_resume_on_the_full_disk_says_so_and_changes_nothing(
        cli: Cli, tmp_path: Path, small_disk: Path) -> None:  # noqa: F811
    """The usual reason to resume after a full disk is to try again before freeing space:
    the resume is refused in one line that says why, and the run stays as it ended."""
    config = write_config(tmp_path / "full.yaml", fill_disk=True)
    cli("start", "gpu", "-c", str(config), "--workdir", str(small_disk), "--run-id", "full")
    assert cli("status", "gpu", "full", "--workdir", str(small_disk)).out == "failed\n"
    r = cli("resume", "gpu", "full", "--restart", "--workdir", str(small_disk))
    assert (r.rc, r.out) == (1, "")
    assert r.err.startswith("rtrain-tui: gpu: no space left") and "bug" not in r.err, r.err
    assert not (small_disk / "full" / ".rtrain" / "attempts" / "2").exists()  # no attempt claimed
    assert sorted(p.name for p in (small_disk / "full").iterdir() if ".part" in p.name) == []
    assert [row["state"] for row in json.loads(cli("runs", "--json").out)] == ["failed"]


def test_a_resume_whose_claim_the_host_cannot_make_says_why_not_that_another_took_it(
        cli: Cli, tmp_path: Path, workdir: str) -> None:
    """The claim is `mkdir .rtrain/attempts/N`; one that fails because nothing can be made
    there (here a read-only file system at .rtrain/attempts/; a full disk or inode table alike) is no
    other resume's: the refusal says the host could not record the attempt."""
    import subprocess

    config = write_config(tmp_path / "c.yaml", steps=4, save_steps=2, exit_code=1)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "ro", "--no-follow")
    assert r.rc == 0, r.err
    run = Path(workdir) / "ro"
    wait_for("attempt 1's end", lambda: (run / "status").exists())
    attempts = run / ".rtrain" / "attempts"  # attempt 1's directory is under it: a new one is not
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(attempts)],
                             capture_output=True, text=True)
    assert mounted.returncode == 0, mounted.stderr
    try:
        r = cli("resume", "gpu", "ro", "--workdir", workdir)
    finally:
        subprocess.run(["umount", "-l", str(attempts)], check=False)
    assert (r.rc, r.out) == (1, "")
    assert r.err.startswith("rtrain-tui: gpu: attempt 2 of ro was not started (cannot make "
                            ".rtrain/attempts/2"), r.err
    assert (run / "status").exists() and not list(run.glob("run.sh.*"))
