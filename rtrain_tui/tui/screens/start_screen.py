"""The start form: every field validated as you type, then preflight, upload, launch.

`enter` moves to the next field (a form is filled in field by field; launching a run
is `ctrl+s` or the Start button, both shown in the footer). One start at a time: while
one is under way, Start is off and `ctrl+s` says so (never a cancel-and-restart). Each
complaint names the field it is about, and that field is marked. `ctrl+o` opens a file picker
(textual-fspicker) on this machine's files for the config, or for the dataset when that
field has the focus. (The key is always live, so the footer never changes under you.)
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Footer, Input, Label, ProgressBar, Select, Static
from textual.worker import Worker
from textual_fspicker import FileOpen, Filters

from rtrain_tui.core.backends.slurm import SlurmOptions
from rtrain_tui.core.engine import Engine, StartedRun, StartRequest, StartTrace
from rtrain_tui.core.errors import GpusBusyError, RemoteError, ValidationError
from rtrain_tui.core.safety import validate
from rtrain_tui.core.safety.sanitize import safe_line, safe_text
from rtrain_tui.core.transfers.meter import Meter


@dataclass(frozen=True)
class StartDefaults:
    host: str
    config: str = ""
    dataset: str = ""
    gpus: int = 1


FIELDS = ("config", "dataset", "gpus", "gpu_ids", "run_id", "python", "workdir", "trainer", "env",
          "retries", "stall_after")
# What the host does with a stalled run: a choice (a Select), checked with the retries.
ON_STALL = "on_stall"
# Shown only for a Slurm login node (backend = "slurm" in config.toml), prefilled with the
# host's defaults from there; GPU ids are the scheduler's business there, so they hide.
SLURM_FIELDS = ("partition", "nodes", "time")
BOX_ONLY = ("gpu_ids",)
LABELS = {"config": "Config", "dataset": "Dataset", "gpus": "GPUs", "gpu_ids": "GPU ids",
          "run_id": "Run id",
          "python": "Python", "workdir": "Workdir", "trainer": "Trainer", "env": "Env",
          "retries": "Retries", "stall_after": "Stall after", ON_STALL: "On stall",
          "partition": "Partition", "nodes": "Nodes", "time": "Time limit"}


def slurm_options(base: SlurmOptions, values: dict[str, str]) -> SlurmOptions:
    """The host's Slurm defaults with the form's partition, nodes and time on top."""
    try:
        nodes = int(values.get("nodes", "").strip() or "1")
    except ValueError:
        raise ValidationError(f"Nodes must be a whole number, not {values['nodes']!r}.") from None
    return replace(base, partition=values.get("partition", "").strip(), nodes=nodes,
                   time=values.get("time", "").strip()).validated()


def build_request(host: str, values: dict[str, str], allow_busy: bool = False,
                  slurm: SlurmOptions | None = None, queue: bool = False) -> StartRequest:
    """The form's text as a validated StartRequest; raises ValidationError naming the field."""
    try:
        gpus = int(values["gpus"] or "0")
    except ValueError:
        raise ValidationError(f"GPUs must be a whole number, not {values['gpus']!r}.") from None
    try:
        env_pairs = shlex.split(values["env"])
    except ValueError as exc:
        raise ValidationError(f"env: {exc}; write KEY=VALUE pairs separated by spaces.") from None
    retries = _retries(values["retries"]) if "retries" in values else None
    stall_after = values.get("stall_after", "").strip()
    return StartRequest(
        host=host, config=Path(values["config"]).expanduser(),
        dataset=Path(values["dataset"]).expanduser() if values["dataset"].strip() else None,
        gpus=gpus, run_id=values["run_id"].strip() or None,
        python=values["python"].strip(), workdir=values["workdir"].strip(),
        env=validate.parse_env(env_pairs), trainer=values["trainer"].strip(),
        gpu_ids=validate.parse_gpu_ids(ids) if (ids := values.get("gpu_ids", "").strip()) else (),
        allow_busy=allow_busy, queue=queue, retries=retries,
        stall_after_s=validate.parse_duration(stall_after, "Stall after") if stall_after else None,
        on_stall=values.get(ON_STALL, "warn"),
        backend="slurm" if slurm is not None else None,
        options=slurm_options(slurm, values) if slurm is not None else None,
    ).validated()


