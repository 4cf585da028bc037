"""Deterministic scenes of the app for snapshot tests and `screenshots/`.

No connection is opened: the hosts come from a fixed ssh config, the runs from a fixed
index, the clock is fixed, and preflight results and log lines are injected the way
the workers would deliver them. So the pictures depend on neither the clock nor ports.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input

from rtrain_tui.core.metrics.gpus import GpuHistory, parse_gpu_sample
from rtrain_tui.core.metrics.metrics import parse_text
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunIndex, RunRecord
from rtrain_tui.core.transfers.transfer import RemoteEntry
from rtrain_tui.tui.app import RTrainApp, make_app
from rtrain_tui.tui.screens.compare_screen import CompareScreen
from rtrain_tui.tui.screens.fetch_screen import FetchScreen
from rtrain_tui.tui.screens.help_screen import HelpScreen
from rtrain_tui.tui.screens.start_screen import StartDefaults, StartScreen
from rtrain_tui.tui.screens.stop_screen import StopScreen
from rtrain_tui.tui.widgets.curves_pane import CurvesPane
from rtrain_tui.tui.widgets.log_pane import LogPane

SIZE = (140, 40)
NOW = datetime(2026, 11, 29, 14, 30, 0, tzinfo=UTC)
SSH_CONFIG = """\
Host h100-lab
  HostName 10.0.0.12
Host a100-rented
  HostName gpu.example.net
Host uni-cluster
  HostName login.cluster.example.edu
Host *.internal
  User me
