"""The known_hosts look of a cold start's early `ssh` (core/transport/cold_ssh.py).

It may only ever say "on record" where OpenSSH would find the key under that exact name;
anything it is unsure of reads as not on record (the usual path then takes over).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

from rtrain_tui.core.transport.cold_ssh import key_on_record

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def known(tmp_path: Path, *lines: str) -> list[str]:
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"{line}\n" for line in lines))
    return [str(path)]


def test_a_plain_entry_under_the_exact_name_is_on_record(tmp_path: Path) -> None:
    files = known(tmp_path, "# a comment", "", f"other.example,box.example {KEY}",
                  f"[127.0.0.1]:2222 {KEY}")
    assert key_on_record(files, "box.example")
    assert key_on_record(files, "BOX.example")  # OpenSSH compares host names lower-cased
    assert key_on_record(files, "[127.0.0.1]:2222")
    assert not key_on_record(files, "127.0.0.1")  # port 22's name is another host
    assert not key_on_record(files, "[127.0.0.1]:2223")


def test_a_hashed_entry_is_found_by_its_hmac(tmp_path: Path) -> None:
    files = known(tmp_path, f"{hashed('[10.0.0.5]:2200')} {KEY}")
    assert key_on_record(files, "[10.0.0.5]:2200")
    assert not key_on_record(files, "[10.0.0.5]:2201")


def test_patterns_negations_and_ca_lines_are_not_taken_as_the_key(tmp_path: Path) -> None:
    assert not key_on_record(known(tmp_path, f"*.example {KEY}"), "box.example")
    assert not key_on_record(known(tmp_path, f"box.example,!box.example {KEY}"), "box.example")
    assert not key_on_record(known(tmp_path, f"@cert-authority box.example {KEY}"), "box.example")
    assert not key_on_record(known(tmp_path, "box.example"), "box.example")  # no key at all
    assert not key_on_record(known(tmp_path, f"|1|garbage {KEY}"), "box.example")


def test_a_revoked_line_anywhere_leaves_the_judgement_to_ssh(tmp_path: Path) -> None:
    files = known(tmp_path, f"box.example {KEY}", f"@revoked * {KEY}")
    assert not key_on_record(files, "box.example")


def test_a_missing_file_is_skipped_and_an_unreadable_one_is_unsure(tmp_path: Path) -> None:
    files = known(tmp_path, f"box.example {KEY}")
    assert key_on_record([str(tmp_path / "absent"), *files], "box.example")
    (tmp_path / "dir").mkdir()
    assert not key_on_record([str(tmp_path / "dir"), *files], "box.example")