def _retries(value: str) -> int:
    try:
        return validate.check_retries(int(value.strip() or "0"))
    except ValueError:
        raise ValidationError(f"Retries must be a whole number, not {value!r}.") from None


def duration_text(seconds: int) -> str:
    """Seconds as the form shows a duration: `15m`, `2h`, `90s`, `0` (never)."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s" if seconds else "0"


def field_error(host: str, name: str, values: dict[str, str]) -> str:
    """The engine's complaint about one field, prefixed with its label; '' when it is fine."""
    error = _field_error(host, name, values[name].strip(), values)
    return f"{LABELS[name]}: {error}" if error else ""


def _field_error(host: str, name: str, value: str, values: dict[str, str]) -> str:
    try:
        if name == "config":
            if not value:
                return "choose a config file (the training YAML on this machine)."
            validate.check_local_file("config", value)
        elif name == "dataset" and value:
            validate.check_local_file("dataset", value)
        elif name == "gpus":
            try:
                gpus = int(value or "0")
            except ValueError:
                return f"must be a whole number, not {value!r}."
            validate.check_gpus(gpus)
        elif name == "gpu_ids" and value:
            ids = validate.parse_gpu_ids(value)
            if values["gpus"].strip() != str(len(ids)):
                return f"GPU ids names {len(ids)} GPU(s), GPUs says {values['gpus'].strip() or 0}."
        elif name == "run_id" and value:
            validate.check_run_id(value)
        elif name == "python":
            validate.check_python(value)
        elif name == "workdir":
            validate.check_workdir(host, value)
        elif name == "trainer":
            validate.check_trainer_template(value)
        elif name in SLURM_FIELDS:
            slurm_options(SlurmOptions(), {name: value})
        elif name == "retries":
            try:
                validate.check_retries(int(value or "0"))
            except ValueError:
                return f"must be a whole number, not {value!r}."
        elif name == "stall_after" and value:
            validate.parse_duration(value, "")
        elif name == ON_STALL:
            try:
                retries = int(values.get("retries", "").strip() or "0")
            except ValueError:
                retries = None  # Retries says what is wrong with it
            try:
                stall = values.get("stall_after", "").strip()
                stall_after_s = validate.parse_duration(stall, "") if stall else None
            except ValidationError:
                stall_after_s = None  # Stall after says what is wrong with it
            validate.check_on_stall(value, retries, stall_after_s)
        elif name == "env":
            try:
                pairs = shlex.split(value)
            except ValueError as exc:  # an unclosed quote
                return f"{str(exc).lower()}; write KEY=VALUE pairs separated by spaces."
            validate.parse_env(pairs)
    except ValidationError as exc:
        # the engine words it for the CLI: `--env 'X' is not usable…` reads as the field's
        text = str(exc).removeprefix(f"--{name.replace('_', '-')} ").strip()
        return (text.replace("--retries N", "Retries of 1 or more").replace(", e.g. --retries 2", "")
                .replace("--stall-after", "Stall after"))
    return ""


