"""The message for a run's transition (core/notify/message.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from rtrain_tui.core.metrics.metrics import Summary
from rtrain_tui.core.notify.message import build, event_of
from rtrain_tui.core.runs.cost import Cost


@pytest.mark.parametrize(("state", "stalled_for", "event"), [
    ("failed (exit 1)", None, "failed"), ("failed", None, "failed"), ("lost", None, "lost"),
    ("completed", None, "completed"), ("stopped", None, "stopped"),
    ("running", 1020, "stalled"), ("running", None, None), ("queued", None, None),
    ("starting", None, None), ("unknown", None, None), ("unreachable", None, None),
])
def test_only_ends_and_stalls_are_events(state: str, stalled_for: int | None, event: str | None) -> None:
    assert event_of(state, stalled_for) == event


def test_a_failed_runs_message_has_reason_progress_loss_elapsed_cost_and_the_commands() -> None:
    message = build("h100", "sft-7", "failed (exit 1)", reason="CUDA out of memory",
                    summary=Summary(step=40, total=3000, loss=2.3125, eval_loss=2.401),
                    elapsed_s=4330, cost=Cost(Decimal("3.00"), None, "$"))
    assert message is not None and message.event == "failed"
    assert message.title == "rtrain-tui: sft-7 on h100 failed (exit 1)"
    assert message.body.splitlines() == [
        "reason: CUDA out of memory",
        "step 40/3000 · loss 2.312 · eval loss 2.401",
        "elapsed 1h12m · cost $3.00",
        "look: rtrain-tui tail h100 sft-7",
        "resume: rtrain-tui resume h100 sft-7",
    ]


def test_a_stall_says_for_how_long_and_how_to_stop_it() -> None:
    message = build("box", "r1", "running", stalled_for=17 * 60, summary=Summary(step=5))
    assert message is not None and message.event == "stalled"
    assert message.title == "rtrain-tui: r1 on box stalled: no output for 17m"
    assert message.body.splitlines() == ["step 5", "look: rtrain-tui tail box r1", "stop: rtrain-tui stop box r1"]


def test_a_completed_run_with_nothing_known_still_names_run_host_and_how_to_look() -> None:
    message = build("box", "r1", "completed")
    assert message is not None
    assert message.body == "look: rtrain-tui tail box r1"


def test_no_message_for_a_run_still_going() -> None:
    assert build("box", "r1", "running") is None
    assert build("box", "r1", "queued", reason="Resources") is None


def test_what_the_host_wrote_reaches_the_message_as_one_safe_line() -> None:
    message = build("box", "r1", "lost", reason="oom\n\x1b[31mkilled\x1b]0;pwn\x07 by kernel")
    assert message is not None
    reason = message.body.splitlines()[0]
    assert "\x1b" not in message.body and "\x07" not in message.body
    assert reason.startswith("reason: oom") and "killed" in reason
