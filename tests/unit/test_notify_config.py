"""config.toml's `[notify]` and per-host `notify`, and URL masking (core/safety/mask.py):
tokens never shown whole, in errors or anywhere else."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.runs import hostconfig
from rtrain_tui.core.safety.mask import mask_text, mask_url


def load(tmp_path: Path, text: str) -> hostconfig.HostConfig:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return hostconfig.load(path)


def test_notify_defaults_to_every_end_and_stalls_with_no_urls(tmp_path: Path) -> None:
    config = load(tmp_path, "[hosts.a]\nbackend = 'direct'\n")
    assert config.notify.urls == ()
    assert config.notify.on == ("failed", "lost", "stalled", "completed")
    assert config.notify_urls("a") == ()


def test_a_hosts_urls_come_after_the_global_ones_each_once(tmp_path: Path) -> None:
    config = load(tmp_path, """
[notify]
urls = ["ntfy://all-runs", "json://127.0.0.1:9/x"]
on = ["failed", "stopped"]
[hosts.h100]
notify = ["discord://1234/TOKENabc", "ntfy://all-runs"]
[hosts.other]
price_per_hour = 1
""")
    assert config.notify.on == ("failed", "stopped")
    assert config.notify_urls("h100") == ("ntfy://all-runs", "json://127.0.0.1:9/x", "discord://1234/TOKENabc")
    assert config.notify_urls("other") == ("ntfy://all-runs", "json://127.0.0.1:9/x")
    assert config.notify_urls("unknown-host") == config.notify_urls("other")


@pytest.mark.parametrize(("text", "names"), [
    ('[notify]\non = ["failed", "exploded"]\n', ["[notify]", "on", "exploded"]),
    ('[notify]\nurls = "ntfy://x"\n', ["[notify]", "urls"]),
    ('[notify]\nurls = [3]\n', ["[notify]", "urls", "int"]),
    ('[notify]\nsend = true\n', ["[notify]", "send"]),
    ('notify = 3\n', ["[notify]"]),
    ('[hosts.h]\nnotify = ["no scheme here"]\n', ["[hosts.h]", "notify"]),
    ('[hosts.h]\nnotify = ["slack://SECRETTOKEN1/SECRETTOKEN2 with space"]\n', ["[hosts.h]", "notify"]),
])
def test_a_bad_notify_value_is_one_line_naming_the_key_and_the_file(tmp_path: Path, text: str,
                                                                     names: list[str]) -> None:
    with pytest.raises(ValidationError) as caught:
        load(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path / "config.toml") in message
    for name in names:
        assert name in message
    assert "SECRETTOKEN" not in message  # the bad URL is named masked, never whole


def test_masking_keeps_the_service_and_hides_every_token() -> None:
    assert mask_url("slack://TokenA/TokenB/TokenC/#training") == "slack://To…/To…/To…/#tr…"
    assert mask_url("mailto://me:pw@example.com") == "mailto://me:***@ex….com"
    assert mask_url("json://127.0.0.1:8080/hook") == "json://127.0.0.1:80…/ho…"
    assert mask_url("ntfy://my-runs") == "ntfy://my…"


def test_mask_text_masks_the_configured_urls_and_any_other_url_in_an_error() -> None:
    line = "send to tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/987 failed: http://x.io/SECRETPATH"
    shown = mask_text(line, ("tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/987",))
    assert "AAHdqTcv" not in shown and "SECRETPATH" not in shown and "123456789" not in shown
    assert shown.startswith("send to tgram://") and "failed: http://" in shown


_TOKEN = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=4, max_size=64)
_PART = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_./:@?&=#%+~!", max_size=20)
_SCHEMES = st.sampled_from(["slack", "ntfy", "ntfys", "json", "https", "discord", "tgram", "mailto"])


@given(_SCHEMES, _PART, _TOKEN, _PART)
def test_no_token_of_four_or_more_characters_survives_masking(scheme: str, before: str, token: str,
                                                              after: str) -> None:
    url = f"{scheme}://{before}{token}{after}"
    assert token not in mask_url(url)[len(scheme) + 3:]
    # In free text, the same: found as configured, or as any URL.
    assert mask_text(f"error: {url}", (url,)) == mask_text(f"error: {url}") == f"error: {mask_url(url)}"


@given(_SCHEMES, _TOKEN, _TOKEN)
def test_a_password_is_never_shown_at_all(scheme: str, user: str, password: str) -> None:
    shown = mask_url(f"{scheme}://{user}:{password}@example.com/x")
    assert shown.startswith(f"{scheme}://") and ":***@" in shown
