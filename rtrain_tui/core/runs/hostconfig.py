"""Per-host settings: `$XDG_CONFIG_HOME/rtrain-tui/config.toml`, the one place that reads it.

    [hosts.uni-cluster]
    backend = "slurm"          # "direct" (default) or "slurm": how runs are launched
    partition = "gpu"          # Slurm defaults for starts on this host; flags override
    account = "my-lab"
    qos = "normal"
    time = "4:00:00"
    gpus_per_node = 4
    retries = 2                # a failed run is tried again by the host (start --retries)
    stall_after = "20m"        # no log output this long: stalled (start --stall-after)
    price_per_hour = 2.49      # what the box costs an hour (or price_per_gpu_hour: per
                               # GPU a run holds, for a shared box or a cluster)
    currency = "€"             # default "$"; a top-level `currency` sets every host's
    notify = ["ntfy://lab-runs"]   # apprise URLs for this host's runs, besides [notify]'s

    [notify]
    urls = ["slack://TokenA/TokenB/TokenC/#training"]   # apprise URLs, every host's runs
    on = ["failed", "lost", "stalled", "completed"]     # the default: every end, and stalls
    on_host = true             # the default: the run's host sends what it can (webhooks)

A missing file means every host is `direct`. A file that cannot be used is one clear
error naming the file and the key, raised before anything touches a host.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.runs.backend_names import DEFAULT, check_backend
from rtrain_tui.core.safety.mask import mask_url
from rtrain_tui.core.safety.slurm_options import SlurmOptions
from rtrain_tui.core.safety.validate import DEFAULT_STALL_AFTER, check_retries, parse_duration

if TYPE_CHECKING:
    from rtrain_tui.core.runs.index import RunRecord

_SLURM_KEYS = {"partition": str, "account": str, "qos": str, "time": str,
               "gpus_per_node": int, "nodes": int}
_PRICE_KEYS = ("price_per_hour", "price_per_gpu_hour")
DEFAULT_CURRENCY = "$"
# What a notification can be sent for: a run's end (its state word's first word) or a stall.
NOTIFY_EVENTS = ("failed", "lost", "stalled", "completed", "stopped")
DEFAULT_NOTIFY_ON = ("failed", "lost", "stalled", "completed")
_MAX_URLS = 32
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[!-~]{1,2000}")  # printable ASCII, no space


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "rtrain-tui" / "config.toml"


@dataclass(frozen=True)
class HostSettings:
    backend: str = "direct"
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    retries: int = 0  # `start --retries N`'s default on this host
    stall_after_s: int = DEFAULT_STALL_AFTER  # `start --stall-after`'s default on this host
    price: Price | None = None  # what the host costs (runs/cost.py); None: not priced
    notify: tuple[str, ...] = ()  # apprise URLs for this host's runs, besides [notify]'s


@dataclass(frozen=True)
class NotifySettings:
    """`[notify]`: where messages go (apprise URLs: secrets, never shown whole) and for what."""

    urls: tuple[str, ...] = ()
    on: tuple[str, ...] = DEFAULT_NOTIFY_ON
    # The run's own host sends its end and stalls to the URLs it can (webhooks, see
    # core/notify/webhooks.py), so they arrive with every laptop closed.
    on_host: bool = True


@dataclass(frozen=True)
class Price:
    """A host's price: per hour for the whole box, or per GPU-hour a run holds (one of
    the two); Decimal, so money adds up to the cent with no float drift."""

    amount: Decimal
    per_gpu: bool = False
    currency: str = DEFAULT_CURRENCY

    def label(self) -> str:
        """`$2.49/h` or `$0.80/GPU·h`, as the host panel shows it."""
        return f"{self.currency}{self.amount:f}/{'GPU·h' if self.per_gpu else 'h'}"


@dataclass(frozen=True)
class HostConfig:
    hosts: dict[str, HostSettings] = field(default_factory=dict)
    path: Path | None = None
    currency: str = DEFAULT_CURRENCY  # the top-level default
    notify: NotifySettings = field(default_factory=NotifySettings)

    def notify_urls(self, alias: str) -> tuple[str, ...]:
        """Where a message about a run on `alias` goes: [notify]'s URLs, then the host's own
        (each once, in that order)."""
        return tuple(dict.fromkeys((*self.notify.urls, *self.for_host(alias).notify)))

    def for_host(self, alias: str) -> HostSettings:
        return self.hosts.get(alias, HostSettings())

    def price_of(self, alias: str) -> Price | None:
        return self.for_host(alias).price

    @property
    def priced(self) -> bool:
        """Some host has a price: the app then shows a cost column."""
        return any(h.price is not None for h in self.hosts.values())

    def backend_of(self, record: RunRecord) -> str:
        """The backend of `record`'s run: its own, fixed when it started. None recorded
        means what the older version that wrote it meant: a run it started was a box
        run (`direct`); a run it found on the host was what the host was configured as,
        which only the host's setting still tells (a refresh then records it).
        """
        if record.backend:
            return record.backend
        return self.for_host(record.host).backend if record.origin == "found" else DEFAULT


def load(path: Path | None = None) -> HostConfig:
    """Read and check the config; raises ValidationError with what to fix."""
    path = path or default_config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return HostConfig(path=path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"cannot read {path}: {' '.join(str(exc).split())}; fix or move it.") from None
    return _parse(path, text)


def _parse(path: Path, text: str) -> HostConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"cannot read {path}: {' '.join(str(exc).split())}; fix or move it.") from None
    hosts = data.get("hosts", {})
    if not isinstance(hosts, dict):
        raise ValidationError(f"{path}: `hosts` must be tables like [hosts.ALIAS].")
    currency = _currency(f"{path}:", data.get("currency", DEFAULT_CURRENCY))
    return HostConfig({alias: _settings(path, alias, table, currency)
                       for alias, table in hosts.items()}, path, currency,
                      _notify(path, data.get("notify", {})))


def _notify(path: Path, table: Any) -> NotifySettings:
    where = f"{path}: [notify]"
    if not isinstance(table, dict):
        raise ValidationError(f"{where} must be a table with urls = [...] and on = [...].")
    unknown = set(table) - {"urls", "on", "on_host"}
    if unknown:
        raise ValidationError(f"{where} has unknown key(s) {', '.join(sorted(unknown))}; "
                              "known: urls, on, on_host.")
    on_host = table.get("on_host", True)
    if not isinstance(on_host, bool):
        raise ValidationError(f"{where} on_host must be true or false, not {on_host!r}.")
    on = table.get("on", list(DEFAULT_NOTIFY_ON))
    if not isinstance(on, list) or not all(isinstance(v, str) and v in NOTIFY_EVENTS for v in on):
        raise ValidationError(f"{where} on must be a list of {', '.join(map(repr, NOTIFY_EVENTS))}, "
                              f"not {on!r}.")
    return NotifySettings(_urls(f"{where} urls", table.get("urls", [])), tuple(dict.fromkeys(on)),
                          on_host)


def _urls(where: str, value: Any) -> tuple[str, ...]:
    """apprise URLs as given; checked only for shape (apprise knows the services), and never
    echoed whole in an error: they carry tokens."""
    if not isinstance(value, list) or len(value) > _MAX_URLS:
        raise ValidationError(f"{where} must be a list of up to {_MAX_URLS} apprise URLs "
                              'such as ["ntfy://my-topic"].')
    for url in value:
        if not isinstance(url, str) or not _URL.fullmatch(url):
            shown = mask_url(url) if isinstance(url, str) else type(url).__name__
            raise ValidationError(f"{where}: {shown!r} is not an apprise URL (SERVICE://…, one "
                                  "line, no spaces).")
    return tuple(dict.fromkeys(value))


def _currency(where: str, value: Any) -> str:
    # Shown beside every figure: short, printable text only (it is the user's, but it
    # reaches the terminal).
    if not isinstance(value, str) or not 1 <= len(value) <= 5 or not value.isprintable():
        raise ValidationError(f"{where} currency must be text of 1 to 5 printable characters "
                              f'such as "$" or "EUR ", not {value!r}.')
    return value


def _price(where: str, table: dict[str, Any], currency: str) -> Price | None:
    given = [k for k in _PRICE_KEYS if k in table]
    if len(given) > 1:
        raise ValidationError(f"{where} has both price_per_hour and price_per_gpu_hour: give one "
                              "(per hour for the whole box, or per GPU-hour a run holds).")
    if not given:
        return None
    key, value = given[0], table[given[0]]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{where} {key} must be a number such as 2.49, not {value!r}.")
    amount = Decimal(str(value))  # 2.49 as written, not the float's 2.4900000000000002
    if not amount.is_finite() or amount < 0 or amount > 1_000_000:
        raise ValidationError(f"{where} {key} must be 0 or more (and under a million), not {value!r}.")
    return Price(amount, key == "price_per_gpu_hour", currency)


def _settings(path: Path, alias: str, table: Any, currency: str = DEFAULT_CURRENCY) -> HostSettings:
    where = f"{path}: [hosts.{alias}]"
    if not isinstance(table, dict):
        raise ValidationError(f"{where} must be a table.")
    unknown = set(table) - set(_SLURM_KEYS) - {"backend", "retries", "stall_after", "currency",
                                                 "notify", *_PRICE_KEYS}
    if unknown:
        raise ValidationError(f"{where} has unknown key(s) {', '.join(sorted(unknown))}; "
                              f"known: backend, retries, stall_after, {', '.join(_SLURM_KEYS)}, "
                              f"{', '.join(_PRICE_KEYS)}, currency, notify.")
    price = _price(where, table, _currency(where, table.get("currency", currency)))
    for key, kind in {**_SLURM_KEYS, "backend": str, "retries": int, "stall_after": str}.items():
        if key in table and (not isinstance(table[key], kind) or isinstance(table[key], bool)):
            raise ValidationError(f"{where} {key} must be {'text' if kind is str else 'a whole number'}.")
    try:
        backend = check_backend(table.get("backend", "direct"))
        options = SlurmOptions(**{k: v for k, v in table.items() if k in _SLURM_KEYS}).validated()
        retries = check_retries(table.get("retries", 0))
        stall = parse_duration(table.get("stall_after", "15m"), "stall_after")
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc}") from None
    urls = _urls(f"{where} notify", table.get("notify", []))
    return HostSettings(backend, options, retries, stall, price, urls)


def mark_slurm(alias: str, path: Path | None = None) -> Path:
    """Make `alias` a Slurm login node in config.toml; returns the file written.

    Edited with tomlkit, which keeps the user's comments and layout, and writes into
    whatever shape `hosts` has: `[hosts.ALIAS]` tables, or one inline table (where
    appending a `[hosts.ALIAS]` header, as this once did, made the file invalid). A
    table the host already has gets `backend = "slurm"`. A file that cannot be read is
    left untouched, and so is one the edit would not leave valid.
    """
    # tomlkit only here, where the file is edited: every command reads the config.
    import tomlkit
    from tomlkit.exceptions import TOMLKitError
    from tomlkit.items import InlineTable

    path = path or default_config_path()
    load(path)  # raises, naming the problem, for a file we must not touch
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    try:
        doc = tomlkit.parse(text)
        hosts = doc.get("hosts")
        if hosts is None:
            hosts = doc["hosts"] = tomlkit.table(is_super_table=True)
        entry = hosts.get(alias)
        if entry is None:
            entry = hosts[alias] = (tomlkit.inline_table() if isinstance(hosts, InlineTable)
                                    else tomlkit.table())
        entry["backend"] = "slurm"
        joined = doc.as_string()
    except (TOMLKitError, TypeError, ValueError) as exc:
        raise ValidationError(f"{path}: cannot add [hosts.{_toml_key(alias)}] ({exc}); set "
                              'backend = "slurm" there by hand.') from None
    if _parse(path, joined).for_host(alias).backend != "slurm":
        raise ValidationError(f'{path}: could not set backend = "slurm" for {alias!r}; set it by hand.')
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(joined, encoding="utf-8")
    os.replace(tmp, path)
    return path


def _toml_key(alias: str) -> str:
    """An alias as a TOML key: bare when it can be, else a basic string (escaped)."""
    if alias and all(c.isascii() and (c.isalnum() or c in "-_") for c in alias):
        return alias
    return '"' + alias.replace("\\", "\\\\").replace('"', '\\"') + '"'