class StartScreen(ModalScreen[StartedRun | None]):
    # Below this many rows the form does not fit: its fields scroll (app.tcss), so the
    # errors and the buttons stay on screen.
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]
    BINDINGS = [
        Binding("ctrl+s", "submit", "Start", tooltip="Preflight, upload and launch the run"),
        Binding("escape", "cancel", "Cancel", tooltip="Close the form; nothing is started"),
        Binding("ctrl+o", "browse", "Browse", tooltip="Pick the config or dataset file"),
        # `app.`: a screen has no focus_next action, and a binding whose action is not
        # found does nothing, so "focus_next" here made tab dead in the form.
        Binding("tab", "app.focus_next", "Next field", show=False),
    ]

    def __init__(self, engine: Engine | None, hosts: list[str], defaults: StartDefaults,
                 gpus_for: Callable[[str], int] | None = None) -> None:
        """`gpus_for`: each host's default GPUs (0 for the demo host), which GPUs follows
        when another host is chosen, unless it was changed by hand."""
        super().__init__()
        self.engine = engine
        self.hosts = hosts
        self.defaults = defaults
        self.gpus_for = gpus_for or (lambda _host: defaults.gpus)
        self._gpus_default = defaults.gpus

    def compose(self) -> ComposeResult:
        d = self.defaults
        initial = {"config": d.config, "dataset": d.dataset, "gpus": str(d.gpus), "gpu_ids": "",
                   "run_id": "",
                   "python": validate.DEFAULT_PYTHON, "workdir": validate.DEFAULT_WORKDIR,
                   "trainer": validate.DEFAULT_TRAINER, "env": "",
                   "retries": "0", "stall_after": duration_text(validate.DEFAULT_STALL_AFTER),
                   "partition": "", "nodes": "1", "time": ""}
        with Vertical(id="dialog"):
            yield Static("[b]New run[/b]  preflight runs before anything is uploaded", id="title")
            # Only the fields scroll: on a short terminal the errors and the buttons
            # stay on screen under them.
            with VerticalScroll(id="form-body"):
                with Grid(id="form"):
                    yield Label("Host")
                    yield Select([(h, h) for h in self.hosts], value=d.host, allow_blank=False, id="host",
                                 compact=True)
                    for name in FIELDS:
                        extra = "box-only" if name in BOX_ONLY else ""
                        yield Label(LABELS[name], classes=extra)
                        yield Input(initial[name], id=name, placeholder=_placeholder(name),
                                    compact=True, classes=extra)
                    yield Label(LABELS[ON_STALL])
                    yield Select([("warn: say so, keep it running", "warn"),
                                  ("stop it", "stop"),
                                  ("restart it (counts as a retry)", "restart")],
                                 value="warn", allow_blank=False, id=ON_STALL, compact=True)
                    for name in SLURM_FIELDS:
                        yield Label(LABELS[name], classes="slurm")
                        yield Input(initial[name], id=name, placeholder=_placeholder(name),
                                    compact=True, classes="slurm")
                    yield Label("", classes="box-only")
                    yield Checkbox("take busy GPUs too (someone else's process on them)",
                                   id="allow_busy", compact=True, classes="box-only")
                    yield Label("", classes="box-only")
                    yield Checkbox("wait for free GPUs on the host (queued) rather than refuse",
                                   id="queue", compact=True, classes="box-only")
            yield Static("", id="errors")
            yield Static("", id="step")
            yield ProgressBar(id="upload", show_eta=False)
            with Horizontal(id="buttons"):
                yield Button("Start (ctrl+s)", variant="primary", id="start")
                yield Button("Cancel (esc)", id="cancel")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#upload", ProgressBar).display = False
        self._show_backend()
        self.revalidate()
        self.query_one("#config", Input).focus()

    def slurm_defaults(self) -> SlurmOptions | None:
        """The selected host's Slurm defaults when it is a Slurm login node, else None."""
        if self.engine is None:
            return None
        try:
            settings = self.engine.hosts.for_host(self.host)
        except ValidationError:
            return None  # a broken config.toml: the start itself will say so
        return settings.slurm if settings.backend == "slurm" else None

    def _show_backend(self) -> None:
        """Slurm fields for a login node (prefilled from config.toml), GPU ids for a box;
        retries and the stall timeout from the host's config.toml."""
        if self.engine is not None:
            try:
                settings = self.engine.hosts.for_host(self.host)
            except ValidationError:
                pass  # a broken config.toml: the start itself will say so
            else:
                self.query_one("#retries", Input).value = str(settings.retries)
                self.query_one("#stall_after", Input).value = duration_text(settings.stall_after_s)
        defaults = self.slurm_defaults()
        for widget in self.query(".slurm"):
            widget.display = defaults is not None
        for widget in self.query(".box-only"):
            widget.display = defaults is None
        if defaults is not None:
            self.query_one("#partition", Input).value = defaults.partition
            self.query_one("#nodes", Input).value = str(defaults.nodes)
            self.query_one("#time", Input).value = defaults.time
            self.query_one("#gpu_ids", Input).value = ""
            self.query_one("#allow_busy", Checkbox).value = False
            self.query_one("#queue", Checkbox).value = False

    @on(Checkbox.Changed)
    def _one_gpu_policy(self, event: Checkbox.Changed) -> None:
        """Sharing busy GPUs and waiting for free ones exclude each other: ticking one
        unticks the other."""
        other = {"allow_busy": "#queue", "queue": "#allow_busy"}.get(event.checkbox.id or "")
        if event.value and other is not None:
            self.query_one(other, Checkbox).value = False

    @property
    def fields(self) -> tuple[str, ...]:
        if self.slurm_defaults() is None:
            return FIELDS
        return tuple(f for f in FIELDS if f not in BOX_ONLY) + SLURM_FIELDS

    @property
    def values(self) -> dict[str, str]:
        values = {name: self.query_one(f"#{name}", Input).value for name in self.fields}
        values[ON_STALL] = str(self.query_one(f"#{ON_STALL}", Select).value)
        return values

    @property
    def host(self) -> str:
        return str(self.query_one("#host", Select).value)

    def revalidate(self) -> list[str]:
        errors = []
        values = self.values
        for name in (*self.fields, ON_STALL):
            err = field_error(self.host, name, values)
            self.query_one(f"#{name}").set_class(bool(err), "invalid")
            if err:
                errors.append(err)
        self.query_one("#errors", Static).update(Text("\n".join(f"✗ {safe_line(str(e))}" for e in errors)))
        # Typing during a start re-validates: Start stays off until that start is over.
        self.query_one("#start", Button).disabled = bool(errors) or self.starting
        return errors

    @property
    def starting(self) -> bool:
        """A start of this form is under way (uploading, launching, or being undone)."""
        return any(w.group == "start" and not w.is_finished for w in self.workers)

    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self, event: Input.Changed | Select.Changed) -> None:
        if isinstance(event, Select.Changed) and event.select.id == "host":
            self._show_backend()
            # The demo host's 0 kept for a GPU box would start a CPU-only run there.
            gpus, default = self.query_one("#gpus", Input), self.gpus_for(self.host)
            if gpus.value.strip() == str(self._gpus_default):
                gpus.value = str(default)
            self._gpus_default = default
        if isinstance(event, Input.Changed) and event.input.id == "gpu_ids":
            try:  # naming the GPUs says how many: GPUs follows
                ids = validate.parse_gpu_ids(event.value.strip())
            except ValidationError:
                pass
            else:
                self.query_one("#gpus", Input).value = str(len(ids))
        self.revalidate()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        # The engine cleans up after a cancelled start itself (removes what it made, or
        # keeps a run that did launch in the index); the app reloads the runs after this.
        running = [w for w in self.workers if w.node is self and w.group == "start" and w.is_running]
        if not running:
            self._close(None)
            return
        # The form stays until the engine has cleaned up (it removes the run dir and the
        # index entry of a start that never launched), so the table it returns to is true.
        self._cancelling = True
        self.query_one("#step", Static).update("cancelling: undoing what this start made…")
        for worker in running:
            worker.cancel()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if getattr(self, "_cancelling", False) and event.worker.group == "start" \
                and event.worker.is_finished:
            self._cancelling = False
            trace = getattr(self, "_trace", None)
            left = trace.left(self.host) if trace is not None else "the runs table shows what it left"
            self.app.notify(f"The start was cancelled; {safe_line(left)}.",
                            title="New run", severity="warning")
            self._close(None)

    def _close(self, result: StartedRun | None) -> None:
        """Leave the form once: a cancel that lands as the start finishes must not pop twice."""
        if getattr(self, "_form_closed", False) or not self.is_attached:
            return
        self._form_closed = True
        self.dismiss(result)

    def _file_field(self) -> str:
        """The file field the picker fills: the focused one, else the config."""
        focused = self.focused
        return focused.id if isinstance(focused, Input) and focused.id in PICKED else "config"

    def action_browse(self) -> None:
        name = self._file_field()
        field = self.query_one(f"#{name}", Input)
        current = Path(field.value.strip()).expanduser() if field.value.strip() else None
        start = current.parent if current is not None and current.parent.is_dir() else Path.cwd()

        def picked(path: Path | None) -> None:
            if path is not None:
                field.value = str(path)
            field.focus()

        title, filters = PICKED[name]
        self.app.push_screen(FileOpen(start, title, filters=filters), picked)

    @on(Input.Submitted)
    def _next_field(self, event: Input.Submitted) -> None:
        event.stop()
        self.focus_next()

    @on(Button.Pressed, "#start")
    def action_submit(self) -> None:
        if self.starting:
            # Never a second launch: restarting would cancel this one, and a start
            # cancelled after its trainer launched plus a new one are two trainers.
            self.query_one("#errors", Static).update(
                Text("✗ a start is already under way: wait for it, or esc to cancel it."))
            return
        if self.revalidate() or self.engine is None:
            return
        try:
            request = build_request(self.host, self.values,
                                    allow_busy=self.query_one("#allow_busy", Checkbox).value,
                                    slurm=self.slurm_defaults(),
                                    queue=self.query_one("#queue", Checkbox).value)
        except ValidationError as exc:
            self.query_one("#errors", Static).update(Text(f"✗ {safe_text(str(exc))}"))
            return
        self.query_one("#start", Button).disabled = True
        self.launch(request)

    @work(group="start", exit_on_error=False)  # one at a time: action_submit refuses a second
    async def launch(self, request: StartRequest) -> None:
        bar = self.query_one("#upload", ProgressBar)
        step = self.query_one("#step", Static)

        meter = Meter()

        def progress(label: str, done: int, total: int) -> None:
            bar.display = True
            bar.update(total=max(total, 1), progress=done)
            # `uploading train.jsonl: 412 MB of 1.0 GB · 3.8× compressed · 31 MB/s · 19 s left`
            step.update(Text(f"uploading {label}: {meter.line(label, done, total)}"))

        try:
            assert self.engine is not None
            self._trace = StartTrace()  # what the start did on the host, for a cancel's toast
            started = await self.engine.start(request, progress=progress,
                                              on_step=lambda text: step.update(Text(text)),
                                              trace=self._trace)
        except RemoteError as exc:
            if not self.is_attached:  # the form was closed meanwhile: say it in a toast
                self.app.notify(str(exc), title="New run", severity="error", timeout=30)
                return
            text = f"✗ {safe_text(str(exc))}"
            if isinstance(exc, GpusBusyError):
                # Offered instead of the refusal: the host can wait for the GPUs.
                text += ("\n→ tick “wait for free GPUs” and Start again: the run is shipped now "
                         "and waits on the host, queued.")
                self.query_one("#queue", Checkbox).focus()
            self.query_one("#errors", Static).update(Text(text))
            step.update("")
            self.query_one("#start", Button).disabled = False
            return
        if getattr(self, "_cancelling", False):
            # The cancel came too late: the run had launched and is in the index. Say so,
            # rather than "cancelled", and let the table show it (x stops it).
            self._cancelling = False
            self.app.notify(f"The start was cancelled too late: {started.run_id} had already "
                            "launched and is in the runs table (x stops it).",
                            title="New run", severity="warning", timeout=30)
        if started.unrecorded:
            # The trainer runs: never let a busy index read as "nothing happened".
            self.app.notify(f"{started.run_id} is running on {started.host}, but the run index "
                            f"could not record it ({started.unrecorded}); the next refresh does.",
                            title="New run", severity="warning", timeout=30)
        self._close(started)


PICKED = {
    "config": ("Choose the training config", Filters(
        ("YAML", lambda p: p.suffix.lower() in (".yaml", ".yml")), ("Any file", lambda _p: True))),
    "dataset": ("Choose the dataset", Filters(
        ("Any file", lambda _p: True),
        ("JSON / JSONL / CSV / Parquet",
         lambda p: p.suffix.lower() in (".json", ".jsonl", ".csv", ".parquet")))),
}


def _placeholder(name: str) -> str:
    return {"config": "path to config.yaml (ctrl+o: browse)",
            "dataset": "optional: path to the dataset file (ctrl+o: browse)",
            "gpu_ids": "optional: 0,3 (default: the least busy)",
            "run_id": "optional: run-<epoch>", "env": "optional: KEY=VALUE KEY2=VALUE2",
            "partition": "optional: the cluster's default partition",
            "time": "optional: 30, 4:00:00 or 1-12:00:00 (default: the partition's)",
            "retries": "0 to 20: a failed run is resumed this often",
            "stall_after": "no log output this long is a stall: 20m, 90s, 2h (0: never)"}.get(name, "")
