"""Webhook-style notification URLs as the POST each one makes: what a run's host can send
by itself (core/notify/host_send.py), with its `curl` or its own Python, nothing installed.

apprise speaks to 100+ services, but it lives on the client; a GPU host has `sh`, the
trainer's Python and usually curl. The services whose message is one HTTP POST of a small
JSON body are converted here from the very apprise URL the user configured:

- `ntfy://TOPIC` (ntfy.sh, HTTPS), `ntfy://HOST[:PORT]/TOPIC[/TOPIC…]` (HTTP; `ntfys://`:
  HTTPS), `user:password@` as basic auth: ntfy's publish-as-JSON, one POST per topic;
- `slack://A/B/C[/#channel…]`: the incoming webhook `https://hooks.slack.com/services/A/B/C`;
- `discord://ID/TOKEN`: the webhook `https://discord.com/api/webhooks/ID/TOKEN`;
- `json://HOST[:PORT][/PATH]` (`jsons://`: HTTPS): apprise's JSON payload;
- `http(s)://…`: a native Slack, Discord or ntfy.sh URL as that service, any other as a
  generic JSON webhook (title, message, text).

Anything else (mailto://, a Slack bot token, apprise options after `?`) gives no POST:
the clients send it through apprise. Stdlib only, and it imports nothing of ours but
the standard library: it is shipped to the host inside notify.pyz (core/host.bundle).
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from dataclasses import asdict, dataclass

__all__ = ["Post", "posts_of", "body_of", "send", "to_json", "from_json"]

TIMEOUT_S = 10.0  # one POST, connection included: a host's message is bounded in time
_WORD = r"[A-Za-z0-9_-]+"
_USERINFO = r"(?:(?P<user>[^:@/?#\s]+)(?::(?P<password>[^@/?#\s]*))?@)?"
_HOSTPORT = r"(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{1,5}))?"
_NTFY = re.compile(rf"(?P<scheme>ntfys?)://{_USERINFO}{_HOSTPORT}(?P<path>(?:/{_WORD})*)/?")
_SLACK = re.compile(r"slack://(?P<a>[A-Za-z0-9]+)/(?P<b>[A-Za-z0-9]+)/(?P<c>[A-Za-z0-9]+)"
                    r"(?P<channels>(?:/[#@]?[A-Za-z0-9_.-]+)*)/?")
_DISCORD = re.compile(rf"discord://(?P<id>[0-9]+)/(?P<token>{_WORD})/?")
_JSON = re.compile(rf"(?P<scheme>jsons?)://{_USERINFO}{_HOSTPORT}(?P<path>/[!-~]*)?")
_HTTP = re.compile(rf"(?P<scheme>https?)://{_USERINFO}{_HOSTPORT}(?P<path>/[!-~]*)?")
_NATIVE_SLACK = re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9]+/[A-Za-z0-9]+/[A-Za-z0-9]+/?")
_NATIVE_DISCORD = re.compile(rf"https://discord(?:app)?\.com/api/webhooks/[0-9]+/{_WORD}/?")
_NATIVE_NTFY = re.compile(rf"https?://ntfy\.sh/(?P<topic>{_WORD})/?")
_DISCORD_MAX = 2000  # Discord refuses longer content


@dataclass(frozen=True)
class Post:
    """One POST: where (`url`, carries tokens: never shown whole), the body's `kind`
    (ntfy, slack, discord, json, webhook), basic auth `user` ("name:password" or ''), and
    the ntfy topic or Slack channel it is for."""

    url: str
    kind: str
    user: str = ""
    target: str = ""


def posts_of(url: str) -> tuple[Post, ...]:
    """The POSTs that deliver a message to apprise URL `url`; () when a host cannot make
    them (only apprise, on a client, can)."""
    if "?" in url and not url.startswith(("http://", "https://")):
        return ()  # apprise options (?priority=, ?token=…): its own business
    if found := _NTFY.fullmatch(url):
        topics = [t for t in found["path"].split("/") if t]
        user = _user(found)
        if not topics:  # ntfy://TOPIC: the topic on ntfy.sh
            if found["port"] or user or not re.fullmatch(_WORD, found["host"]):
                return ()
            return (Post("https://ntfy.sh", "ntfy", target=found["host"]),)
        scheme = "https" if found["scheme"] == "ntfys" else "http"
        base = f"{scheme}://{found['host']}" + (f":{found['port']}" if found["port"] else "")
        return tuple(Post(base, "ntfy", user, topic) for topic in topics)
    if found := _SLACK.fullmatch(url):
        hook = f"https://hooks.slack.com/services/{found['a']}/{found['b']}/{found['c']}"
        channels = [c for c in found["channels"].split("/") if c]
        return tuple(Post(hook, "slack", target=c) for c in channels) or (Post(hook, "slack"),)
    if found := _DISCORD.fullmatch(url):
        return (Post(f"https://discord.com/api/webhooks/{found['id']}/{found['token']}", "discord"),)
    if found := _JSON.fullmatch(url):
        scheme = "https" if found["scheme"] == "jsons" else "http"
        return (Post(_rebuilt(scheme, found), "json", _user(found)),)
    if found := _HTTP.fullmatch(url):
        plain = _rebuilt(found["scheme"], found)
        if _NATIVE_SLACK.fullmatch(plain):
            return (Post(plain.rstrip("/"), "slack"),)
        if _NATIVE_DISCORD.fullmatch(plain):
            return (Post(plain.rstrip("/"), "discord"),)
        if ntfy := _NATIVE_NTFY.fullmatch(plain):
            return (Post("https://ntfy.sh", "ntfy", target=ntfy["topic"]),)
        return (Post(plain, "webhook", _user(found)),)
    return ()


def _user(found: re.Match[str]) -> str:
    if not found["user"]:
        return ""
    return f"{found['user']}:{found['password'] or ''}"


def _rebuilt(scheme: str, found: re.Match[str]) -> str:
    """The URL without its user:password (sent as basic auth, never in the URL)."""
    port = f":{found['port']}" if found["port"] else ""
    return f"{scheme}://{found['host']}{port}{found['path'] or '/'}"


def _slack_text(text: str) -> str:
    # Slack's mrkdwn reads `<…>` as links and `&` as the start of an entity.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def body_of(post: Post, title: str, message: str) -> bytes:
    """The JSON body of `post` carrying `title` and `message`."""
    payload: dict[str, object]
    if post.kind == "ntfy":
        payload = {"topic": post.target, "title": title, "message": message}
    elif post.kind == "slack":
        payload = {"text": f"*{_slack_text(title)}*\n{_slack_text(message)}"}
        if post.target:
            payload["channel"] = post.target
    elif post.kind == "discord":
        payload = {"content": f"**{title}**\n{message}"[:_DISCORD_MAX]}
    elif post.kind == "json":  # as apprise's json:// posts it
        payload = {"version": "1.0", "title": title, "message": message, "attachments": [],
                   "type": "info"}
    else:
        payload = {"title": title, "message": message, "text": f"{title}\n{message}"}
    return json.dumps(payload, ensure_ascii=True).encode()


def to_json(posts: tuple[Post, ...]) -> list[dict[str, str]]:
    return [asdict(p) for p in posts]


def from_json(items: object) -> tuple[Post, ...]:
    """Posts as `to_json` wrote them; what is not one is skipped."""
    if not isinstance(items, list):
        return ()
    found = []
    for item in items:
        if isinstance(item, dict) and all(isinstance(item.get(k, ""), str) for k in ("url", "kind", "user", "target")):
            found.append(Post(item.get("url", ""), item.get("kind", ""), item.get("user", ""), item.get("target", "")))
    return tuple(p for p in found if p.url.startswith(("http://", "https://")))


def _curl_quoted(text: str) -> str:
    """`text` as one quoted value of a curl config file (its own escapes)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


