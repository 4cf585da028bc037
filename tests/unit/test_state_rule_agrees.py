"""One state rule: the Python (`run_state` in core/runs/state_rule.py, which every face,
the client's notifier and notify.pyz use) and its shell copy (`state_word` in
core/host/state_rule.sh, which the wrapper's end runs on the host to choose the event it
tells) give the same word and reason for the same host facts.

Hypothesis writes the facts; all the examples of one run go to one `dash` (as a bare
Debian host runs it), one line of facts in, one word out, so the proof costs one process.
"""

from __future__ import annotations

import shutil
import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from rtrain_tui.core import host
from rtrain_tui.core.runs.state_rule import HostFacts, run_state

FLAGS = ("exists", "stopped", "stop_requested", "queued", "alive", "unwritten", "submitting",
         "launched")
# Exit codes as `$?` writes them: 0, a failure, a signal's 128+N, and the odd ones.
CODES = st.one_of(st.none(), st.sampled_from([0, 1, 2, 3, 137, 143, 255]), st.integers(-300, 300))


@st.composite
def host_facts(draw: st.DrawFn) -> HostFacts:
    flags = {name: draw(st.booleans()) for name in FLAGS}
    return HostFacts(exit_code=draw(CODES), **flags)


def shell_words(many: list[HostFacts]) -> list[tuple[str, str]]:
    """`state_word` of each facts, under dash: (word, reason)."""
    dash = shutil.which("dash")
    assert dash, "dash is needed (Debian: apt-get install dash)"
    loop = ('while read -r e s q c u a w b l; do [ "$c" = - ] && c=; '
            'state_word "$e" "$s" "$q" "$c" "$u" "$a" "$w" "$b" "$l"; '
            'printf "%s|%s\\n" "$sw" "$sw_why"; done\n')
    lines = "".join(
        " ".join(["1" if f.exists else "0", "1" if f.stopped else "0",
                  "1" if f.stop_requested else "0", "-" if f.exit_code is None else str(f.exit_code),
                  *("1" if getattr(f, n) else "0" for n in ("queued", "alive", "unwritten",
                                                            "submitting", "launched"))]) + "\n"
        for f in many)
    out = subprocess.run([dash, "-c", host.text("state_rule.sh") + loop], input=lines,
                         capture_output=True, text=True, timeout=20, check=True).stdout
    return [tuple(line.split("|", 1)) for line in out.splitlines()]  # type: ignore[misc]


@settings(max_examples=40, deadline=None)
@given(st.lists(host_facts(), min_size=1, max_size=60))
def test_the_shell_copy_and_the_python_rule_agree_on_generated_host_facts(many: list[HostFacts]) -> None:
    assert shell_words(many) == [run_state(f) for f in many]


def test_every_word_of_the_rule_is_reached_by_both_copies() -> None:
    """The edges the precedence turns on, each spelled out (hypothesis may miss one)."""
    cases = {
        HostFacts(exists=False, stopped=True): ("unknown", ""),
        HostFacts(stopped=True, exit_code=0): ("stopped", ""),
        # R02: our stop, whatever the trainer answered its TERM with
        HostFacts(stop_requested=True, exit_code=1, launched=True): ("stopped", ""),
        HostFacts(stop_requested=True, exit_code=143, launched=True): ("stopped", ""),
        HostFacts(exit_code=0, launched=True): ("completed", ""),
        HostFacts(exit_code=1, launched=True): ("failed (exit 1)", ""),
        HostFacts(queued=True, alive=True, launched=True): ("queued", ""),
        HostFacts(alive=True, stop_requested=True, launched=True): ("running", ""),
        HostFacts(stop_requested=True, launched=True): ("stopped", ""),
        HostFacts(unwritten=True, launched=True): ("failed", ""),
        # R01: a job whose sbatch has not answered is starting, never lost
        HostFacts(submitting=True, launched=True): ("starting", "submitting the job to the scheduler"),
        HostFacts(): ("unknown", ""),
        HostFacts(launched=True): ("lost", ""),
    }
    assert [run_state(f) for f in cases] == list(cases.values())
    assert shell_words(list(cases)) == list(cases.values())
