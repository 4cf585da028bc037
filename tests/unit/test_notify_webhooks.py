"""Webhook-style apprise URLs as the POST a host makes (core/notify/webhooks.py), and
`[notify] on_host` in config.toml."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.notify.webhooks import (
    Post,
    body_of,
    curl_config,
    from_json,
    posts_of,
    to_json,
)
from rtrain_tui.core.runs import hostconfig


@pytest.mark.parametrize(("url", "posts"), [
    ("ntfy://my-runs", [Post("https://ntfy.sh", "ntfy", target="my-runs")]),
    ("ntfys://ntfy.example.com/a/b", [Post("https://ntfy.example.com", "ntfy", target="a"),
                                      Post("https://ntfy.example.com", "ntfy", target="b")]),
    ("ntfy://me:pw@10.0.0.5:8080/runs", [Post("http://10.0.0.5:8080", "ntfy", "me:pw", "runs")]),
    ("slack://TokenA/TokenB/TokenC/#training",
     [Post("https://hooks.slack.com/services/TokenA/TokenB/TokenC", "slack", target="#training")]),
    ("slack://TokenA/TokenB/TokenC", [Post("https://hooks.slack.com/services/TokenA/TokenB/TokenC", "slack")]),
    ("discord://1234/TOKEN_abc-d", [Post("https://discord.com/api/webhooks/1234/TOKEN_abc-d", "discord")]),
    ("json://127.0.0.1:8000/hook", [Post("http://127.0.0.1:8000/hook", "json")]),
    ("jsons://u:p@example.com", [Post("https://example.com/", "json", "u:p")]),
    ("https://hooks.slack.com/services/T1/B2/C3", [Post("https://hooks.slack.com/services/T1/B2/C3", "slack")]),
    ("https://discord.com/api/webhooks/99/tok", [Post("https://discord.com/api/webhooks/99/tok", "discord")]),
    ("https://ntfy.sh/topic1", [Post("https://ntfy.sh", "ntfy", target="topic1")]),
    ("https://example.com/hook?key=1", [Post("https://example.com/hook?key=1", "webhook")]),
])
def test_a_webhook_style_url_becomes_the_posts_apprise_would_make(url: str, posts: list[Post]) -> None:
    assert list(posts_of(url)) == posts


@pytest.mark.parametrize("url", [
    "mailto://me:pw@example.com", "dbus://", "slack://xoxb-1234-abcd/#chan", "ntfy://topic?priority=max",
    "json://host/path?rto=60", "discord://1234", "tgram://bottoken/chat", "ntfy://me@topic",
])
def test_what_only_apprise_can_send_gives_no_post(url: str) -> None:
    assert posts_of(url) == ()


def test_each_body_is_the_services_json_with_title_and_message() -> None:
    title, message = "rtrain-tui: r1 on gpu failed (exit 1)", "reason: <boom> & more\nstep 3/6"
    assert json.loads(body_of(Post("https://ntfy.sh", "ntfy", target="t"), title, message)) == {
        "topic": "t", "title": title, "message": message}
    slack = json.loads(body_of(Post("https://hooks.slack.com/services/a/b/c", "slack", target="#x"), title, message))
    assert slack == {"text": f"*{title}*\nreason: &lt;boom&gt; &amp; more\nstep 3/6", "channel": "#x"}
    assert json.loads(body_of(Post("https://d", "discord"), title, "x" * 5000))["content"].startswith(f"**{title}**\n")
    assert len(json.loads(body_of(Post("https://d", "discord"), title, "x" * 5000))["content"]) == 2000
    apprise_like = json.loads(body_of(Post("http://h/", "json"), title, message))
    assert apprise_like["title"] == title and apprise_like["message"] == message
    assert json.loads(body_of(Post("http://h/", "webhook"), title, message))["text"] == f"{title}\n{message}"


def test_posts_survive_their_json_and_only_http_urls_are_taken_back() -> None:
    posts = posts_of("ntfy://u:p@h/a") + posts_of("json://127.0.0.1/x")
    assert from_json(json.loads(json.dumps(to_json(posts)))) == posts
    assert from_json([{"url": "file:///etc/passwd", "kind": "json"}, "junk", {"url": 3}]) == ()
    assert from_json("nope") == ()


def test_the_curl_config_quotes_every_value_and_keeps_the_body_whole() -> None:
    body = b'{"message": "a \\"quoted\\" word\\nnext"}'
    config = curl_config(Post('http://h/p"x', "json", 'u:p"w\\'), body)
    lines = config.splitlines()
    assert lines[0] == 'url = "http://h/p\\"x"'
    assert 'data-binary = "{\\"message\\": \\"a \\\\\\"quoted\\\\\\" word\\\\nnext\\"}"' in lines
    assert 'user = "u:p\\"w\\\\"' in lines and 'proto = "=http,https"' in lines


def test_on_host_defaults_to_true_and_takes_only_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[notify]\nurls = ["ntfy://x"]\n')
    assert hostconfig.load(path).notify.on_host is True
    path.write_text('[notify]\non_host = false\n')
    assert hostconfig.load(path).notify.on_host is False
    path.write_text('[notify]\non_host = "yes"\n')
    with pytest.raises(ValidationError, match="on_host must be true or false"):
        hostconfig.load(path)
