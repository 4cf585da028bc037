"""SVG snapshots of each screen, from the deterministic scenes in tests/scenes.py.

Regenerate after an intended change with `pytest tests/test_snapshots.py --snapshot-update`
(and `python -m tests.make_screenshots` for screenshots/), in a commit of its own.
"""

from __future__ import annotations

from pathlib import Path

from tests.scenes import SCENES, SIZE, make_scene_app


def _compare(snap_compare, name: str, tmp_path: Path,  # type: ignore[no-untyped-def]
             size: tuple[int, int] = SIZE) -> bool:
    return snap_compare(make_scene_app(tmp_path), run_before=SCENES[name], terminal_size=size)


class TestMainScreen:
    def test_hosts_and_runs(self, snap_compare, tmp_path: Path) -> None:
        """Hosts with badges (ready with a GPU summary, unreachable, not checked); the runs
        table with one colour per state (`starting` in italic cyan at the top, 10s
        elapsed), the a100 run marked `?stale`, progress column."""
        assert _compare(snap_compare, "main", tmp_path)

    def test_preflight_panel(self, snap_compare, tmp_path: Path) -> None:
        """The h100-lab host focused; its preflight: five ✓ checks, one row per GPU with a
        memory bar (GPU1 nearly full, 98%), and `ready  checked 14:30:00`."""
        assert _compare(snap_compare, "preflight", tmp_path)


class TestGpuPanel:
    def test_gpu_sparklines_and_holders(self, snap_compare, tmp_path: Path) -> None:
        """h100-lab's panel after ten minutes of samples: GPU0's sparkline flat (`▁`), then
        rising over the last 4 minutes, with blank cells where the host did not answer;
        `↳ run llama3-sft-r16 · 40G` in cyan; GPU1 red and full all along (same gap),
        `↳ alice, pid 31337 · 60G` in yellow. The checks above are as before."""
        assert _compare(snap_compare, "gpus", tmp_path)


class TestLogPane:
    def test_log_pane(self, snap_compare, tmp_path: Path) -> None:
        """A tab `h100-lab/llama3-sft-r16`: status line `● live  follow on (F)  h100-lab/llama3-sft-r16  23 lines`,
        HF-style loss lines, and a tqdm bar as its own line at the bottom."""
        assert _compare(snap_compare, "log_pane", tmp_path)


class TestCurves:
    def test_curves_pane(self, snap_compare, tmp_path: Path) -> None:
        """The `c` view of `h100-lab/llama3-sft-r16`: a summary line (`step 1840/3000 (61%)
        · loss … · eval loss … · 0.40 steps/s · ETA 48m58s`), a green progress bar at 61%,
        a falling loss curve with eval loss points in orange, and learning rate (warm-up
        then decay) and grad norm plots side by side. In the summary, `loss` is cyan and
        `eval loss` orange, as their curves."""
        assert _compare(snap_compare, "curves", tmp_path)

    def test_compare_overlay(self, snap_compare, tmp_path: Path) -> None:
        """Three marked runs (● before their ids in the table) overlaid in the compare
        dialog: three loss curves in three colours with a legend, and under them a header
        (host/run, step, loss, eval loss, ETA) and one row per run, its swatch in its
        curve's colour (cyan, orange, green): step (3000/3000 finished, 1840/3000 with ETA 48m58s, 410/3000), loss, eval loss;
        footer `esc Close`."""
        assert _compare(snap_compare, "compare", tmp_path)


