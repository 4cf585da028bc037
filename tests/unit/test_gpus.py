"""GPU samples, history, sparklines and the choice of GPUs: pure functions, plus the
sampling script run under /bin/sh here against a stand-in nvidia-smi."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.errors import RemoteError, ValidationError
from rtrain_tui.core.metrics.gpus import (
    GpuHistory,
    HostGpus,
    choose_gpus,
    parse_gpu_sample,
    run_maps,
    sparkline,
)
from rtrain_tui.core.safety import validate

TWO = ("gpu=0, GPU-a, 0, 1024, 143771\ngpu=1, GPU-b, 97, 70000, 143771\ngpu_smi=0\n")
HELD = TWO + "gpu_app=GPU-b,4242,69000,4240,alice\n"


def test_sample_rows_become_gpus_with_uuid_load_and_memory() -> None:
    s = parse_gpu_sample(TWO, taken_at=5.0)
    assert s.error == "" and s.taken_at == 5.0
    assert [(g.index, g.uuid, g.utilization_pct, g.memory_used_mib, g.memory_total_mib)
            for g in s.gpus] == [(0, "GPU-a", 0, 1024, 143771), (1, "GPU-b", 97, 70000, 143771)]
    assert s.is_free(s.gpus[0]) and not s.is_free(s.gpus[1])


def test_a_process_on_a_gpu_is_named_by_user_pid_and_group() -> None:
    s = parse_gpu_sample(HELD)
    (p,) = s.processes
    assert (p.gpu_uuid, p.pid, p.used_mib, p.pgid, p.user) == ("GPU-b", 4242, 69000, 4240, "alice")
    assert s.holders(s.gpus[1]) == [p] and s.holders(s.gpus[0]) == []
    assert s.describe(s.gpus[1]) == "GPU 1: 97% busy, 68 GiB, held by alice, pid 4242"


def test_our_runs_are_named_by_marker_else_by_the_wrappers_group() -> None:
    text = (TWO + "gpu_app=GPU-a,10,5,9,root\ngpu_app=GPU-b,20,5,19,root\ngpu_app=GPU-b,30,5,29,bob\n"
            "/proc/10/environ:RTRAIN_RUN=00112233aabbccdd\n")
    tokens, groups = run_maps([("run-a", "00112233aabbccdd", None), ("run-b", "", 19)])
    s = parse_gpu_sample(text).with_runs(tokens, groups)
    assert [(p.pid, p.run_id) for p in s.processes] == [(10, "run-a"), (20, "run-b"), (30, "")]
    assert s.processes[0].holder() == "run run-a, pid 10"
    assert s.processes[2].holder() == "bob, pid 30"


def test_unknown_fields_missing_smi_timeout_and_failure_are_said_not_guessed() -> None:
    mig = parse_gpu_sample("gpu=0, MIG-x, [N/A], [N/A], 40960\ngpu_smi=0\n")
    assert mig.gpus[0].unknown == {"utilization_pct", "memory_used_mib"}
    assert mig.describe(mig.gpus[0]) == "GPU 0: ?% busy, ? GiB"
    assert parse_gpu_sample("gpu_smi=missing\n").error == "no nvidia-smi"
    late = parse_gpu_sample("gpu_smi=124\n")
    assert late.timed_out and late.error == "nvidia-smi timed out"
    broken = parse_gpu_sample("gpu=NVIDIA-SMI has failed \x1b]0;x\x07 driver\ngpu_smi=9\n")
    assert broken.error.startswith("nvidia-smi failed: NVIDIA-SMI has failed") and "\x1b" not in broken.error


def test_more_than_64_gpus_or_256_processes_are_not_believed() -> None:
    rows = "".join(f"gpu={i}, G{i}, 0, 0, 1\n" for i in range(65))
    assert parse_gpu_sample(rows + "gpu_smi=0\n").error.startswith("malformed")
    apps = "".join(f"gpu_app=GPU-a,{i},1,1,x\n" for i in range(257))
    assert parse_gpu_sample(TWO + apps).error.startswith("malformed")


def test_a_row_that_names_no_gpu_of_the_sample_is_not_a_process() -> None:
    s = parse_gpu_sample(TWO + "gpu_app=No running processes found,,,,\ngpu_app=GPU-zz,5,1,5,x\n")
    assert s.processes == ()


def test_host_text_in_names_is_made_inert() -> None:
    s = parse_gpu_sample(TWO + "gpu_app=GPU-b,1,1,1,ev\x1b[2Jil\n")
    assert "\x1b" not in s.processes[0].user


def test_history_keeps_the_last_ten_minutes() -> None:
    h = GpuHistory(seconds=600)
    for t in (0, 100, 500, 700):
        h.add(parse_gpu_sample(TWO, taken_at=float(t)))
    assert [s.taken_at for s in h.samples] == [100.0, 500.0, 700.0]
    assert h.utilisation(1) == [(100.0, 97), (500.0, 97), (700.0, 97)]
    assert h.latest is h.samples[-1]


def test_sparkline_shows_mean_load_per_slice_and_gaps_as_spaces() -> None:
    points = [(0.0, 0), (10.0, 100), (40.0, 50), (45.0, 50)]
    assert sparkline(points, now=60.0, window=60.0, width=6) == "▁█  ▅ "
    assert sparkline([], now=60.0, window=60.0, width=4) == "    "
    assert sparkline([(-1.0, 100)], now=60.0, window=60.0, width=2) == "  "


def test_least_busy_free_gpus_are_chosen_and_sorted() -> None:
    s = parse_gpu_sample("gpu=0, A, 5, 900, 1000\ngpu=1, B, 0, 10, 1000\ngpu=2, C, 0, 300, 1000\n"
                         "gpu=3, D, 0, 0, 1000\ngpu_smi=0\ngpu_app=D,7,1,7,bob\n")
    # GPU 0 is over half full: busy; GPU 3 holds bob's process: not free.
    assert choose_gpus("h", s, 1) == (1,)
    assert choose_gpus("h", s, 2) == (1, 2)
    with pytest.raises(RemoteError) as e:
        choose_gpus("h", s, 3)
    assert str(e.value) == ("h has 2 free GPU(s), --gpus 3 needs 3: GPU 0: 5% busy, 1 GiB; "
                            "GPU 3: 0% busy, 0 GiB, held by bob, pid 7. "
                            "Pass --queue to wait for them, --allow-busy to share them, "
                            "or ask for fewer.")
    assert choose_gpus("h", s, 3, allow_busy=True) == (1, 2, 3)


def test_refusal_names_who_holds_the_gpu_in_the_issues_words() -> None:
    with pytest.raises(RemoteError, match=r"GPU 1: 97% busy, 68 GiB, held by alice, pid 4242"):
        choose_gpus("gpu", parse_gpu_sample(HELD), 2)


def test_gpus_chosen_by_hand_must_exist_and_be_free_unless_allowed() -> None:
    s = parse_gpu_sample(HELD)
    assert choose_gpus("gpu", s, 1, ids=(0,)) == (0,)
    assert choose_gpus("gpu", s, 2, ids=(1, 0), allow_busy=True) == (1, 0)
    with pytest.raises(RemoteError, match=r"GPU 5 does not exist on gpu \(its GPUs: 0, 1\)"):
        choose_gpus("gpu", s, 1, ids=(5,))
    with pytest.raises(RemoteError, match=r"in use — GPU 1: 97% busy, 68 GiB, held by alice"):
        choose_gpus("gpu", s, 1, ids=(1,))


def test_no_choice_without_a_sample() -> None:
    with pytest.raises(RemoteError, match="cannot tell which GPUs are free .no nvidia-smi."):
        choose_gpus("cpu", HostGpus(error="no nvidia-smi"), 1)


@pytest.mark.parametrize("text", ["", "0,", ",0", "0,,1", "a", "0;1", "0 1", "0\n", "-1", "1234"])
def test_gpu_ids_that_are_not_a_comma_list_of_numbers_are_refused(text: str) -> None:
    with pytest.raises(ValidationError, match="GPU numbers separated by commas"):
        validate.parse_gpu_ids(text)


def test_gpu_ids_parse_and_refuse_repeats_and_impossible_numbers() -> None:
    assert validate.parse_gpu_ids("0,3") == (0, 3)
    with pytest.raises(ValidationError, match="names GPU 1 twice"):
        validate.parse_gpu_ids("1,0,1")
    with pytest.raises(ValidationError, match="GPU 64 is beyond"):
        validate.parse_gpu_ids("64")


def test_sampling_script_names_processes_from_proc_under_sh(tmp_path: Path) -> None:
    """The real script, run by /bin/sh here: a stand-in nvidia-smi lists a process of ours
    that carries a run marker and one that does not; /proc and /etc/passwd name them."""
    marked = subprocess.Popen(["sleep", "60"], env={**os.environ, "RTRAIN_RUN": "0123456789abcdef"})
    plain = subprocess.Popen(["sleep", "60"])
    try:
        smi = tmp_path / "nvidia-smi"
        smi.write_text("#!/bin/sh\ncase \"$*\" in *query-gpu*) echo '0, GPU-a, 3, 10, 100';;\n"
                       f"*) echo 'GPU-a, {marked.pid}, 9'; echo 'GPU-a, {plain.pid}, 8';"
                       " echo 'GPU-a, $(id), 1';; esac\n")
        smi.chmod(0o755)
        out = subprocess.run(["sh", "-c", direct_sh.gpu_sample()], capture_output=True, text=True,
                             env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}).stdout
        s = parse_gpu_sample(out)
        me = pwd.getpwuid(os.getuid()).pw_name
        by_pid = {p.pid: p for p in s.processes}
        assert by_pid[marked.pid].token == "0123456789abcdef" and by_pid[marked.pid].user == me
        assert by_pid[marked.pid].pgid == os.getpgid(marked.pid)
        assert by_pid[plain.pid].token == "" and by_pid[plain.pid].used_mib == 8
        assert by_pid[None].user == "" and by_pid[None].used_mib == 1  # a pid that is not one
    finally:
        for p in (marked, plain):
            p.kill()
            p.wait()


def test_core_gpus_module_is_headless() -> None:
    code = "import rtrain_tui.core.metrics.gpus, sys; assert 'textual' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_background_sample_is_dated_by_the_hosts_uptime_and_kept_once() -> None:
    s = parse_gpu_sample("gpu_now=1000\ngpu_uptime=997\n" + TWO, taken_at=50.0)
    assert (s.taken_at, s.host_stamp, s.pending) == (47.0, 997, False)
    h = GpuHistory()
    h.add(s)
    h.add(parse_gpu_sample("gpu_now=1002\ngpu_uptime=997\n" + HELD, taken_at=52.0))
    assert len(h.samples) == 1 and h.latest is not None and len(h.latest.processes) == 1
    h.add(parse_gpu_sample("gpu_now=1004\ngpu_uptime=1002\n" + TWO, taken_at=54.0))
    assert [x.taken_at for x in h.samples] == [47.0, 52.0]


@pytest.mark.parametrize("stamps", ["gpu_now=1000\n", "gpu_now=1000\ngpu_uptime=1200\n",
                                    "gpu_now=5000\ngpu_uptime=10\n", "gpu_now=x\ngpu_uptime=1\n"])
def test_no_recent_background_sample_is_pending_and_never_kept(stamps: str) -> None:
    s = parse_gpu_sample(stamps + TWO)
    assert s.pending and s.gpus == ()
    h = GpuHistory()
    h.add(s)
    assert h.latest is None


# The background sample's file on this machine: named by its host name and boot id.
SAMPLE = (f"gpu-sample-{Path('/proc/sys/kernel/hostname').read_text().strip()}-"
          f"{Path('/proc/sys/kernel/random/boot_id').read_text().strip()}")


def _fake_smi(tmp_path: Path) -> dict[str, str]:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\ncase \"$*\" in *query-gpu*) echo '0, GPU-a, 3, 10, 100';; esac\n")
    smi.chmod(0o755)
    return {**os.environ, "PATH": f"{smi.parent}:{os.environ['PATH']}", "HOME": str(tmp_path)}


def test_probe_reports_the_last_background_sample_and_starts_the_next(tmp_path: Path) -> None:
    env = _fake_smi(tmp_path)
    script = direct_sh.run_states([], gpus=True)
    first = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env).stdout
    assert parse_gpu_sample(first).pending
    lock = tmp_path / ".cache" / "rtrain-tui" / f"{SAMPLE}.lock"
    deadline = time.monotonic() + 10
    while lock.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = parse_gpu_sample(subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                                             env=env).stdout)
    assert not second.pending and [g.uuid for g in second.gpus] == ["GPU-a"]
    assert oct((tmp_path / ".cache" / "rtrain-tui").stat().st_mode & 0o777) == "0o700"


def test_a_dead_samplers_lock_is_broken_after_30_s_and_a_live_one_is_respected(tmp_path: Path) -> None:
    env = _fake_smi(tmp_path)
    cache = tmp_path / ".cache" / "rtrain-tui"
    cache.mkdir(parents=True)
    uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    script = direct_sh.run_states([], gpus=True)
    (cache / f"{SAMPLE}.lock").write_text(f"{uptime}\n")  # a sampler under way
    subprocess.run(["sh", "-c", script], capture_output=True, env=env)
    time.sleep(0.5)
    assert not (cache / SAMPLE).exists(), "a second sampler started beside a live one"
    for dead in (uptime - 31, uptime + 1000):  # its sampler died; it was before a reboot
        (cache / SAMPLE).unlink(missing_ok=True)
        (cache / f"{SAMPLE}.lock").write_text(f"{dead}\n")
        subprocess.run(["sh", "-c", script], capture_output=True, env=env)
        deadline = time.monotonic() + 10
        while not (cache / SAMPLE).exists() or (cache / f"{SAMPLE}.lock").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_home_that_cannot_be_written_is_sampled_in_the_probe_itself(tmp_path: Path) -> None:
    env = _fake_smi(tmp_path)
    (tmp_path / ".cache").write_text("a file where the cache directory would go\n")
    out = subprocess.run(["sh", "-c", direct_sh.run_states([], gpus=True)], capture_output=True,
                         text=True, env=env).stdout
    s = parse_gpu_sample(out)
    assert not s.pending and s.host_stamp is None and [g.uuid for g in s.gpus] == ["GPU-a"]