def curl_config(post: Post, body: bytes, timeout_s: float = TIMEOUT_S) -> str:
    """What `curl --config -` reads on its stdin for `post`: the URL and any password
    never reach a command line (`ps` shows those to every user of the host)."""
    lines = [f"url = {_curl_quoted(post.url)}", 'proto = "=http,https"',
             'header = "Content-Type: application/json"',
             f"data-binary = {_curl_quoted(body.decode())}",
             f'max-time = "{timeout_s:g}"', f'connect-timeout = "{min(timeout_s, 5.0):g}"',
             'output = "/dev/null"', 'write-out = "%{http_code}"', "silent", "show-error",
             # `{a,b}` and `[1-9]` in a URL are curl's globs (several POSTs, to other paths)
             "globoff"]
    if post.user:
        lines.append(f"user = {_curl_quoted(post.user)}")
    return "\n".join(lines) + "\n"


def send(post: Post, body: bytes, curl: str | None, timeout_s: float = TIMEOUT_S) -> str:
    """POST `body`; '' when the service took it (2xx), else why not, in one line (it may
    name the URL: the caller masks it). With `curl` (its path) curl makes the POST, else
    urllib."""
    if curl:
        try:
            done = subprocess.run([curl, "--config", "-"], input=curl_config(post, body, timeout_s),
                                  capture_output=True, text=True, timeout=timeout_s + 5)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"curl: {' '.join(str(exc).split())}"
        code = done.stdout.strip()[-3:]
        if done.returncode == 0 and code.startswith("2"):
            return ""
        if done.returncode == 0:
            return f"HTTP {code or '?'}"
        return " ".join(done.stderr.split())[:300] or f"curl exited {done.returncode}"
    # Imported here, not at the top: urllib.request (http.client, email, ssl) was a third
    # of the engine's import time, paid by every command that reaches a host (issue 20).
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", "User-Agent": "rtrain-tui"}
    if post.user:
        headers["Authorization"] = "Basic " + base64.b64encode(post.user.encode()).decode()
    request = urllib.request.Request(post.url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - http(s) only
            status = answer.status
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return " ".join(str(reason).split())[:300] or type(exc).__name__
    return "" if 200 <= status < 300 else f"HTTP {status}"
