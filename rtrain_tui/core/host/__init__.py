"""The shell text sent to hosts, kept as real `.sh` files beside this module (those both
backends send) and beside each backend's scripts (`backends/direct/*.sh`, `backends/slurm/*.sh`).

Nothing here is installed on a host: each file is read once (importlib.resources) and
sent as text, exactly as an f-string was before, over the host's long-lived `sh` or as
a file the run directory gets (`run.sh`). Keeping it in files lets shellcheck and
`dash -n` see every line (tests/unit/test_host_scripts_lint.py) and a script change read as
a diff of shell, not of Python strings. Lines that start with `##` are notes for the
reader of the file and are not sent (a probe goes out every 2 s per host: its notes
would make it a third longer); `#` comments and `# shellcheck` directives are sent.

Python keeps what varies per call, in two forms only:
- lines put before a file's text: `assign(name=value)` writes `name='value'`, every
  value one quoted word (template.shell_word, the one quoting function), and the
  builders in remote_sh.py add the workdir/run-dir lines that must stay unquoted so
  that `~` expands (validated first, see validate.check_workdir);
- a slot: a line that is exactly `#@ NAME` in a file is replaced by text the builder
  supplies (the trainer's command line, `export` lines, another file), where order
  matters and a variable cannot carry it. Every slot must be filled, nothing else is
  substituted: a `$` or `{` in these files is always the shell's.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from rtrain_tui.core.safety.template import shell_word

_SLOT = re.compile(r"^#@ ([a-z_]+)\n", re.M)
# A module-level `from rtrain_tui.X import ...` line in a package's __init__.py.
_INIT_IMPORT = re.compile(r"^from (rtrain_tui(?:\.[a-z_]+)+) import", re.M)


@functools.cache
def text(name: str, package: str = __name__) -> str:
    """The file `name` of `package` (this one, or a backend's), as sent: without its `##` lines."""
    body = source(name, package)
    return "".join(line for line in body.splitlines(keepends=True)
                   if not line.lstrip().startswith("##"))


@functools.cache
def source(name: str, package: str = __name__) -> str:
    """The file `name` of `package` exactly as it is (a program sent as text)."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def render(name: str, package: str = __name__, **slots: str) -> str:
    """The file with each `#@ NAME` line replaced by `slots[NAME]` (whole lines or "")."""
    body = text(name, package)
    wanted = set(_SLOT.findall(body))
    if wanted != set(slots):
        raise ValueError(f"{name} has slots {sorted(wanted)}, given {sorted(slots)}")
    for key, value in slots.items():
        if value and not value.endswith("\n"):
            raise ValueError(f"slot {key} of {name} must be whole lines")
    return _SLOT.sub(lambda m: slots[m.group(1)], body)


def assign(**values: str | int) -> str:
    """`name=value` lines, each value one quoted shell word."""
    return "".join(f"{name}={shell_word(str(value))}\n" for name, value in values.items())


@functools.cache
def joined(main: str, package: str = __name__) -> str:
    """One program's text, made of the module file `main` of `package` and every module of
    `package` it imports (at its top level, `from PACKAGE.NAME import ...`), each after
    the ones it imports, those import lines dropped: in one text the parts share one
    namespace. For a program sent as text (`python -c`, remote_sh.transfer_command) yet
    kept here as several files, each a module the tests import. The parts must import
    nothing else of rtrain_tui, and must not give one name two meanings
    (tests/unit/test_transfer_program.py runs the joined text under `python -I -S`).
    """
    import ast

    prefix = package + "."
    order: list[str] = []
    dropped: dict[str, set[int]] = {}

    def visit(name: str) -> None:
        if name in dropped:
            return
        dropped[name] = set()
        for node in ast.parse(source(name, package)).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix):
                dropped[name].update(range(node.lineno - 1, node.end_lineno or node.lineno))
                visit(str(node.module).removeprefix(prefix) + ".py")
        order.append(name)

    visit(main)
    return "\n\n".join(
        "".join(line for no, line in enumerate(source(name, package).splitlines(keepends=True))
                if no not in dropped[name])
        for name in order)


@functools.cache
def bundle(main_module: str, modules: tuple[str, ...]) -> bytes:
    """A zip the host's Python runs as a program (`python prog.pyz ARGS`): the sources of
    `modules` (dotted names, `main_module` among them) with their packages'
    `__init__.py`, and a `__main__` that exits with `main_module.main(sys.argv[1:])`.

    For a decision the host makes alone that must follow the same rule as this client
    (retry: why a run ended, its newest complete checkpoint): the rule's own modules are
    sent, not a copy of them. They must import only each other and the standard library
    (tests/unit/test_retry_rule.py runs the zip under `python -I`). Stable bytes (fixed
    times), so the same rtrain-tui writes the same file.
    """
    import io
    import zipfile

    files: dict[str, str] = {}
    todo = list(modules)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts)):
            package = ".".join(parts[:i])
            init = "/".join(parts[:i]) + "/__init__.py"
            if init not in files:
                files[init] = source("__init__.py", package)
                # What a package's __init__ imports of its own goes too (rtrain_tui's
                # imports its version.py): else the zip fails to import on a host where
                # rtrain-tui is not installed.
                todo += _INIT_IMPORT.findall(files[init])
        files["/".join(parts) + ".py"] = source(parts[-1] + ".py", ".".join(parts[:-1]))
    files["__main__.py"] = (f"import sys\nfrom {main_module} import main\n"
                            "sys.exit(main(sys.argv[1:]))\n")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(files):
            z.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), files[path],
                       zipfile.ZIP_DEFLATED)
    return out.getvalue()
