"""The start form's per-field checks (pure): each error names its field."""

from __future__ import annotations

from rtrain_tui.tui.screens.start_screen import FIELDS, duration_text, field_error


def values(**given: str) -> dict[str, str]:
    base = {name: "" for name in FIELDS}
    base.update(python="python3", workdir="~/.praisonai-train", gpus="1",
                trainer="{python} -m praisonai_train llm {dataset} --config {config}")
    base.update(given)
    return base


def test_gpu_ids_must_agree_with_the_gpu_count() -> None:
    assert field_error("gpu", "gpu_ids", values(gpus="1", gpu_ids="0,3")) == \
        "GPU ids: GPU ids names 2 GPU(s), GPUs says 1."
    assert field_error("gpu", "gpu_ids", values(gpus="2", gpu_ids="0,3")) == ""
    assert field_error("gpu", "gpu_ids", values(gpu_ids="0,0")).startswith("GPU ids: ")


def test_other_fields_name_themselves() -> None:
    assert field_error("gpu", "gpus", values(gpus="two")) == "GPUs: must be a whole number, not 'two'."
    assert field_error("gpu", "config", values()).startswith("Config: choose a config file")
    assert field_error("gpu", "env", values(env="A='x")).startswith("Env: no closing quotation")


def test_env_field_refuses_a_name_the_wrapper_relies_on() -> None:
    assert field_error("gpu", "env", values(env="RTRAIN_RUN=abc")).startswith(
        "Env: RTRAIN_RUN is not usable: the run's wrapper on the host relies on it")


def test_retries_and_stall_fields_name_themselves() -> None:
    assert field_error("gpu", "retries", values(retries="21")) == "Retries: must be 0 to 20, not 21."
    assert field_error("gpu", "retries", values(retries="x")) == "Retries: must be a whole number, not 'x'."
    assert field_error("gpu", "stall_after", values(stall_after="5 min")).startswith(
        "Stall after: '5 min' is not a duration")
    assert field_error("gpu", "stall_after", values(stall_after="15m")) == ""
    assert field_error("gpu", "on_stall", values(on_stall="restart", retries="0")).startswith(
        "On stall: restart needs Retries of 1 or more")
    assert field_error("gpu", "on_stall", values(on_stall="restart", retries="1")) == ""


def test_on_stall_stop_or_restart_with_stall_after_0_is_refused() -> None:
    for choice in ("stop", "restart"):
        assert field_error("gpu", "on_stall", values(on_stall=choice, retries="1", stall_after="0")) == (
            f"On stall: {choice} never acts with Stall after 0 (never stalled): give Stall after "
            "a duration, e.g. 20m.")
    assert field_error("gpu", "on_stall", values(on_stall="warn", stall_after="0")) == ""
    assert field_error("gpu", "on_stall", values(on_stall="stop", stall_after="20m")) == ""


def test_durations_show_as_typed() -> None:
    assert [duration_text(s) for s in (0, 90, 900, 7200)] == ["0", "90s", "15m", "2h"]
