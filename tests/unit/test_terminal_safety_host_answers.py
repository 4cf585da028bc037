"""A host's answers are bounded and inert: nvidia-smi rows, versions, error text."""

from __future__ import annotations

from rtrain_tui.core.runs import probes

BASE = "os=Linux\npython=3.11.2\ntrainer=ok\nnvidia_smi=0\ndisk_free_kb=1048576\nsetsid=yes\n"


def test_mig_rows_with_na_keep_the_gpu_with_unknown_fields() -> None:
    out = BASE + "gpu=0, NVIDIA A100-SXM4-40GB, [N/A], 40960, [N/A]\ngpu=1, NVIDIA A100, 10, 40960, 3\n"
    r = probes.parse_preflight("gpu", out, "python3", 2)
    assert r.ok and len(r.gpus) == 2
    assert r.gpus[0].unknown == {"memory_used_mib", "utilization_pct"}
    assert r.gpus[0].memory_total_mib == 40960 and not r.gpus[0].busy
    assert r.gpus[1].unknown == frozenset()


def test_hundreds_of_thousands_of_rows_are_refused_as_malformed() -> None:
    out = BASE + "".join(f"gpu={i}, NVIDIA H200, 0, 143771, 0\n" for i in range(400_000))
    r = probes.parse_preflight("gpu", out, "python3", 1)
    assert not r.ok and r.gpus == ()
    assert r.why_not == ["nvidia-smi failed: malformed output (400000 rows, more than 64 GPUs or 64 KiB)"]


def test_sixty_four_gpus_are_believed_and_sixty_five_are_not() -> None:
    rows = "".join(f"gpu={i}, NVIDIA H200, 0, 143771, 0\n" for i in range(64))
    assert len(probes.parse_preflight("gpu", BASE + rows, "python3", 64).gpus) == 64
    more = rows + "gpu=64, NVIDIA H200, 0, 143771, 0\n"
    assert not probes.parse_preflight("gpu", BASE + more, "python3", 1).ok


def test_one_huge_row_is_refused_as_malformed() -> None:
    out = BASE + "gpu=0, " + "N" * 70_000 + ", 0, 1, 0\n"
    assert not probes.parse_preflight("gpu", out, "python3", 1).ok


def test_gpu_names_versions_and_errors_from_the_host_are_inert() -> None:
    out = ("python=3.11.2\x1b]0;PWNED\x07\ntrainer=ok\nnvidia_smi=0\ndisk_free_kb=1\nsetsid=yes\n"
           "gpu=0, NVIDIA\x1b]52;c;AAAA\x07 H200\x1b[2J, 0, 143771, 0\n")
    r = probes.parse_preflight("gpu", out, "python3", 1)
    assert r.gpus[0].name == "NVIDIA H200"
    for check in r.checks:
        assert "\x1b" not in check.detail and "\x07" not in check.detail
    bad = "python=3.11.2\ntrainer=ok\nnvidia_smi=9\ngpu=NVIDIA-SMI has failed \x1b[2J\x1b]0;x\x07\n"
    report = probes.parse_preflight("gpu", bad, "python3", 1)
    assert report.why_not and all("\x1b" not in w for w in report.why_not)


def test_unknown_fields_show_as_question_marks_and_null_never_as_zero() -> None:
    from rich.console import Console

    from rtrain_tui.tui.widgets.preflight_panel import render_report

    out = BASE + "gpu=0, NVIDIA A100-SXM4-40GB, [N/A], [N/A], [N/A]\n"
    r = probes.parse_preflight("gpu", out, "python3", 1)
    g = r.gpus[0]
    assert (g.shown("memory_used_mib"), g.shown("memory_total_mib"), g.shown("utilization_pct")) == ("?", "?", "?")
    assert r.to_json()["gpus"][0] == {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "memory_used_mib": None,
                                      "memory_total_mib": None, "utilization_pct": None}
    console = Console(width=60, record=True)
    console.print(render_report(r, "gpu"))
    row = next(line for line in console.export_text().splitlines() if "GPU0" in line)
    assert "?/?G" in row and "?%" in row and "0%" not in row


def test_preflight_refuses_a_start_that_cannot_fit_and_accepts_one_that_can() -> None:
    out = BASE.replace("disk_free_kb=1048576", "disk_free_kb=5120")  # 5 MiB free
    fits = probes.parse_preflight("gpu", out, "python3", 0, ship_bytes=4 << 20)
    assert fits.ok
    full = probes.parse_preflight("gpu", out, "python3", 0, ship_bytes=8 << 20)
    assert full.why_not == ["no space left: the config and dataset need 8.0 MiB, 5.0 MiB is free "
                            "in the workdir; free some space on gpu"]
