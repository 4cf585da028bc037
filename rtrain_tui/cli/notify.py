"""`rtrain-tui notify test [HOST]`: a test message to every URL, from here and from HOST."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rtrain_tui.cli.base import err
from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.runs import hostconfig

if TYPE_CHECKING:
    from rtrain_tui.core.engine import Engine


def notify_test(hosts: hostconfig.HostConfig, args: argparse.Namespace) -> int:
    """`notify test [HOST]`: a test message to each URL, from this machine; 0 if all arrived."""
    from rtrain_tui.core.notify import send
    from rtrain_tui.core.safety.mask import mask_url

    if args.host is not None:
        urls = hosts.notify_urls(args.host)
    else:
        urls = tuple(dict.fromkeys((*hosts.notify.urls, *(u for h in hosts.hosts.values() for u in h.notify))))
    if not urls:
        err(f"no notification URLs{f' for {args.host}' if args.host else ''}: add [notify] urls = "
             f'["ntfy://my-topic"] to {hosts.path or hostconfig.default_config_path()}.')
        return 1
    results = send.send_all(urls, "rtrain-tui: test", "A test message from rtrain-tui notify test.")
    for url, why in results.items():
        print(f"{mask_url(url)}: {'arrived' if not why else f'not sent: {why}'}")
    return 0 if not any(results.values()) else 1


def sends_from_host(hosts: hostconfig.HostConfig, args: argparse.Namespace) -> bool:
    """`notify test HOST` with URLs HOST can send itself ([notify] on_host): it is asked too."""
    from rtrain_tui.core.notify import host_send

    return (args.host is not None and hosts.notify.on_host
            and bool(host_send.host_urls(hosts.notify_urls(args.host))))


def say_left_to_clients(urls: Sequence[str], host: str) -> None:
    """`notify test HOST`: a line for each URL HOST cannot send itself (only apprise, on a
    client, can), also when that is every URL and HOST is not asked at all."""
    from rtrain_tui.core.notify import host_send
    from rtrain_tui.core.safety.mask import mask_url

    for url in urls:
        if not host_send.host_urls([url]):
            print(f"{mask_url(url)}: not sent from {host}: only apprise can send it, from a client")


async def cmd_notify(engine: Engine, args: argparse.Namespace) -> int:
    """`notify test HOST`: from this machine (notify_test), then from HOST itself, by the
    path a run's end takes there (the webhook URLs only: the rest are said as such)."""
    import asyncio

    from rtrain_tui.core.errors import UnknownHostError
    from rtrain_tui.core.safety.mask import mask_text

    urls = engine.hosts.notify_urls(args.host)
    try:
        # HOST first: a name that is no host (a typo) is said before anything is sent.
        await engine.host(args.host).connect()
    except UnknownHostError as exc:
        err(str(exc))
        return 1
    except RemoteError:
        pass  # unreachable: this machine still sends; the host's half below says why not
    here = await asyncio.to_thread(notify_test, engine.hosts, args)
    try:
        results = await engine.notify_test_from_host(args.host, urls)
    except RemoteError as exc:
        err(f"notify test from {args.host}: {mask_text(str(exc), urls)}")
        return 1
    for url, why in results:
        print(f"{url}: arrived from {args.host}" if not why else f"{url}: not sent from {args.host}: {why}")
    say_left_to_clients(urls, args.host)
    return here or (1 if any(why for _, why in results) else 0)
