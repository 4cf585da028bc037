"""The cost rule (core/runs/cost.py) to the cent, and the prices config.toml gives it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.runs import hostconfig
from rtrain_tui.core.runs.cost import Cost, money, run_cost, seconds_billed
from rtrain_tui.core.runs.hostconfig import Price
from rtrain_tui.core.runs.index import RunRecord

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
BOX = Price(Decimal("2.49"))
PER_GPU = Price(Decimal("0.80"), per_gpu=True)


def iso(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def epoch(minutes: float) -> int:
    return int((T0 + timedelta(minutes=minutes)).timestamp())


def test_a_completed_run_costs_its_hours_at_the_box_price_to_the_cent() -> None:
    run = RunRecord("h100", "r", "~/w", state="completed", started_at=iso(0), ended_at=iso(150))
    cost = run_cost(run, BOX, T0 + timedelta(days=3))
    assert cost == Cost(Decimal("6.23"), None, "$")  # 2.5 h × 2.49 = 6.225 → 6.23 (half up)
    assert cost.text() == "$6.23"


def test_per_gpu_hour_counts_the_gpus_the_run_holds() -> None:
    run = RunRecord("slurm", "r", "~/w", state="completed", gpus=4, started_at=iso(0),
                    ended_at=iso(90))
    assert run_cost(run, PER_GPU, T0).spent == Decimal("4.80")  # 1.5 h × 4 × 0.80
    cpu = RunRecord("slurm", "r", "~/w", state="completed", gpus=0, started_at=iso(0), ended_at=iso(90))
    assert run_cost(cpu, PER_GPU, T0).spent == Decimal("0.00")


def test_per_gpu_hour_counts_every_nodes_gpus_on_a_multi_node_job() -> None:
    # 2 nodes × 4 GPUs each, 1.5 h at 0.80 per GPU-hour: 8 GPUs held, not one node's 4.
    run = RunRecord("slurm", "pair", "~/w", state="completed", gpus=4, nodes=2,
                    started_at=iso(0), ended_at=iso(90))
    assert run_cost(run, PER_GPU, T0).spent == Decimal("9.60")
    assert run_cost(run, BOX, T0).spent == Decimal("3.74")  # a price per hour is per hour


def test_a_running_run_costs_until_now_and_projects_its_end_from_the_eta() -> None:
    run = RunRecord("h100", "r", "~/w", state="running", started_at=iso(0))
    cost = run_cost(run, Price(Decimal("3")), T0 + timedelta(hours=4, minutes=8), eta_s=3600 * 1.8)
    assert cost is not None and cost.spent == Decimal("12.40")
    assert cost.at_end == Decimal("17.80") and cost.text() == "$12.40 → ~$17.80"


def test_a_queued_run_costs_nothing_while_it_waits() -> None:
    run = RunRecord("slurm", "r", "~/w", state="queued", started_at=iso(0))
    assert run_cost(run, BOX, T0 + timedelta(hours=9), eta_s=600) == Cost(Decimal("0.00"))
    # A resumed run queued for its second attempt: the first one's hours only.
    attempts = [{"attempt": 1, "started": iso(0), "ended": epoch(60)},
                {"attempt": 2, "started": epoch(120)}]
    assert run_cost(run, BOX, T0 + timedelta(hours=9), attempts).spent == Decimal("2.49")


def test_a_resumed_run_sums_its_attempts_and_not_the_gaps_between_them() -> None:
    run = RunRecord("h100", "r", "~/w", state="completed", attempt=3, started_at=iso(0),
                    ended_at=iso(300))
    attempts = [  # as attempts.jsonl has them: attempt 1's start from the index, the rest epochs
        {"attempt": 1, "started": iso(0), "ended": epoch(40), "state": "failed (exit 1)"},
        {"attempt": 2, "started": epoch(100), "ended": epoch(130), "state": "lost"},
        {"attempt": 3, "started": epoch(200)},
    ]
    # 40 + 30 + 100 minutes = 170 min at 2.49/h = 7.055 → 7.06
    assert seconds_billed(run, T0, attempts) == Decimal(170 * 60)
    assert run_cost(run, BOX, T0, attempts).spent == Decimal("7.06")


def test_the_index_alone_leaves_out_the_wait_once_it_keeps_when_the_run_began_running() -> None:
    # Queued 45 minutes, then ran an hour: the refresh kept when it got its GPUs.
    run = RunRecord("box", "r", "~/w", state="completed", started_at=iso(0), ended_at=iso(105),
                    running_at=iso(45))
    assert seconds_billed(run, T0) == Decimal(3600)
    assert seconds_billed(replace(run, running_at=""), T0) == Decimal(105 * 60)  # not known
    # A resumed run's current attempt, queued 20 minutes: the earlier hour and 40 minutes.
    resumed = replace(run, attempt=2, attempt_started_at=iso(120), earlier_s=3600.0,
                      ended_at=iso(180), running_at=iso(140))
    assert seconds_billed(resumed, T0) == Decimal(100 * 60)


def test_a_launch_time_the_host_recorded_leaves_out_the_wait_for_gpus() -> None:
    run = RunRecord("box", "r", "~/w", state="running", started_at=iso(0))
    attempts = [{"attempt": 1, "started": iso(0), "launched": epoch(45)}]
    assert seconds_billed(run, T0 + timedelta(minutes=105), attempts) == Decimal(3600)


def test_a_retried_attempt_with_no_end_recorded_ends_when_the_next_starts() -> None:
    run = RunRecord("box", "r", "~/w", state="completed", started_at=iso(0), ended_at=iso(90))
    attempts = [{"attempt": 1, "exit": 1, "retried": True},
                {"attempt": 2, "started": epoch(30), "retry": True}]
    assert seconds_billed(run, T0, attempts) == Decimal(90 * 60)


def test_no_price_means_no_cost_and_a_never_launched_run_costs_nothing() -> None:
    run = RunRecord("box", "r", "~/w", state="completed", started_at=iso(0), ended_at=iso(60))
    assert run_cost(run, None, T0) is None
    never = RunRecord("box", "r", "~/w", state="unknown", started_at=iso(0))
    assert run_cost(never, BOX, T0 + timedelta(hours=5)).spent == Decimal("0.00")


def test_money_is_grouped_and_in_the_hosts_currency() -> None:
    assert money(Decimal("1234.5"), "€") == "€1,234.50"
    assert Cost(Decimal("0.10"), Decimal("1.00"), "EUR ").text() == "EUR 0.10 → ~EUR 1.00"


@given(st.lists(st.integers(min_value=0, max_value=10**7), min_size=1, max_size=6),
       st.decimals(min_value=0, max_value=1000, places=2))
def test_attempts_add_up_to_the_cent_with_no_float_drift(lengths: list[int], price: Decimal) -> None:
    """However the hours split into attempts (with gaps), the cost is the whole time's,
    rounded once: never a cent off from rounding each attempt or from floats."""
    attempts, at = [], T0
    for n, length in enumerate(lengths, 1):
        start = at + timedelta(seconds=17 * n)  # a gap before each attempt costs nothing
        attempts.append({"attempt": n, "started": start.isoformat(),
                         "ended": (start + timedelta(seconds=length)).isoformat()})
        at = start + timedelta(seconds=length)
    run = RunRecord("box", "r", "~/w", state="failed (exit 1)", started_at=attempts[0]["started"],
                    ended_at=at.isoformat(), attempt=len(lengths))
    cost = run_cost(run, Price(price), at, attempts)
    exact = price * sum(lengths) / 3600
    assert cost is not None and abs(cost.spent - exact) <= Decimal("0.005")
    assert cost.spent == cost.spent.quantize(Decimal("0.01"))


# -- config.toml -----------------------------------------------------------------------
def test_config_gives_a_hosts_price_per_hour_or_per_gpu_hour_and_currency(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('currency = "€"\n[hosts.h100]\nprice_per_hour = 2.49\n'
                    '[hosts.slurm]\nprice_per_gpu_hour = 1\ncurrency = "$"\n[hosts.lab]\n'
                    'backend = "direct"\n', encoding="utf-8")
    config = hostconfig.load(path)
    assert config.for_host("h100").price == Price(Decimal("2.49"), False, "€")
    assert config.for_host("slurm").price == Price(Decimal("1"), True, "$")
    assert config.for_host("lab").price is None and config.for_host("other").price is None
    assert config.for_host("h100").price.label() == "€2.49/h"
    assert config.for_host("slurm").price.label() == "$1/GPU·h"


@pytest.mark.parametrize(("text", "said"), [
    ("[hosts.h]\nprice_per_hour = -1\n", "price_per_hour must be 0 or more"),
    ('[hosts.h]\nprice_per_hour = "2.49"\n', "price_per_hour must be a number"),
    ("[hosts.h]\nprice_per_gpu_hour = true\n", "price_per_gpu_hour must be a number"),
    ("[hosts.h]\nprice_per_hour = 1\nprice_per_gpu_hour = 1\n", "both price_per_hour and"),
    ("[hosts.h]\nprice_per_hour = nan\n", "price_per_hour must be 0 or more"),
    ('[hosts.h]\ncurrency = ""\n', "currency must be text"),
    ("currency = 5\n", "currency must be text"),
    ("[hosts.h]\nprice_per_day = 3\n", "unknown key(s) price_per_day"),
])
def test_a_bad_price_is_one_line_naming_the_key_and_file(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValidationError) as err:
        hostconfig.load(path)
    assert said in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


# -- a resumed run from the index alone (runs, costs, the app's table) -------------------
def test_the_index_keeps_a_resumes_earlier_seconds_so_the_gaps_cost_nothing(tmp_path: Path) -> None:
    from rtrain_tui.core.runs.cost import next_attempt as billing
    from rtrain_tui.core.runs.index import RunIndex

    first = RunRecord("box", "r", "~/w", state="failed (exit 1)", started_at=iso(0))
    second = replace(first, **billing(first, epoch(40), iso(100)))  # ran 0 → 40, resumed at 100
    assert (second.attempt_started_at, second.earlier_s) == (iso(100), 2400)
    third = replace(second, **billing(second, epoch(130), iso(200)))  # ran 100 → 130
    assert (third.attempt_started_at, third.earlier_s) == (iso(200), 4200)
    assert billing(third, None, iso(300)) == {}  # no end known: the whole span counts
    done = replace(third, state="completed", ended_at=iso(300))
    # 40 + 30 + 100 minutes, as the host's attempts.jsonl would sum them: 7.055 → 7.06
    assert run_cost(done, BOX, T0).spent == Decimal("7.06")
    queued = replace(third, state="queued")
    assert run_cost(queued, BOX, T0 + timedelta(hours=9)).spent == Decimal("2.91")  # 70 min

    index = RunIndex(tmp_path / "runs.toml")
    index.add(done)
    index.add(RunRecord("box", "plain", "~/w", state="running", started_at=iso(0)))
    assert index.get("box", "r") == done
    text = index.path.read_text(encoding="utf-8") + "".join(
        p.read_text(encoding="utf-8") for p in index.archives())
    assert text.count("earlier_s") == 1 and text.count("attempt_started_at") == 1


def test_an_index_record_with_a_bad_earlier_s_is_skipped_and_said(tmp_path: Path) -> None:
    from rtrain_tui.core.runs.index import RunIndex

    path = tmp_path / "runs.toml"
    path.write_text('[[runs]]\nhost = "box"\nrun_id = "r"\nworkdir = "~/w"\nearlier_s = "lots"\n',
                    encoding="utf-8")
    report = RunIndex(path).load_report()
    assert report.records == [] and "earlier_s should be a number of seconds" in report.problems[0]


def test_a_requeued_jobs_earlier_run_is_billed_and_its_time_requeued_is_not() -> None:
    """R04: the batch script's second `launched` (a requeue) replaced the first, and the
    job was billed from its last start only. Its `ran` says what ran before."""
    run = RunRecord("slurm", "r", "~/w", state="completed", started_at=iso(0), ended_at=iso(80))
    attempts = [{"attempt": 1, "launched": epoch(0)},
                {"attempt": 1, "launched": epoch(50), "ran": 30 * 60}]  # ran 0 → 30, queued to 50
    assert seconds_billed(run, T0, attempts) == Decimal(60 * 60)
    # The index keeps the same total (status records it; the probe's running_since says
    # the earlier start the script wrote): `runs` and `costs` bill it too.
    from rtrain_tui.core.runs.cost import recorded

    kept = recorded(replace(run, state="running", ended_at=""), attempts, "completed",
                    T0 + timedelta(minutes=80), T0 + timedelta(days=1))
    assert seconds_billed(kept, T0 + timedelta(days=9)) == Decimal(60 * 60)


def test_a_resume_bills_the_attempt_before_from_when_it_got_its_gpus() -> None:
    """R08: resuming a `--queue` run billed its first attempt from its start, the 45
    minutes it waited for GPUs included."""
    from rtrain_tui.core.runs.cost import next_attempt

    old = RunRecord("box", "r", "~/w", state="failed (exit 1)", started_at=iso(0), running_at=iso(45))
    # As resume.py writes the new attempt: its own launch not known yet.
    resumed = replace(old, state="completed", ended_at=iso(200), running_at="",
                      **next_attempt(old, epoch(105), iso(140)))
    assert resumed.earlier_s == 3600
    assert seconds_billed(resumed, T0) == Decimal(3600 + 60 * 60)  # 45 → 105, then 140 → 200


def test_an_attempt_a_resume_claimed_and_never_launched_costs_nothing() -> None:
    """Its claim wrote when it started; its launch failed (GPUs refused, a lost link), and
    the next resume came a day later and found it `unknown`, with no exit code: nothing of
    it ran, so the day between is not billed (it was, from the claim to the next resume)."""
    run = RunRecord("box", "r", "~/w", state="completed", attempt=3, started_at=iso(0),
                    ended_at=iso(1600))
    attempts = [
        {"attempt": 1, "started": iso(0), "ended": epoch(40), "state": "failed (exit 1)", "exit": 1},
        {"attempt": 2, "started": epoch(50)},  # the claim
        {"attempt": 2, "state": "unknown", "exit": None, "ended": None},  # the next resume's record
        {"attempt": 3, "started": epoch(1500)},
    ]
    assert seconds_billed(run, T0, attempts) == Decimal((40 + 100) * 60)


def test_the_cost_rule_and_the_attempt_layout_bound_attempt_numbers_alike() -> None:
    """Both read attempt numbers from host text (R09); one bound, or a number one accepts
    and the other drops makes the run's attempt count disagree between faces."""
    from rtrain_tui.core.runs import attempt_layout, cost_rule

    assert cost_rule.MAX_ATTEMPT == attempt_layout.MAX_ATTEMPT
    for n in (1, attempt_layout.MAX_ATTEMPT, attempt_layout.MAX_ATTEMPT + 1, 0):
        kept = n in cost_rule.merged([{"attempt": n}])
        assert kept == (attempt_layout.attempt_number(n) is not None), n
