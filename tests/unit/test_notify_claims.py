"""The host's claim of a notification (core/notify/claims.py), run under /bin/sh here:
one `mkdir` decides, so a second claim of the same marker is `taken`."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from rtrain_tui.core.notify.claims import Claim, check_event, claim_script, parse_claims

ME, OTHER = "0123abcd0123abcd", "feedbeeffeedbeef"


def run(script: str) -> str:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True).stdout


def test_the_first_claim_wins_with_the_logs_tail_and_every_later_one_is_taken(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "train.log").write_text("{'loss': 2.5, 'step': 3}\nboom\n")
    items = [(str(tmp_path), "r1", "failed"), (str(tmp_path), "gone", "lost")]
    first = parse_claims(run(claim_script(items, ME)), 2)
    assert first[0] == Claim(True, "{'loss': 2.5, 'step': 3}\nboom\n")
    assert first[1] == Claim(False)  # no run dir: nothing to claim, nothing sent
    assert parse_claims(run(claim_script(items, OTHER)), 2)[0] == Claim(False)
    assert (tmp_path / "r1" / "notified" / "a1-failed").is_dir()
    # A resumed (or retried) run's next attempt is a new transition: the host counts it
    # by the attempts filed before it, whatever attempt a client's index holds.
    (tmp_path / "r1" / "attempts" / "1").mkdir(parents=True)
    assert parse_claims(run(claim_script([(str(tmp_path), "r1", "failed")], ME)), 1)[0].claimed
    assert (tmp_path / "r1" / "notified" / "a2-failed").is_dir()


def test_answers_out_of_range_or_malformed_claim_nothing() -> None:
    good = base64.b64encode(b"x").decode()
    out = f"claim\t5\tclaimed\t{good}\nclaim\tx\tclaimed\nnoise\nclaim\t0\tclaimed\t!!notbase64\n"
    assert parse_claims(out, 2) == {0: Claim(True, "")}


@pytest.mark.parametrize("event", ["fa iled", "x;rm", "", "../x", "a" * 17])
def test_an_event_is_only_ever_a_plain_word(event: str) -> None:
    with pytest.raises(ValueError):
        check_event(event)
    with pytest.raises(ValueError):
        claim_script([("/w", "r1", event)], ME)


def test_a_claim_sent_again_with_its_token_finds_its_own_marker_and_no_one_elses(tmp_path: Path) -> None:
    """R05: the connection sends a script once more after a dropped link; a claim whose
    answer was lost found its own marker `taken`, and nobody sent the message."""
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "train.log").write_text("step 3\n")
    items = [(str(tmp_path), "r1", "failed")]
    assert parse_claims(run(claim_script(items, ME)), 1)[0] == Claim(True, "step 3\n")
    assert parse_claims(run(claim_script(items, ME)), 1)[0] == Claim(True, "step 3\n")  # sent again
    assert parse_claims(run(claim_script(items, OTHER)), 1)[0] == Claim(False)  # another client
    # The run's own wrapper claims with no token: taken, whoever made it.
    assert run(claims_sh() + f"claim_mark {tmp_path / 'r1'} failed && echo mine || echo taken\n") == "taken\n"


def claims_sh() -> str:
    from rtrain_tui.core import host as host_files

    # As every script sends it: after attempt.sh, which counts the run's attempt.
    return host_files.text("attempt.sh") + host_files.text("claim_notify.sh")


@pytest.mark.parametrize("token", ["", "x;rm -rf", "ABCDEF0123456789", "a" * 7])
def test_a_token_is_only_ever_hex(token: str) -> None:
    with pytest.raises(ValueError):
        claim_script([("/w", "r1", "failed")], token)
