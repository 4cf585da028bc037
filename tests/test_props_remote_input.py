"""Property tests: no value a user types can run a command on the host.

One strategy per kind of input (run id, workdir, python, dataset name, env key and value,
trainer template, fetch path, host alias), each mixing plain text with what breaks
shells and terminals: newlines, NUL, quotes, `$()`, backticks, `;`, leading dashes,
unicode controls, very long strings, and `touch CANARY` payloads.

For every generated value: either the validator refuses it with a one-line
ValidationError, or the remote script built from it (the real functions of
`remote_sh.py` and `template.py`), run under the real `/bin/sh` in a sandbox directory,
does exactly what was asked, and a file named CANARY never appears. Each Hypothesis
example carries a batch of values that one `/bin/sh` runs, so the whole property run
(12,000+ values) stays well under two minutes on two cores.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rtrain_tui.core.backends.direct import scripts as direct_sh
from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import probes
from rtrain_tui.core.safety import template, validate
from rtrain_tui.core.safety.sanitize import UNSAFE_CHARS

TOKEN = "0123456789abcdef"
# Random on a developer's machine, fixed in CI (tests/conftest.py's "ci" profile).
PROPS = settings(max_examples=60, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))

# -- strategies: one per kind of input ---------------------------------------------------
PAYLOADS = ["touch CANARY", ";touch CANARY;", "$(touch CANARY)", "`touch CANARY`",
            "';touch CANARY;'", '";touch CANARY;"', "' ; touch CANARY ; '", "\ntouch CANARY\n",
            "|touch CANARY", "&&touch CANARY", "\\';touch CANARY;#", "'\"$(touch CANARY)\"'"]
HOSTILE = ["\n", "\r", "\x00", "'", '"', "$(", ")", "(", "`", ";", "&", "|", "-", "--", "~",
           "~/", "/", "..", ".", " ", "\t", "\\", "$", "${HOME}", "*", "?", "#", "=",
           "\u202e", "\ufeff", "\x1b]0;t\x07", "\x85", "\u2028", "é", "\x7f"]
PLAIN = st.text(alphabet="abcxyz019_.-", min_size=1, max_size=8)
ATOM = st.one_of(PLAIN, PLAIN, st.sampled_from(HOSTILE), st.sampled_from(PAYLOADS))
LONG = st.text(min_size=65, max_size=400)


def mixed(prefixes: list[str] = [""], plain: str = "") -> st.SearchStrategy[str]:  # noqa: B006
    """Plain words with hostile pieces in between, sometimes anything at all, sometimes long.

    Half the values are mostly plain (`plain` adds the kind's own harmless characters), so
    that many pass validation and are run, not only refused.
    """
    built = st.tuples(st.sampled_from(prefixes), st.lists(ATOM, max_size=6)).map(
        lambda t: t[0] + "".join(t[1]))
    near = st.tuples(st.sampled_from(prefixes), st.lists(
        st.one_of(PLAIN, PLAIN, PLAIN, st.sampled_from(list(plain) or ["a"]), st.sampled_from(HOSTILE)),
        min_size=1, max_size=4)).map(lambda t: t[0] + "".join(t[1]))
    return st.one_of(near, near, near, built, built, st.text(max_size=12), LONG)


run_ids = mixed()
workdirs = mixed(["", "~/", "/", "~", "./"], plain="/.")
pythons = mixed(["", "~/", "/", "~/my venv/"], plain="/+")
dataset_names = st.one_of(mixed(["", "-", "."]), st.sampled_from(
    ["config.yaml", "run.sh", "status", "train.pid", "train.log", "train.ident", "stop_requested",
     "stopped", "launch.lock", ".rtrain-x", "status.tmp"] + [p + ".jsonl" for p in PAYLOADS]))
env_keys = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True), mixed())
env_values = st.one_of(mixed(), st.text(max_size=40))
fetch_paths = mixed(["", "/", "../", "lora_model/", "./"])
host_aliases = st.one_of(mixed(), st.from_regex(r"[a-z0-9.-]{1,70}", fullmatch=True),
                         st.text(alphabet="a.", max_size=10))
TEMPLATE_ATOMS = ["{python}", "{dataset}", "{gpus}", "{config}", "{{", "}}", "{", "}", "${HOME}",
                  "${X:-d}", "'", '"', "`", "$(", "$((", "))", ")", "(", "\\", "#", ";", "|", "&",
                  " ", " ", " ", "a", "-x", "=", ":", ">", "<", "$'", "{cfg}", "\n", "~"]
templates = st.lists(st.sampled_from(TEMPLATE_ATOMS), min_size=1, max_size=10).map("".join)
# Datasets a template is filled with: names that pass check_dataset_name, built to break
# out of whatever quoting a template might put around them.
template_datasets = st.sampled_from(
    ["x;touch CANARY;.jsonl", "$(touch CANARY)", "`touch CANARY`", "';touch CANARY;'",
     "\"$(touch CANARY)\"", "a' ; touch CANARY ; 'b", "\\';touch CANARY;#", "a b.jsonl", "x}{y"])


def batch(strategy: st.SearchStrategy[str], size: int) -> st.SearchStrategy[list[str]]:
    return st.lists(strategy, min_size=size, max_size=size)


# -- the sandbox -----------------------------------------------------------------------
@contextmanager
def sandbox() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rtprop") as d:
        root = Path(d).resolve()
        (root / "home").mkdir()
        yield root


def run_sh(root: Path, script: str) -> subprocess.CompletedProcess[bytes]:
    env = {"HOME": str(root / "home"), "PATH": "/usr/bin:/bin", "RT_PROC": str(root / "noproc"),
           "LC_ALL": "C"}
    # The trailing `:`: the exit status is each case's business, checked case by case.
    return subprocess.run(["/bin/sh", "-c", script + "\n:\n"], cwd=root, env=env, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=90)


def assert_no_canary(root: Path) -> None:
    found = [p for p in root.rglob("*") if p.name == "CANARY"]
    assert not found, f"a payload ran: {found}"


def refused(check: Callable[..., object], *args: object) -> bool:
    """True when `check(*args)` refuses with a one-line, inert ValidationError."""
    try:
        check(*args)
    except ValidationError as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message
        assert not UNSAFE_CHARS.search(message), repr(message)
        return True
    return False


def case_block(i: int, body: str) -> str:
    """Run `body` in case directory i, its output in case{i}.out, isolated in a subshell."""
    return f"mkdir -p case{i}\n( cd case{i} && {{\n{body}\n}} ) > case{i}.out 2>&1 </dev/null\n"


# -- run id and workdir: make_run_dir, resolve_workdir, run_states ------------------------
@PROPS
@given(batch(st.tuples(workdirs, run_ids), 30))
def test_run_ids_and_workdirs_make_exactly_their_run_dir(pairs: list[tuple[str, str]]) -> None:
    with sandbox() as root:
        home = root / "home"
        script, expected, accepted = [], {}, []
        taken: dict[int, str] = {}
        made_runs: set[str] = set()
        made_parents: set[str] = set()
        for i, (wd, rid) in enumerate(pairs):
            if refused(validate.check_run_id, rid) | refused(validate.check_workdir, "h", wd):
                continue
            if wd.startswith("~") and not (wd == "~" or wd.startswith("~/")):
                continue  # ~user: someone else's home, not the sandbox's
            wd_run = f"{root}{wd}" if wd.startswith("/") else wd
            base = (str(home) + wd_run[1:] if wd_run.startswith("~") else
                    wd_run if wd_run.startswith("/") else f"{root}/case{i}/{wd_run}")
            want = os.path.normpath(f"{base}/{rid}")
            if want in made_parents and want not in made_runs:
                # An earlier case's workdir made this path, without a token: make_run_dir
                # must refuse it as someone else's directory, never adopt it.
                taken[i] = want
            else:
                expected[i] = want
                made_runs.add(want)
                accepted.append((wd_run, rid))
            made_parents.update(str(p) for p in Path(want).parents)
            # make_run_dir cds into the workdir: its own subshell, so resolve starts afresh.
            script.append(case_block(i, f"( {remote_sh.make_run_dir(wd_run, rid, TOKEN)} )\n"
                                     + remote_sh.resolve_workdir(wd_run)))
        # The one probe per host sees every run dir that lies outside the case dirs.
        probed = [(w, r) for w, r in accepted if w.startswith(("~", "/"))]
        script.append(direct_sh.run_states(probed))
        out = run_sh(root, "".join(script))
        states = probes.parse_run_states(out.stdout.decode(), len(probed))
        assert all(s.exists for s in states), out.stdout
        assert out.returncode == 0, out.stderr
        for i, want in expected.items():
            lines = (root / f"case{i}.out").read_text().splitlines()
            assert os.path.normpath(lines[0].removeprefix("dir=")) == want, lines
            assert Path(want).is_dir()
            assert os.path.normpath(lines[1]) == os.path.dirname(want)
        for i, path in taken.items():
            assert (root / f"case{i}.out").read_text().splitlines()[0] == "exists", path
            assert not (Path(path) / "train.token").exists()
        assert_no_canary(root)
    COUNTS["run id + workdir"] += len(pairs) * 2


# -- python: one word, ~/ expanded by the shell -----------------------------------------
@PROPS
@given(batch(pythons, 30))
def test_python_paths_are_one_word_with_only_a_leading_tilde_expanded(values: list[str]) -> None:
    with sandbox() as root:
        script, expected = [], {}
        for i, py in enumerate(values):
            if refused(validate.check_python, py):
                continue
            expected[i] = str(root / "home") + py[1:] if py.startswith("~/") else py
            word = template.render("{python}", py, None, 1)
            assert word == validate.python_word(py)
            script.append(case_block(i, f"set -- {word}\nprintf '%s\\n' \"$#\" \"$1\""))
            # The preflight's use of it: `command -v WORD` must not run anything either.
            script.append(case_block(1000 + i, f"command -v {word} || :"))
        out = run_sh(root, "".join(script))
        assert out.returncode == 0, out.stderr
        for i, want in expected.items():
            assert (root / f"case{i}.out").read_text() == f"1\n{want}\n"
        assert_no_canary(root)
    COUNTS["python"] += len(values)


# -- dataset names: the trainer command, link_or_copy and checksums -----------------------
ARGV = "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done\n"


@PROPS
@given(batch(dataset_names, 25))
def test_dataset_names_reach_the_trainer_as_one_argument(names: list[str]) -> None:
    with sandbox() as root:
        blob = root / "blob"
        blob.write_bytes(b"data\n")
        (root / "argv.sh").write_text(ARGV)
        (root / "argv.sh").chmod(0o755)
        script, expected = [], {}
        for i, name in enumerate(names):
            if refused(validate.check_dataset_name, name):
                continue
            expected[i] = name
            cmd = template.render(validate.DEFAULT_TRAINER, f"{root}/argv.sh", name, 1)
            target = f"{root}/case{i}/{name}"
            script.append(case_block(i, f"{remote_sh.link_or_copy(str(blob), target)}{cmd}"))
        out = run_sh(root, "".join(script))
        assert out.returncode == 0, out.stderr
        for i, name in expected.items():
            got = (root / f"case{i}.out").read_bytes()
            want = b"\0".join(a.encode() for a in
                              ["-m", "praisonai_train", "llm", name, "--config", "config.yaml"]) + b"\0"
            assert got == b"linked=1\n" + want
            assert (root / f"case{i}" / name).read_bytes() == b"data\n"
        assert_no_canary(root)
    COUNTS["dataset name"] += len(names)


# -- env: exported by the real wrapper, exactly -------------------------------------------
SPECIAL_ENV = {"PATH", "IFS", "HOME", "PWD", "OLDPWD", "ENV", "CDPATH", "PS1", "PS2", "PS4",
               "OPTIND", "OPTARG", "LINENO", "PPID", "LANG", "SHELL", "TMPDIR"}


@PROPS
@given(batch(st.tuples(env_keys, env_values), 25))
def test_env_values_reach_the_trainer_exactly_through_the_wrapper(pairs: list[tuple[str, str]]) -> None:
    env: dict[str, str] = {}
    for key, value in pairs:
        if refused(validate.parse_env, [f"{key}={value}"]):
            continue
        # KEY=VALUE splits at the first `=`: `A==0` is A set to `=0`, as a shell would read it
        ((key, value),) = validate.parse_env([f"{key}={value}"]).items()
        if key in SPECIAL_ENV or key.startswith(("RT", "LC_", "BASH", "_")):
            continue  # the shell's own variables: setting them is asking for their effect
        env[key] = value
    with sandbox() as root:
        case = root / "case"
        case.mkdir()
        dump = "{ " + " ".join(f"printf '%s\\0' \"${{{k}}}\";" for k in env) + " :; }"
        (case / "run.sh").write_text(direct_sh.wrapper(dump, env))
        out = run_sh(root, "cd case && sh ./run.sh")
        assert out.returncode == 0, out.stderr
        want = b"".join(v.encode() + b"\0" for v in env.values())
        assert (case / "train.log").read_bytes() == want
        assert (case / "status").read_text() == "0\n"
        assert_no_canary(root)
    COUNTS["env key/value"] += len(pairs)


# -- trainer templates: whatever the template, a value never becomes shell ----------------
@PROPS
@given(batch(st.tuples(templates, template_datasets), 30))
def test_templates_never_let_a_value_run_as_shell(cases: list[tuple[str, str]]) -> None:
    with sandbox() as root:
        script = []
        for i, (tmpl, dataset) in enumerate(cases):
            if refused(validate.check_trainer_template, tmpl):
                continue
            cmd = template.render(tmpl, "~/py;touch CANARY", dataset, 2)
            (root / f"t{i}.sh").write_text(cmd + "\n")
            # Each in its own sh: a template may be a syntax error, that is its business.
            script.append(f"mkdir -p case{i}; (cd case{i} && sh ../t{i}.sh) >/dev/null 2>&1 </dev/null\n")
        run_sh(root, "".join(script))
        assert_no_canary(root)
    COUNTS["trainer template"] += len(cases)


# -- fetch paths: confined, and checksummed by name -------------------------------------
@PROPS
@given(batch(fetch_paths, 20))
@example(["-", "a/-", "--", "-x", "--help"])  # found by CI: sha256sum read stdin for `-`
def test_fetch_paths_are_checksummed_as_one_name(paths: list[str]) -> None:
    with sandbox() as root:
        script, expected = [], {}
        for i, path in enumerate(paths):
            if refused(validate.check_fetch_path, path):
                continue
            rel = validate.check_fetch_path(path)
            if rel == ".":
                continue  # the whole run dir: fetched as a tree, not checksummed as a file
            run_dir = root / f"case{i}" / "run"
            try:
                (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                (run_dir / rel).write_bytes(rel.encode())
            except OSError:
                continue  # a name this file system cannot hold
            assert (run_dir / rel).resolve().is_relative_to(run_dir.resolve())
            expected[i] = hashlib.sha256(rel.encode()).hexdigest()
            script.append(case_block(i, remote_sh.checksums(str(run_dir), [rel])))
        out = run_sh(root, "".join(script))
        assert out.returncode == 0, out.stderr
        for i, digest in expected.items():
            assert (root / f"case{i}.out").read_text().startswith((digest, "\\" + digest))
        assert_no_canary(root)
    COUNTS["fetch path"] += len(paths)


# -- host aliases: a resolvable name, or refused on one line ------------------------------
@settings(PROPS, max_examples=100)
@given(batch(host_aliases, 30))
def test_host_aliases_are_names_or_refused_on_one_line(hosts: list[str]) -> None:
    for host in hosts:
        if refused(validate.check_host, host):
            continue
        assert 0 < len(host) <= 255 and not host.startswith("-")
        assert not any(c.isspace() for c in host) and not UNSAFE_CHARS.search(host)
        assert all(c.isalnum() or c in "._-:" for c in host)  # nothing a shell would read
        if ":" not in host:
            host.encode("idna")  # what asyncssh will do with it: must not raise
    COUNTS["host alias"] += len(hosts)


COUNTS: dict[str, int] = dict.fromkeys(
    ["run id + workdir", "python", "dataset name", "env key/value", "trainer template",
     "fetch path", "host alias"], 0)


def test_zz_the_property_run_covered_at_least_ten_thousand_values() -> None:
    """Runs last in this module: the total across every field above."""
    if any(v == 0 for v in COUNTS.values()):
        return  # a subset was selected (-k): nothing to total
    assert sum(COUNTS.values()) >= 10_000, COUNTS
