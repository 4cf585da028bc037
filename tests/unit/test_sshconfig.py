"""The host list is what the user's ~/.ssh/config names, patterns left out."""

from pathlib import Path

from rtrain_tui.core.transport.sshconfig import list_hosts


def test_hosts_come_from_config_and_includes_without_patterns(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh = tmp_path / ".ssh"
    (ssh / "conf.d").mkdir(parents=True)
    (ssh / "conf.d" / "lab.conf").write_text("Host lab-a lab-b\n  HostName 10.0.0.1\n")
    (ssh / "config").write_text(
        "# my boxes\nInclude conf.d/*.conf\nHost h100 \"rented box\"\n  User me\n"
        "Host *.internal !bastion gpu?\n  User x\nHost=h100 eq-style\nMatch host foo\n"
    )
    assert list_hosts(ssh / "config") == ["lab-a", "lab-b", "h100", "rented box", "eq-style"]


def test_missing_config_gives_no_hosts(tmp_path: Path) -> None:
    assert list_hosts(tmp_path / "nope") == []


def test_include_loop_terminates(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(f"Include {cfg}\nHost a\n")
    assert list_hosts(cfg) == ["a"]


def test_tab_equals_and_quoted_host_lines_are_listed(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(
        "Host\ttabbed\n  User me\nHost=eq\nHost = spaced-eq\n\tHost\t\"quoted alias\" 'single'\n"
        "HOST upper\nHost\tpat* !neg ok-too\n"
    )
    assert list_hosts(cfg) == ["tabbed", "eq", "spaced-eq", "quoted alias", "single", "upper", "ok-too"]


def test_aliases_with_control_characters_are_not_listed(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text("Host good \"bad\x1b]0;x\x07\" \"rtl\u202eevil\"\n")
    assert list_hosts(cfg) == ["good"]
