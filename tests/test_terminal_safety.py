"""A trainer's output and a host's answers never act on the user's terminal.

The stand-in trainer's `hostile_escapes` prints OSC 0/2 (title), OSC 8 (link), OSC 52
(clipboard), CSI 2J, CSI ?1049h, BEL and a bare CR. `tail` and `start --follow` must show
none of them (on a pipe as on a terminal), `--raw` must keep them, and the TUI log pane
must show none of them. Every CLI error stays one line, whatever the host or alias holds.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtrain_tui.core import RunIndex
from rtrain_tui.tui.widgets.log_pane import LogPane
from tests.conftest import Cli, write_config
from tests.scenes import RUNS, make_scene_app
from tests.sshd import SshHosts
from tests.test_tui import SIZE, screen_text, start_run, tui, until

# What must never reach the terminal; the payloads are how we would notice if it did.
ACTIVE = ["\x1b]0;", "\x1b]2;", "\x1b]8;", "\x1b]52;", "\x1b[2J", "\x1b[?1049h", "\x07", "\r"]
PAYLOADS = ["PWNED-TITLE-0", "PWNED-TITLE-2", "UFdORUQtQ0xJUA==", "evil.example"]


def assert_inert(text: str) -> None:
    for seq in ACTIVE:
        assert seq not in text, f"{seq!r} reached the output"
    assert "\x1b" not in text and "\x9b" not in text and "\x9d" not in text
    for payload in PAYLOADS:
        assert payload not in text, f"the hidden payload {payload!r} became visible text"


def hostile_run(cli: Cli, tmp_path: Path, workdir: str, run_id: str, *extra: str):  # type: ignore[no-untyped-def]
    config = write_config(tmp_path / f"{run_id}.yaml", steps=2, hostile_escapes=True)
    return cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", run_id, *extra)


def test_start_follow_and_tail_strip_escapes_and_raw_keeps_them(cli: Cli, tmp_path: Path, workdir: str) -> None:
    followed = hostile_run(cli, tmp_path, workdir, "hostile")
    assert followed.rc == 0, followed.err
    assert "hostile: clipboard  osc52" in followed.out and "PWNED-LINK" in followed.out
    assert_inert(followed.out)

    tailed = cli("tail", "gpu", "hostile", "--workdir", workdir)
    assert tailed.rc == 0, tailed.err
    assert_inert(tailed.out)
    assert "hostile: title  osc0" in tailed.out and "hostile: altscreen  csi1049" in tailed.out
    assert tailed.out.splitlines()[-1] == "hostile on gpu: completed"

    raw = cli("tail", "gpu", "hostile", "--workdir", workdir, "--raw")
    assert raw.rc == 0, raw.err
    for seq in ACTIVE[:-1]:  # \r ends a line in the log reader, with or without --raw
        assert seq in raw.out, f"--raw dropped {seq!r}"


def test_start_follow_raw_passes_escapes_through(cli: Cli, tmp_path: Path, workdir: str) -> None:
    r = hostile_run(cli, tmp_path, workdir, "hostile-raw", "--raw")
    assert r.rc == 0, r.err
    assert "\x1b]52;c;UFdORUQtQ0xJUA==\x07" in r.out and "\x1b[2J" in r.out


def test_log_pane_shows_no_escape_sequence(tmp_path: Path) -> None:
    hostile = ["t \x1b]0;PWNED-TITLE-0\x07 x", "c \x1b]52;c;UFdORUQtQ0xJUA==\x07 x",
               "l \x1b]8;;https://evil.example/\x07PWNED-LINK\x1b]8;;\x07 x", "\x1b[2J\x1b[?1049h z",
               "bell \x07 cr\rover", "\x1b[31mred\x1b[0m [bold]x[@click(].jsonl[/]", "\u202eevil"]

    async def go() -> None:
        app = make_scene_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            pane = app.open_log(RUNS[0], follow=False)
            await pilot.pause()
            pane.add_lines(hostile)
            pane._flush()
            await pilot.pause()
            lines = list(pane.log_widget.lines)
            for line in lines:
                assert_inert(line)
            assert "red [bold]x[@click(].jsonl[/]" in lines  # markup shown literally
            shown = screen_text(app)
            assert_inert(shown)
            assert "x[@click(].jsonl" in shown and "PWNED-LINK" in shown

    asyncio.run(go())


def test_log_pane_of_a_real_hostile_run_shows_no_escape_sequence(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    start_run(hosts, tmp_path, "hostile-tui", steps=2, hostile_escapes=True)
    record = next(r for r in RunIndex(tmp_path / "runs.toml").load() if r.run_id == "hostile-tui")

    async def go() -> None:
        app = tui(hosts, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            app.open_log(record)
            await until(pilot, lambda: bool(app.query(LogPane)), "a log pane")
            pane = app.query_one(LogPane)
            await until(pilot, lambda: pane.stream == "ended", "the run to end")
            await pilot.pause(0.1)
            lines = list(pane.log_widget.lines)
            assert any("hostile: clipboard" in line for line in lines)
            for line in lines:
                assert_inert(line)
            assert_inert(screen_text(app))

    asyncio.run(go())


# -- one-line errors -------------------------------------------------------------------
@pytest.mark.parametrize("host", ["gpu\x1b]0;PWNED-TITLE-0\x07", "a..b", "x" * 300, "\u202egpu",
                                  "\ufeffgpu", "g\x1b[2J", "-oProxyCommand=touch x"])
def test_odd_aliases_give_one_inert_error_line(cli: Cli, host: str) -> None:
    r = cli("status", "--", host, "run-1") if host.startswith("-") else cli("status", host, "run-1")
    assert r.rc == 1 and r.out == ""
    assert len(r.err.splitlines()) == 1 and "Traceback" not in r.err
    assert r.err.startswith("rtrain-tui: host ")
    assert "\x1b" not in r.err and "\x07" not in r.err and "\u202e" not in r.err


def test_a_bad_ssh_config_value_is_one_line(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host bad\n  HostName 127.0.0.1\n  Port twenty\n")
    r = subprocess.run([sys.executable, "-m", "rtrain_tui", "--ssh-config", str(config), "--index",
                        str(tmp_path / "runs.toml"), "status", "bad", "run-1"],
                       capture_output=True, text=True, timeout=60, env=cli.hosts.env())
    assert r.returncode == 1, r.stderr
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    assert "Port" in r.stderr and "twenty" in r.stderr


@pytest.mark.parametrize("args", [["runs"], ["runs", "--json"]])
def test_a_closed_stdout_is_one_line_not_a_traceback(cli: Cli, args: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`head -1`) is gone before we write anything
    try:
        p = subprocess.run([sys.executable, "-m", "rtrain_tui", "--index", str(cli.index), *args],
                           stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
                           env=cli.hosts.env())
    finally:
        os.close(write_end)
    assert p.returncode == 1, p.stderr
    assert p.stderr == "rtrain-tui: output closed early (broken pipe)\n"


def test_a_closed_stdout_during_a_long_listing_is_one_line(cli: Cli, tmp_path: Path) -> None:
    from rtrain_tui.core.runs.index import RunRecord

    # More than a pipe buffer (64 KiB) of rows, so the writer is still writing when
    # `head` leaves.
    records = [RunRecord(host="gpu", run_id=f"r{i:05d}" + "x" * 58, workdir="~/w",
                         state="completed", started_at="2026-01-01T00:00:00+00:00")
               for i in range(1000)]
    RunIndex(cli.index).update(lambda runs: runs + records)
    p = subprocess.run(f"{sys.executable} -m rtrain_tui --index {cli.index} runs | head -1",
                       shell=True, capture_output=True, text=True, timeout=60, env=cli.hosts.env())
    assert p.stdout.startswith("HOST")
    assert p.stderr == "rtrain-tui: output closed early (broken pipe)\n"
