"""What a host's nvidia-smi prints is bounded on the host, before it crosses the link."""

from __future__ import annotations

import json

from tests.conftest import Cli
from tests.sshd import TWO_GPUS, SshHosts


def test_a_flood_of_nvidia_smi_rows_is_cut_on_the_host_and_refused(cli: Cli, hosts: SshHosts) -> None:
    hosts.gpu_file.write_text("".join(f"{i}, NVIDIA H200, 0, 143771, 0\n" for i in range(400_000)))
    try:
        r = cli("preflight", "gpu", "--json")
    finally:
        hosts.gpu_file.write_text(TWO_GPUS)
    report = json.loads(r.out)
    assert r.rc == 1 and report["gpus"] == []
    # 65 rows arrived (one more than the 64 believed), not 400,000.
    assert report["why_not"] == ["nvidia-smi failed: malformed output (65 rows, more than 64 GPUs or 64 KiB)"]


def test_mig_gpus_with_unknown_fields_are_kept_and_shown_as_unknown(cli: Cli, hosts: SshHosts) -> None:
    hosts.gpu_file.write_text("0, NVIDIA A100-SXM4-40GB MIG 3g.20gb, [N/A], [N/A], [N/A]\n")
    try:
        text, as_json = cli("preflight", "gpu"), cli("preflight", "gpu", "--json")
    finally:
        hosts.gpu_file.write_text(TWO_GPUS)
    assert text.rc == 0, text.err
    assert "    GPU 0: NVIDIA A100-SXM4-40GB MIG 3g.20gb  ?/? MiB  ?% busy" in text.out.splitlines()
    assert json.loads(as_json.out)["gpus"][0]["utilization_pct"] is None
