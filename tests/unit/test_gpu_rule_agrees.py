"""One rule for "free": the client's choice (`HostGpus.is_free`, `choose_gpus` in
metrics/gpus.py) and the host's queue (`gpu_rule` in backends/direct/gpu_rule.sh, awk
run by the wrapper of a queued run) agree on the same nvidia-smi output.

Hypothesis writes a GPU sample as the host prints it (rows, `[N/A]` fields, processes,
GPUs the host records as given to our live runs), and both sides read the very same
text: the awk under `dash`, as a bare Debian host runs it. The lock under racing
waiters, which waits out real seconds, is in tests/test_gpu_lock_waits.py.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtrain_tui.core.backends.direct import scripts
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.metrics.gpus import choose_gpus, parse_gpu_sample, parse_held

NUMBER = st.one_of(st.integers(0, 200_000).map(str), st.sampled_from(["[N/A]", "N/A", "[Not Supported]"]))


@st.composite
def samples(draw: st.DrawFn) -> str:
    """A probe's GPU lines: `gpu=`, `gpu_smi=`, `gpu_app=` and `gpu_held=`."""
    indexes = draw(st.lists(st.integers(0, 7), min_size=0, max_size=6, unique=True))
    lines = []
    for i in indexes:
        total = draw(st.integers(1, 143_771))
        # The edges of the rule (10% busy, half the memory) come up often.
        used = draw(st.one_of(st.sampled_from([0, total // 2, total // 2 + 1, total]).map(str),
                              st.integers(0, total).map(str), NUMBER))
        util = draw(st.one_of(st.sampled_from(["0", "9", "10", "11", "97"]),
                              st.integers(0, 100).map(str), NUMBER))
        lines.append(f"gpu={i}, GPU-fake-{i}, {util}, {used}, {draw(st.sampled_from([str(total), '[N/A]']))}")
    lines.append(f"gpu_smi={draw(st.sampled_from(['0', '0', '0', '0', '9', '124', 'missing']))}")
    for _ in range(draw(st.integers(0, 4))):
        gpu = draw(st.one_of(st.sampled_from(indexes or [9]), st.just(9)))
        user = draw(st.sampled_from(["alice", "", "uid 1001"]))
        lines.append(f"gpu_app=GPU-fake-{gpu},{draw(st.integers(2, 99999))},512,77,{user}")
    for _ in range(draw(st.integers(0, 3))):
        lines.append(f"gpu_held={draw(st.integers(0, 7))},run-{draw(st.integers(1, 9))}")
    order = draw(st.permutations(lines))
    return "\n".join(order) + "\n"


def host_rule(text: str, want: int, ids: str = "") -> dict[str, list[str]]:
    """What the host's `gpu_rule` says of `text`: {'free': [...], 'take': [...], 'why': [...]}."""
    dash = shutil.which("dash")
    assert dash, "dash is needed (Debian: apt-get install dash)"
    out = subprocess.run([dash, "-c", scripts._GPU_RULE + 'gpu_rule "$1" "$2"', "rule", str(want), ids],
                         input=text, capture_output=True, text=True, timeout=10, check=True).stdout
    said: dict[str, list[str]] = {"free": [], "take": [], "why": []}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        said[key].append(value)
    return said


def client_sample(text: str):  # type: ignore[no-untyped-def]
    sample = parse_gpu_sample(text)
    return replace(sample, reserved=parse_held(text))


@settings(max_examples=150, deadline=None)
@given(samples(), st.integers(1, 4))
def test_the_host_queue_and_the_client_choice_agree_on_which_gpus_are_free(text: str, want: int) -> None:
    sample = client_sample(text)
    host = host_rule(text, want)
    free = [] if sample.error else sorted(g.index for g in sample.gpus if sample.is_free(g))
    assert sorted(int(i) for i in host["free"]) == free
    try:
        chosen = choose_gpus("h", sample, want)
    except RemoteError:
        assert host["take"] == [] and host["why"], host
    else:
        assert host["take"] == [",".join(map(str, chosen))]


@settings(max_examples=100, deadline=None)
@given(samples(), st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True))
def test_a_queued_run_with_gpu_ids_waits_exactly_when_a_start_would_refuse_them(
        text: str, ids: list[int]) -> None:
    sample = client_sample(text)
    host = host_rule(text, len(ids), ",".join(map(str, ids)))
    try:
        choose_gpus("h", sample, len(ids), ids)
    except RemoteError:
        assert host["take"] == [] and host["why"], host
    else:
        assert host["take"] == [",".join(map(str, ids))]


def test_the_host_says_why_in_the_words_of_the_client_refusal() -> None:
    text = ("gpu=0, GPU-fake-0, 0, 1024, 143771\ngpu=1, GPU-fake-1, 97, 70000, 143771\n"
            "gpu_smi=0\ngpu_app=GPU-fake-1,31337,68000,31337,alice\n")
    assert host_rule(text, 2)["why"] == [
        "waiting for 2 free GPU(s): GPU 1: 97% busy, 68 GiB, held by alice, pid 31337"]
    with pytest.raises(RemoteError, match="GPU 1: 97% busy, 68 GiB, held by alice, pid 31337"):
        choose_gpus("h", client_sample(text), 2)
    assert host_rule(text, 1)["take"] == ["0"]


def held(home: Path, workdir: Path, prune: bool = False) -> str:
    """What the host's `held_gpus WORKDIR` prints, its HOME `home` (the box's records are
    there, never in the real HOME)."""
    script = scripts._LIVENESS + scripts._GPU_RULE + 'held_gpus "$1" "$2"'
    return subprocess.run([shutil.which("dash") or "dash", "-c", script, "held", str(workdir),
                           "1" if prune else ""], capture_output=True, text=True, timeout=10,
                          check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(home)}).stdout


