"""`rtrain-tui preflight` against a real sshd: ready, not ready, unreachable, wedged."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import Cli
from tests.sshd import TWO_GPUS


def test_gpu_host_is_ready_and_lists_each_gpu(cli: Cli) -> None:
    r = cli("preflight", "gpu")
    assert r.rc == 0, r.err
    assert "gpu is ready" in r.out
    assert "GPU 1: NVIDIA H200  70000/143771 MiB  97% busy" in r.out
    assert "✓ setsid" in r.out and "✓ trainer" in r.out


def test_too_few_gpus_is_refused_with_seed_words_and_json_exit_1(cli: Cli) -> None:
    r = cli("preflight", "gpu", "--gpus", "4", "--json")
    assert r.rc == 1
    data = json.loads(r.out)
    assert {"host", "ok", "why_not", "checks", "gpus"} <= set(data)
    assert data["ok"] is False and data["why_not"] == ["needs 4 GPU(s), found 2"]
    assert len(data["gpus"]) == 2


def test_host_without_nvidia_smi_is_ready_only_for_cpu_runs(cli: Cli) -> None:
    r = cli("preflight", "cpu")
    assert r.rc == 1
    assert r.err.strip() == "rtrain-tui: cpu is not ready: needs 1 GPU(s), found 0 (no nvidia-smi)"
    assert cli("preflight", "cpu", "--gpus", "0").rc == 0


def test_missing_python_is_a_reason(cli: Cli) -> None:
    r = cli("preflight", "gpu", "--python", "python9.9")
    assert r.rc == 1 and "python9.9 does not run on gpu: missing" in r.err


def test_refused_port_says_cannot_reach(cli: Cli) -> None:
    r = cli("preflight", "refused")
    assert r.rc == 1
    assert r.err.startswith("rtrain-tui: cannot reach refused: connection refused")
    assert "Traceback" not in r.err


@pytest.mark.serial
def test_silent_host_answers_within_its_connect_timeout(cli: Cli) -> None:
    """`silent` accepts TCP and never speaks; its ssh config says ConnectTimeout 2."""
    began = time.monotonic()
    r = cli("preflight", "silent", "--json")
    took = time.monotonic() - began
    assert r.rc == 1
    assert json.loads(r.out)["why_not"] == ["cannot reach silent: no answer within 2 s (ConnectTimeout)"]
    assert took < 8, f"took {took:.1f} s, the bound is ConnectTimeout 2 s plus start-up"


@pytest.mark.serial
def test_wedged_nvidia_smi_cannot_hang_preflight(cli: Cli) -> None:
    cli.hosts.gpu_file.write_text("hang\n")
    try:
        began = time.monotonic()
        r = cli("preflight", "gpu", timeout=40)
        assert time.monotonic() - began < 25
    finally:
        cli.hosts.gpu_file.write_text(TWO_GPUS)
    assert r.rc == 1 and "nvidia-smi failed: timed out" in r.err


def test_broken_driver_is_reported(cli: Cli) -> None:
    cli.hosts.gpu_file.write_text("fail\n")
    try:
        r = cli("preflight", "gpu")
    finally:
        cli.hosts.gpu_file.write_text(TWO_GPUS)
    assert r.rc == 1 and "nvidia-smi failed: NVIDIA-SMI has failed" in r.err


def test_unknown_host_key_is_recorded_then_checked(cli: Cli) -> None:
    known = cli.hosts.home / ".ssh" / "known_hosts"
    assert cli("preflight", "included", "--gpus", "0").rc == 0
    assert f"[127.0.0.1]:{cli.hosts.ports['cpu']} ssh-ed25519 " in known.read_text()