class TestModals:
    def test_start_form_with_validation_error(self, snap_compare, tmp_path: Path) -> None:
        """The start form: Config and Run id highlighted red, the engine's two messages
        below (missing config file; the seed's run id message), Start disabled. A `GPU ids`
        field under GPUs; Retries `0`, Stall after `15m`, On stall `warn: …`; an unchecked
        `take busy GPUs too` box above the messages."""
        assert _compare(snap_compare, "start_form_error", tmp_path)

    def test_fetch_browser(self, snap_compare, tmp_path: Path) -> None:
        """The run directory as a tree with sizes; folders collapsed, the cursor on
        `lora_model/`; destination ~/adapters; `Fetch (ctrl+s)` and `Cancel (esc)`
        buttons, and the footer `esc Cancel  ^s Fetch`."""
        assert _compare(snap_compare, "fetch_browser", tmp_path)

    def test_stop_confirmation(self, snap_compare, tmp_path: Path) -> None:
        """`Stop llama3-sft-r16 on h100-lab?`, what will happen (every process of the run,
        found by its marker: SIGTERM, 10 s, SIGKILL, checked gone); footer `esc Cancel  y Stop it`."""
        assert _compare(snap_compare, "stop_confirm", tmp_path)

    def test_help_screen(self, snap_compare, tmp_path: Path) -> None:
        """Every key with what it does, and that quitting never stops runs; footer `esc Close`."""
        assert _compare(snap_compare, "help", tmp_path)


class TestSmallTerminals:
    def test_main_at_80x24(self, snap_compare, tmp_path: Path) -> None:
        """80×24: the host sidebar is folded away; the runs table shows host, run, status
        and the whole progress text (`step 1840/3000 · loss 0.8123`), elapsed cut at the
        right edge; the footer offers `b Hosts`."""
        assert _compare(snap_compare, "main", tmp_path, (80, 24))

    def test_main_at_60x20(self, snap_compare, tmp_path: Path) -> None:
        """60×20: host, run and status of every visible run (`starting`, `running`,
        `running ?stale`, `failed (exit 1)`), the start of the progress column."""
        assert _compare(snap_compare, "main", tmp_path, (60, 20))

    def test_start_form_at_80x24(self, snap_compare, tmp_path: Path) -> None:
        """The start form inside 80×24: its fields scroll (Host to Run id on screen, each
        on one line), under them its two errors naming their fields and the buttons, and
        the footer `^s Start  esc Cancel`."""
        assert _compare(snap_compare, "start_form_error", tmp_path, (80, 24))


class TestSlurm:
    def test_cluster_runs_and_preflight(self, snap_compare, tmp_path: Path) -> None:
        """uni-cluster focused (`Slurm · 6/13 GPUs free`): its preflight panel with the gpu*
        partition (5 of 12 GPUs free, a bar per partition, node states) and debug; the runs table with
        `qwen-long` queued (cyan) and `waiting: Resources` as its progress, beside the
        box runs."""
        assert _compare(snap_compare, "slurm_cluster", tmp_path)


class TestUnattended:
    def test_queued_resumed_retrying_and_stalled_runs(self, snap_compare, tmp_path: Path) -> None:
        """Issue 18's rows beside the others: `llama3-sft-r64` queued on the box with the
        host's reason (`waiting for 1 free GPU: GPU 1 98% busy, held by alice, pid 31337`),
        `mistral-sft-long` running as `attempt 2 · 2210/3000 …`, `qwen-dpo-night` queued
        with `retrying in 60 s after NCCL timeout (attempt 2 of 3)`, and `gemma-sweep-3`
        running with `⚠ stalled: no output for 17m …` in the warning colour; live runs on
        top, newest first."""
        assert _compare(snap_compare, "unattended", tmp_path)


class TestCost:
    def test_cost_column_and_host_price(self, snap_compare, tmp_path: Path,  # type: ignore[no-untyped-def]
                                        monkeypatch) -> None:
        """With prices in config.toml (h100-lab $2.49/h, uni-cluster €1/GPU·h): the runs
        table's last column says what each run cost (`$3.24` for the running llama3 run,
        `€0.78` for phi3-chat, empty for a100-rented, which has no price), and h100-lab's
        preflight panel says `price   $2.49/h` above `ready`, aligned with the checks."""
        config = tmp_path / "xdg" / "rtrain-tui" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text('[hosts.h100-lab]\nprice_per_hour = 2.49\n[hosts.uni-cluster]\n'
                          'price_per_gpu_hour = 1\ncurrency = "€"\n', encoding="utf-8")
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
        assert _compare(snap_compare, "preflight", tmp_path, (160, 36))