def test_held_gpus_counts_live_runs_and_fresh_claims_only(tmp_path: Path) -> None:
    """What the host counts as given: a live run's `gpus`, and a claim of a start still
    uploading (within the hour); never an ended run's, a dead one's, an hour-old claim
    (its client died mid-upload) or a claim from before a reboot."""
    uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        start = Path(f"/proc/{alive.pid}/stat").read_text().rpartition(")")[2].split()[19]

        def run(name: str, gpus: str, **files: str) -> None:
            (tmp_path / name).mkdir()
            (tmp_path / name / "gpus").write_text(gpus + "\n")
            for file, text in files.items():
                (tmp_path / name / file.replace("_", ".")).write_text(text + "\n")

        run("live", "0", train_pid=str(alive.pid), train_ident=f"{start} {boot}")
        run("uploading", "1", gpus_claimed=str(uptime - 60))
        run("ended", "2", train_pid=str(alive.pid), train_ident=f"{start} {boot}", status="0")
        run("dead", "3", train_pid="999999999", train_ident=f"1 {boot}")
        run("abandoned", "4", gpus_claimed=str(uptime - 4000))
        run("before-reboot", "5", gpus_claimed=str(uptime + 100))
        run("unclaimed", "6")
        out = held(tmp_path, tmp_path)
    finally:
        alive.kill()
        alive.wait()
    assert sorted(out.split()) == ["gpu_held=0,live", "gpu_held=1,uploading"]
    assert parse_held(out) in (((0, "live"), (1, "uploading")), ((1, "uploading"), (0, "live")))


def test_a_gpu_lock_that_cannot_be_made_is_given_up_on_with_the_reason(tmp_path: Path) -> None:
    """`q_lock` on a queue directory that can never be made (here its workdir is a file:
    the same path as a read-only workdir) says why and returns, instead of spinning for
    ever; one that can be made is taken and released as before."""
    (tmp_path / "home" / ".local").mkdir(parents=True)
    (tmp_path / "home" / ".local" / "state").write_text("not a directory\n")
    script = (scripts._LIVENESS + scripts._GPU_RULE
              + 'box_dir "$1"; if q_lock "$bx"; then echo taken; q_unlock "$bx"; else echo "why=$ql_why"; fi')
    sh = shutil.which("dash") or "dash"
    out = subprocess.run([sh, "-c", script, "q", str(tmp_path / "work")], capture_output=True, text=True,
                         timeout=10, check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}).stdout
    assert out == (f"why=cannot take the host's GPU lock (~/.local/state/rtrain-tui/gpus-{socket.gethostname()}): "
                   "Not a directory\n")
    (tmp_path / "ok").mkdir()
    out = subprocess.run([sh, "-c", script, "q", str(tmp_path / "work")], capture_output=True, text=True,
                         timeout=10, check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "ok")}).stdout
    assert out == "taken\n" and not list((tmp_path / "ok" / ".local" / "state" / "rtrain-tui").glob("*/*"))
    assert not (tmp_path / "work").exists()  # the workdir gains nothing from the lock
