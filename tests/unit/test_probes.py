"""Verdicts from probe output: the seed's words, GPU summaries, status precedence."""

from rtrain_tui.core.runs import probes

GOOD = ("os=Linux\npython=3.11.2\ntrainer=ok\n"
        "gpu=0, NVIDIA H200, 1024, 143771, 0\ngpu=1, NVIDIA H200, 70000, 143771, 97\n"
        "nvidia_smi=0\ndisk_free_kb=1048576\nsetsid=yes\n")


def test_ready_host_with_two_gpus_one_busy() -> None:
    r = probes.parse_preflight("gpu", GOOD, "python3", 2)
    assert r.ok and r.why_not == []
    assert r.gpu_summary() == "2× H200 · 1 busy"
    assert [c.name for c in r.checks] == ["python", "trainer", "gpus", "disk", "setsid"]
    assert r.to_json()["gpus"][1]["utilization_pct"] == 97


def test_too_few_gpus_uses_the_seed_wording() -> None:
    r = probes.parse_preflight("gpu", GOOD, "python3", 4)
    assert not r.ok and r.why_not == ["needs 4 GPU(s), found 2"]


def test_missing_trainer_is_a_warning_not_a_refusal() -> None:
    r = probes.parse_preflight("gpu", GOOD.replace("trainer=ok", "trainer=missing"), "python3", 1)
    assert r.ok
    assert any(c.name == "trainer" and c.warning and not c.ok for c in r.checks)


def test_wedged_nvidia_smi_is_reported_as_timed_out() -> None:
    out = "python=3.11.2\ntrainer=ok\nnvidia_smi=124\ndisk_free_kb=1\nsetsid=yes\n"
    r = probes.parse_preflight("gpu", out, "python3", 1)
    assert r.why_not == ["nvidia-smi failed: timed out"]


def test_cpu_only_run_needs_no_gpu() -> None:
    out = "python=3.11.2\ntrainer=ok\nnvidia_smi=missing\ndisk_free_kb=1\nsetsid=no\n"
    r = probes.parse_preflight("cpu", out, "python3", 0)
    assert r.ok and r.gpu_summary() == "no GPU"
    assert probes.parse_preflight("cpu", out, "python3", 1).why_not == [
        "needs 1 GPU(s), found 0 (no nvidia-smi)"]


def test_missing_python_refuses() -> None:
    r = probes.parse_preflight("h", "python=missing\nnvidia_smi=missing\n", "python9", 0)
    assert r.why_not == ["python9 does not run on h: missing"]


def test_status_precedence() -> None:
    P = probes.RunProbe
    assert P(exists=False).state == "unknown"
    assert P(exists=True, pid=5, alive=True, launched=True).state == "running"
    assert P(exists=True, pid=5, alive=False, launched=True).state == "lost"
    assert P(exists=True, pid=5, exit_code=0, launched=True).state == "completed"
    assert P(exists=True, pid=5, exit_code=137, launched=True).state == "failed (exit 137)"
    # a verified stop of ours wins over the code the stop caused
    assert P(exists=True, pid=5, exit_code=143, stop_requested=True, stopped=True).state == "stopped"
    # a stop under way: still running while anything of the run lives
    assert P(exists=True, pid=5, alive=True, stop_requested=True, launched=True).state == "running"
    # a stop we asked for is `stopped` whatever the trainer exits with: its TERM, KILL, or
    # the trainer's own answer to the TERM (torchrun and Lightning exit 1, R02), even 0
    for code in (143, 137, 1, 3, 0, -15):
        assert P(exists=True, pid=5, exit_code=code, stop_requested=True, launched=True).state == "stopped"
    assert P(exists=True, pid=5, exit_code=143, launched=True).state == "failed (exit 143)"  # not ours
    # an issued stop whose processes are all gone, killed before recording anything
    assert P(exists=True, pid=5, stop_requested=True, launched=True).state == "stopped"
    assert P(exists=True, pid=None).state == "unknown"


def test_unparseable_probe_lines_leave_runs_unknown() -> None:
    found = probes.parse_run_states("garbage\n7\texists=1\n1\texists=1\tpid=3\talive=1\n", 2)
    assert [p.state for p in found] == ["unknown", "running"]


def test_when_an_attempt_began_running_is_read_and_host_text_that_is_no_number_is_not() -> None:
    found = probes.parse_run_states(
        "0\texists=1\tpid=3\talive=1\n0\trunning_since=2 1764633600\n"
        "1\texists=1\tpid=4\talive=1\n1\trunning_since=2 ²\n"
        "2\texists=1\tpid=5\talive=1\n2\trunning_since=1764633600\n", 3)
    assert [(p.running_attempt, p.running_since) for p in found] == [
        (2, 1764633600), (None, None), (None, None)]
