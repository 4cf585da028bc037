"""core.host_view words a refreshed run the same for both faces; these start nothing.

What the wording does with real hosts (progress read from a log, a reason from a
traceback, a host that stops answering) is proven through the app and the CLI against
the sshd fixture (tests/test_tui.py, tests/test_cli_runs.py, tests/slurm/).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from rtrain_tui.core import host_view
from rtrain_tui.core.host_view import RunLine
from rtrain_tui.core.metrics.metrics import Summary
from rtrain_tui.core.runs import probes
from rtrain_tui.core.runs.index import RunRecord
from rtrain_tui.core.runs.probes import RunProbe


def test_waiting_text_says_the_schedulers_reason_or_that_it_waits_in_the_queue() -> None:
    assert host_view.waiting_text("Resources") == "waiting: Resources"
    assert host_view.waiting_text("") == "waiting in the queue"


def test_waiting_text_keeps_a_box_queue_reason_as_the_host_words_it() -> None:
    why = "waiting for 2 free GPU(s): GPU 1: 97% busy, 68 GiB, held by alice, pid 31337"
    assert host_view.waiting_text(why) == why


def test_reason_cell_keeps_a_short_reason_whole_and_cuts_a_long_one_to_its_width() -> None:
    assert host_view.reason_cell("CUDA out of memory") == "✗ CUDA out of memory"
    long = "CUDA out of memory: tried to allocate 2.00 GiB on GPU 0"
    cell = host_view.reason_cell(long)
    assert cell == "✗ " + long[:host_view.REASON_WIDTH - 1] + "…"
    assert len(cell) == len("✗ ") + host_view.REASON_WIDTH
    exact = "x" * host_view.REASON_WIDTH
    assert host_view.reason_cell(exact) == "✗ " + exact


def test_progress_text_shows_the_eta_only_while_running() -> None:
    s = Summary(step=1840, total=3000, loss=0.8123, eta_seconds=2938.0)
    assert host_view.progress_text(s, running=True) == "1840/3000 ▕████  ▏ loss 0.812 · 48m58s"
    assert host_view.progress_text(s, running=False) == "1840/3000 ▕████  ▏ loss 0.812"


def test_progress_text_without_metrics_shows_the_logs_last_line_cut_to_fit() -> None:
    tail = ["Loading checkpoint shards", "Downloading model weights from the hub, please wait", ""]
    text = host_view.progress_text(Summary(), running=True, tail=tail)
    assert text == "Downloading model weights f…"
    assert len(text) == host_view.PROGRESS_WIDTH
    assert host_view.progress_text(Summary(), running=True) == ""  # no tail read yet


def test_a_host_is_reached_when_any_run_answered_and_unjudged_when_none_was_asked() -> None:
    a, b = ("h", "~/w", "a"), ("h", "~/w", "b")
    assert host_view.reached({a: probes.UNREACHABLE, b: probes.RUNNING})
    assert not host_view.reached({a: probes.UNREACHABLE, b: probes.UNREACHABLE})
    assert host_view.reached({})
    assert host_view.HostView("h", {a: probes.UNREACHABLE}).reached is False


def test_lines_for_words_queued_runs_from_the_schedulers_word_and_leaves_the_rest() -> None:
    """Runs whose line needs no log (queued, unreachable, an ended run already settled,
    starting) are worded without a host: only a queued one gets a new line."""
    recs = [RunRecord("h", run_id, "~/w") for run_id in ("q1", "q2", "gone", "done", "new")]
    states = {recs[0].key: probes.QUEUED, recs[1].key: probes.QUEUED,
              recs[2].key: probes.UNREACHABLE, recs[3].key: "failed (exit 1)",
              recs[4].key: probes.STARTING}
    engine = SimpleNamespace(reasons={recs[0].key: "Priority"})
    lines = asyncio.run(host_view.lines_for(engine, recs, states, settled={recs[3].key}))
    assert lines == (
        RunLine(recs[0].key, probes.QUEUED, "waiting: Priority", waiting="waiting: Priority"),
        RunLine(recs[1].key, probes.QUEUED, "waiting in the queue", waiting="waiting in the queue"),
    )


def test_run_line_words_status_as_the_row_does_from_the_probe_alone() -> None:
    """What `status` prints: with the probe given and a reason in it, no host is asked."""
    queued = RunProbe(exists=True, queued=True, reason="Resources", queue_place=2)
    line = asyncio.run(host_view.run_line(None, "h", "~/w", "r", queued))
    assert line == RunLine(("h", "~/w", "r"), probes.QUEUED, reason="Resources",
                           waiting="waiting: Resources", queue_place=2)
    timeout = RunProbe(exists=True, launched=True, exit_code=143, reason="TIMEOUT")
    line = asyncio.run(host_view.run_line(None, "h", "~/w", "r", timeout))
    assert (line.state, line.reason, line.waiting, line.settled) == \
        ("failed (exit 143)", "TIMEOUT", "", True)
    running = RunProbe(exists=True, launched=True, alive=True)
    line = asyncio.run(host_view.run_line(None, "h", "~/w", "r", running))
    assert (line.state, line.reason, line.settled) == (probes.RUNNING, "", False)


def test_a_resumed_runs_cell_says_its_attempt() -> None:
    assert host_view.attempt_cell("180/300 loss 1.2", 2) == "attempt 2 · 180/300 loss 1.2"
    assert host_view.attempt_cell("", 3) == "attempt 3"
    assert host_view.attempt_cell("180/300", 1) == "180/300"
    recs = [RunRecord("h", "q1", "~/w", attempt=2), RunRecord("h", "q2", "~/w")]
    states = {r.key: probes.QUEUED for r in recs}
    lines = asyncio.run(host_view.lines_for(SimpleNamespace(reasons={}), recs, states))
    assert [line.progress for line in lines] == ["attempt 2 · waiting in the queue",
                                                 "waiting in the queue"]