"""
H100_PREFLIGHT = """\
python=3.11.9
trainer=ok
gpu=0, NVIDIA H100 80GB HBM3, 1024, 81559, 0
gpu=1, NVIDIA H100 80GB HBM3, 61440, 81559, 98
nvidia_smi=0
disk_free_kb=412316860
setsid=yes
"""
RUNS = [
    RunRecord("h100-lab", "llama3-sft-r16", "~/.praisonai-train", state="running",
              started_at="2026-11-29T13:12:00+00:00", updated_at="2026-11-29T14:30:00+00:00"),
    RunRecord("h100-lab", "qwen-dpo-try2", "~/.praisonai-train", state="failed (exit 1)",
              started_at="2026-11-29T11:02:00+00:00", updated_at="2026-11-29T11:09:41+00:00"),
    RunRecord("h100-lab", "run-1795961234", "~/.praisonai-train", state="completed",
              started_at="2026-11-29T08:40:00+00:00", updated_at="2026-11-29T10:55:13+00:00"),
    RunRecord("a100-rented", "mistral-lora", "/scratch/me/runs", state="running", stale=True,
              started_at="2026-11-29T12:00:00+00:00", updated_at="2026-11-29T14:10:00+00:00"),
    RunRecord("uni-cluster", "phi3-chat", "~/.praisonai-train", state="stopped",
              started_at="2026-11-28T22:15:00+00:00", updated_at="2026-11-28T23:01:30+00:00"),
    RunRecord("uni-cluster", "gemma-night", "~/.praisonai-train", state="lost",
              started_at="2026-11-28T20:00:00+00:00", updated_at="2026-11-29T02:11:00+00:00"),
    # in the index, being uploaded and launched right now
    RunRecord("h100-lab", "llama3-sft-r32", "~/.praisonai-train", state="starting",
              started_at="2026-11-29T14:29:50+00:00", updated_at="2026-11-29T14:29:50+00:00"),
]
PROGRESS = {  # as core.host_view.lines_for words them (metrics_format.progress_cell)
    RUNS[0].key: "1840/3000 ▕████  ▏ loss 0.812 · 48m58s",
    RUNS[1].key: "✗ CUDA out of memory: tried to allocate…",
    RUNS[2].key: "3000/3000 ▕██████▏ loss 0.641",
    RUNS[3].key: "410/1200 ▕██    ▏ loss 1.203 · 1h23m",
}
LOG_LINES = [
    "***** Running training *****",
    "  Num examples = 24,000",
    "  Num Epochs = 2",
    "  Total optimization steps = 3,000",
    *(f"{{'loss': {1.9 - i * 0.06:.4f}, 'grad_norm': 0.41, 'learning_rate': 0.0002, "
      f"'epoch': {i * 0.06:.2f}, 'step': {1840 - (18 - i) * 10}}}" for i in range(18)),
    " 61%|██████▏   | 1840/3000 [1:17:44<48:58,  2.53s/it]",
]


def curves_log(last: int = 1840, floor: float = 0.7, speed: float = 500) -> str:
    """A deterministic transformers-5 style log up to step `last` of 3000: bars, quoted-number
    loss dicts every 10 steps (falling, with a wiggle), an eval every 200 steps."""
    out = ["***** Running training *****", "  Total optimization steps = 3,000"]
    for step in range(10, last + 1, 10):
        loss = floor + 1.5 * math.exp(-step / speed) + 0.05 * math.sin(step / 37)
        lr = 2e-4 * min(1.0, step / 100) * (1 - step / 3000)
        grad = 0.4 + 0.3 * math.exp(-step / 300) + 0.04 * math.cos(step / 23)
        out.append(f"\r{step * 100 // 3000:3d}%|██▏       | {step}/3000 [0:{step // 24:02d}:00<48:58,  2.53s/it]"
                   f"{{'loss': '{loss:.4f}', 'grad_norm': '{grad:.4f}', 'learning_rate': '{lr:.3e}', "
                   f"'epoch': '{step / 1500:.2f}'}}")
        if step % 200 == 0:
            out.append(f"{{'eval_loss': {loss + 0.08:.4f}, 'eval_runtime': 41.2, 'epoch': {step / 1500:.2f}}}")
    out.append(f"{last * 100 // 3000:3d}%|██████▏   | {last}/3000 [1:17:44<48:58,  2.53s/it]")
    return "\n".join(out) + "\n"


def make_scene_app(root: Path | None = None) -> RTrainApp:
    root = root or Path(tempfile.mkdtemp(prefix="rtrain-scene-"))
    config = root / "ssh_config"
    config.write_text(SSH_CONFIG)
    index = RunIndex(root / "runs.toml")
    for r in RUNS:
        index.add(r)
    return make_app(config, index, clock=lambda: NOW, poll_runs=False, out_dir=Path("~/adapters"))


async def _settle(pilot: Pilot) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def main_screen(pilot: Pilot) -> None:
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    app.load_runs(PROGRESS)
    app.set_preflight(probes.parse_preflight("h100-lab", H100_PREFLIGHT, "python3", 1))
    app.set_preflight(probes.PreflightReport(
        "a100-rented", reachable=False,
        error="cannot reach a100-rented: no answer within 10 s (ConnectTimeout)"))
    app.runs_table.focus()
    await _settle(pilot)


async def preflight_panel(pilot: Pilot) -> None:
    await main_screen(pilot)
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    app.host_list.focus()
    app.host_list.highlighted = 0
    await _settle(pilot)


async def log_pane(pilot: Pilot) -> None:
    await main_screen(pilot)
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    pane: LogPane = app.open_log(RUNS[0], follow=False)
    await pilot.pause()
    pane.stream = "live"
    pane.add_lines(LOG_LINES)
    pane._flush()
    await _settle(pilot)


async def curves_pane(pilot: Pilot) -> None:
    await main_screen(pilot)
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    app.open_log(RUNS[0], follow=False, curves=True)
    await pilot.pause()
    app.query_one(CurvesPane).show(parse_text(curves_log()))
    await _settle(pilot)


async def compare_runs(pilot: Pilot) -> None:
    await main_screen(pilot)
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    app.runs_table.toggle_mark(RUNS[0].key)
    app.runs_table.toggle_mark(RUNS[2].key)
    app.runs_table.toggle_mark(RUNS[3].key)
    await pilot.pause()
    screen = CompareScreen(None, [RUNS[0], RUNS[2], RUNS[3]])
    await app.push_screen(screen)
    await pilot.pause()
    done = parse_text(curves_log(last=3000, floor=0.6, speed=700) + "{'train_runtime': 8113.2, "
                      "'train_steps_per_second': 0.37, 'train_loss': 0.98, 'epoch': 2.0}\n")
    screen.show({RUNS[0].key: parse_text(curves_log()), RUNS[2].key: done,
                 RUNS[3].key: parse_text(curves_log(last=410, floor=0.9, speed=300))})
    await _settle(pilot)


async def start_form_error(pilot: Pilot) -> None:
    await main_screen(pilot)
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    screen = StartScreen(None, app.hosts, StartDefaults("h100-lab", config="no-such-config.yaml"))
    await app.push_screen(screen)
    await pilot.pause()
    screen.query_one("#run_id").value = "llama;rm -rf ~"  # type: ignore[attr-defined]
    # A blinking cursor is on or off depending on how long the scene took: hold it on.
    for field in screen.query(Input):
        field.cursor_blink = False
    await _settle(pilot)


async def fetch_browser(pilot: Pilot) -> None:
    await main_screen(pilot)
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    entries = [
        RemoteEntry("checkpoint-1500", 0, True),
        RemoteEntry("checkpoint-1500/adapter_model.safetensors", 167_832_240, False),
        RemoteEntry("config.yaml", 912, False),
        RemoteEntry("lora_model", 0, True),
        RemoteEntry("lora_model/adapter_config.json", 733, False),
        RemoteEntry("lora_model/adapter_model.safetensors", 167_832_240, False),
        RemoteEntry("sft_data.jsonl", 48_221_904, False),
        RemoteEntry("train.log", 1_204_551, False),
    ]
    await app.push_screen(FetchScreen(None, RUNS[2], Path("~/adapters"), entries))
    await _settle(pilot)


async def stop_confirm(pilot: Pilot) -> None:
    await main_screen(pilot)
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    await app.push_screen(StopScreen(None, RUNS[0]))
    await _settle(pilot)


async def help_screen(pilot: Pilot) -> None:
    await main_screen(pilot)
    await pilot.app.push_screen(HelpScreen())
    await _settle(pilot)


def gpu_history() -> GpuHistory:
    """Ten minutes of h100-lab: our run took GPU 0 four minutes ago; alice's job has held
    GPU 1 all along. One sample every 20 s, with a 2-minute gap (the host did not answer)."""
    history = GpuHistory()
    start = NOW.timestamp() - 600
    for i in range(31):
        t = start + i * 20
        if 400 <= i * 20 < 520:
            continue
        ours = i * 20 >= 360
        util0 = min(92, (i * 20 - 360) // 3) if ours else 0
        apps = ("gpu_app=GPU-0,48211,41200,48200,me\n/proc/48211/environ:RTRAIN_RUN=0123456789abcdef\n"
                if ours else "")
        history.add(parse_gpu_sample(
            f"gpu=0, GPU-0, {util0}, {41984 if ours else 4}, 81559\n"
            f"gpu=1, GPU-1, {95 + i % 4}, 61440, 81559\ngpu_smi=0\n"
            f"gpu_app=GPU-1,31337,61200,31300,alice\n{apps}", taken_at=t,
        ).with_runs({"0123456789abcdef": "llama3-sft-r16"}, {}))
    return history


async def gpu_panel(pilot: Pilot) -> None:
    await main_screen(pilot)
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    app.engine.gpu_history["h100-lab"] = gpu_history()
    app.host_list.focus()
    app.host_list.highlighted = 0
    app.show_preflight()


# A Slurm login node as `slurm.preflight` answers it: three GPU nodes, one debug node,
# and two jobs of the user's (one waiting for GPUs).
CLUSTER_PREFLIGHT = """\
python=3.11.4
trainer=ok
disk_free_kb=2147483648
sbatch=yes
node=gpu*|g001|mixed|gpu:a100:4(S:0-1)|gpu:a100:3(IDX:0-2)|
node=gpu*|g002|allocated|gpu:a100:4(S:0-1)|gpu:a100:4(IDX:0-3)|
node=gpu*|g003|idle|gpu:a100:4(S:0-1)|gpu:a100:0(IDX:N/A)|
node=debug|d001|idle|gpu:1|gpu:0|
job=81234|gpu|RUNNING|None|rtrain-llama3-70b|
job=81240|gpu|PENDING|Resources|rtrain-qwen-long|
"""
CLUSTER_RUNS = [
    RunRecord("uni-cluster", "llama3-70b", "~/.praisonai-train", state="running",
              started_at="2026-11-29T13:40:00+00:00", updated_at="2026-11-29T13:41:10+00:00",
              backend="slurm", job_id="81234"),
    RunRecord("uni-cluster", "qwen-long", "~/.praisonai-train", state="queued",
              started_at="2026-11-29T14:21:00+00:00", updated_at="2026-11-29T14:21:00+00:00",
              backend="slurm", job_id="81240"),
]


async def slurm_cluster(pilot: Pilot) -> None:
    """A cluster beside the boxes: its runs (one queued, with Slurm's reason) and its preflight."""
    from rtrain_tui.core.backends import slurm
    from rtrain_tui.core.backends.slurm import SlurmOptions

    app: RTrainApp = pilot.app  # type: ignore[assignment]
    for r in CLUSTER_RUNS:
        app.engine.index.add(r)
    progress = {**PROGRESS, CLUSTER_RUNS[0].key: "step 120/4000 · loss 1.6120",
                CLUSTER_RUNS[1].key: "waiting: Resources, 2nd in the queue"}
    await main_screen(pilot)
    app.load_runs(progress)
    app.set_preflight(slurm.parse_preflight("uni-cluster", CLUSTER_PREFLIGHT, "python3",
                                            SlurmOptions(gpus_per_node=1)))
    app.host_list.focus()
    app.host_list.highlighted = 2
    await _settle(pilot)


# Runs that look after themselves (issue 18): one waiting on the host for a free GPU,
# one on its second attempt after a crash, one waiting to retry, one stalled.
UNATTENDED_RUNS = [
    RunRecord("h100-lab", "llama3-sft-r64", "~/.praisonai-train", state="queued",
              started_at="2026-11-29T14:26:00+00:00", updated_at="2026-11-29T14:26:00+00:00",
              gpu_ids=""),
    RunRecord("h100-lab", "mistral-sft-long", "~/.praisonai-train", state="running", attempt=2,
              started_at="2026-11-29T06:05:00+00:00", updated_at="2026-11-29T09:47:12+00:00"),
    RunRecord("a100-rented", "qwen-dpo-night", "/scratch/me/runs", state="queued",
              started_at="2026-11-29T03:10:00+00:00", updated_at="2026-11-29T14:29:00+00:00"),
    RunRecord("h100-lab", "gemma-sweep-3", "~/.praisonai-train", state="running",
              started_at="2026-11-29T12:50:00+00:00", updated_at="2026-11-29T12:50:40+00:00"),
]
UNATTENDED_PROGRESS = {  # as core.host_view words them (waiting reason, attempt_cell, stall_cell)
    UNATTENDED_RUNS[0].key: "waiting for 1 free GPU: GPU 1 98% busy, held by alice, pid 31337",
    UNATTENDED_RUNS[1].key: "attempt 2 · 2210/3000 ▕████▌ ▏ loss 0.702 · 31m05s",
    UNATTENDED_RUNS[2].key: "retrying in 60 s after NCCL timeout (attempt 2 of 3)",
    UNATTENDED_RUNS[3].key: "⚠ stalled: no output for 17m · 640/2000 ▕█▉    ▏ loss 1.102",
}


async def unattended(pilot: Pilot) -> None:
    """Queued on the host for a GPU, resumed (attempt 2), waiting to retry, and stalled."""
    app: RTrainApp = pilot.app  # type: ignore[assignment]
    for r in UNATTENDED_RUNS:
        app.engine.index.add(r)
    await main_screen(pilot)
    app.load_runs({**PROGRESS, **UNATTENDED_PROGRESS})
    await _settle(pilot)


SCENES: dict[str, Callable[[Pilot], Awaitable[None]]] = {
    "gpus": gpu_panel,
    "main": main_screen,
    "preflight": preflight_panel,
    "log_pane": log_pane,
    "curves": curves_pane,
    "compare": compare_runs,
    "start_form_error": start_form_error,
    "fetch_browser": fetch_browser,
    "stop_confirm": stop_confirm,
    "help": help_screen,
    "slurm_cluster": slurm_cluster,
    "unattended": unattended,
}
