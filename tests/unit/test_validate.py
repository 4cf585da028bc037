"""User input is refused with the seed's exact words before anything touches a host."""

import re
from pathlib import Path

import pytest

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.safety import validate

BAD_RUN_IDS = ["x;touch /tmp/pwned", "$(id)", "`id`", "a b", "../escape", "/absolute", "",
               "-leading-dash", "a" * 65, ".hidden"]
BAD_FETCH_PATHS = ["../../../../etc/passwd", "/etc/passwd", "a/../../b", "", "   "]


@pytest.mark.parametrize("run_id", BAD_RUN_IDS)
def test_bad_run_ids_are_refused_with_the_seed_message(run_id: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_run_id(run_id)
    assert str(err.value) == (
        f"run id {run_id!r} is not usable: letters, digits, dot, dash and underscore only, "
        "starting with a letter or digit, up to 64 chars."
    )


@pytest.mark.parametrize("run_id", ["run-1", "a", "A.b_c-9", "9" * 64])
def test_good_run_ids_pass(run_id: str) -> None:
    assert validate.check_run_id(run_id) == run_id


def test_seed_workdir_message_word_for_word() -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_workdir("gpu", "~/x; rm -rf /")
    assert str(err.value) == ("gpu: workdir '~/x; rm -rf /' may only contain letters, digits "
                              "and ._-/~ -- it is expanded by the remote shell.")


@pytest.mark.parametrize("workdir", ["~/x y", "$HOME", "a*", "~/a~b", "", "~/`id`", "a\nb"])
def test_workdirs_with_shell_meaning_are_refused(workdir: str) -> None:
    with pytest.raises(ValidationError):
        validate.check_workdir("h", workdir)


@pytest.mark.parametrize("workdir", ["~/.praisonai-train", "/scratch/me/runs", "~", "rel/dir"])
def test_plain_workdirs_pass(workdir: str) -> None:
    assert validate.check_workdir("h", workdir) == workdir


@pytest.mark.parametrize("path", BAD_FETCH_PATHS)
def test_fetch_paths_outside_the_run_dir_are_refused(path: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_fetch_path(path)
    assert str(err.value) == (f"{path!r} points outside the run directory. Fetch paths are "
                              "relative to it, e.g. 'lora_model' or 'train.log'.")


def test_fetch_paths_are_normalised() -> None:
    assert validate.check_fetch_path("./lora_model/") == "lora_model"


def test_env_pairs_need_identifier_keys() -> None:
    assert validate.parse_env(["A=1", "B_2=x=y", "C="]) == {"A": "1", "B_2": "x=y", "C": ""}
    for bad in ["NOEQUALS", "1A=x", "A B=x", "A;id=x", "=x"]:
        with pytest.raises(ValidationError, match="KEY=VALUE"):
            validate.parse_env([bad])


@pytest.mark.parametrize("key", ["RTRAIN_RUN", "RTRAIN_OTHER", "RT_GRACE", "RT_PROC", "RT_SHELL",
                                 "IFS", "proc"])
def test_env_refuses_the_names_the_wrapper_relies_on_in_one_line_without_the_value(key: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.parse_env([f"{key}=s3cret"])
    assert str(err.value) == (f"--env {key} is not usable: the run's wrapper on the host relies "
                              "on it (RTRAIN_*, RT_*, IFS and proc are rtrain-tui's own); use "
                              "another name.")


def test_env_names_that_only_resemble_the_wrappers_are_kept() -> None:
    pairs = ["MY_RTRAIN_RUN=1", "RTRAIN=1", "RTX=1", "ifs=1", "PROC=1", "process=1"]
    assert validate.parse_env(pairs) == {p.partition("=")[0]: "1" for p in pairs}


def test_trainer_template_refuses_unknown_fields() -> None:
    assert validate.check_trainer_template("torchrun --nproc_per_node {gpus} t.py {config}")
    with pytest.raises(ValidationError, match="unknown: cfg"):
        validate.check_trainer_template("{python} t.py {cfg}")


# -- whole-string matching: a trailing newline is not "the end" ------------------------
@pytest.mark.parametrize("run_id", ["run-1\n", "run-1\n/x", "a\r", "a\x00"])
def test_run_ids_with_a_trailing_newline_are_refused(run_id: str) -> None:
    with pytest.raises(ValidationError, match=r"is not usable: letters, digits"):
        validate.check_run_id(run_id)


@pytest.mark.parametrize("workdir", ["/tmp/w\n", "~/w\n", "/tmp\n/x", "-w", "--help"])
def test_workdirs_with_a_trailing_newline_or_leading_dash_are_refused(workdir: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_workdir("h", workdir)
    assert "\n" not in str(err.value) and "-- it is expanded by the remote shell." in str(err.value)


@pytest.mark.parametrize("python", ["python3\n", "/usr/bin/python\n", "-c", "~python", "~"])
def test_python_paths_with_a_trailing_newline_or_odd_tilde_are_refused(python: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_python(python)
    assert str(err.value).startswith(f"python {python!r} is not usable") and "\n" not in str(err.value)


@pytest.mark.parametrize("python", ["python3", "~/venv/bin/python", "/opt/conda/bin/python3.11",
                                    "~/.pyenv/shims/python"])
def test_python_may_start_with_a_home_tilde(python: str) -> None:
    assert validate.check_python(python) == python


def test_python_tilde_is_left_for_the_remote_shell_and_the_rest_quoted() -> None:
    assert validate.python_word("~/venv/bin/python") == "~/venv/bin/python"
    assert validate.python_word("~/my venv/bin/python") == "~/'my venv/bin/python'"
    assert validate.python_word("/a b/python") == "'/a b/python'"


@pytest.mark.parametrize("pair", ["KEY\n=v", "KEY\r=v", "A\n", "K=a\x00b"])
def test_env_keys_with_a_trailing_newline_and_nul_values_are_refused(pair: str) -> None:
    with pytest.raises(ValidationError, match="KEY=VALUE|NUL") as err:
        validate.parse_env([pair])
    assert "\n" not in str(err.value)


# -- hosts ---------------------------------------------------------------------------
HOST_MESSAGE = "is not usable: give an alias from ~/.ssh/config."


@pytest.mark.parametrize("host", ["a..b", "a" * 300, "x" * 64 + ".example", "gpu\u202e", "\ufeffgpu",
                                  "g\x1b]0;pwn\x07", "gpu\n", "", "-oProxyCommand=x", "a b",
                                  "a;touch x", "$(id)", ".lead", "a\x00b", "a/b"])
def test_hosts_that_cannot_be_aliases_or_names_are_refused_on_one_line(host: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_host(host)
    message = str(err.value)
    assert message.endswith(HOST_MESSAGE) and "\n" not in message
    assert not any(ord(c) < 32 or c in "\u202e\ufeff" for c in message)


@pytest.mark.parametrize("host", ["gpu", "lab-a", "h100.example.org", "10.0.0.1", "::1",
                                  "gpu_box", "bücher.example", "host."])
def test_hostnames_and_plain_aliases_pass(host: str) -> None:
    assert validate.check_host(host) == host


def test_an_alias_the_ssh_config_lists_may_be_any_text_without_controls() -> None:
    aliases = ["a..b", "rented box"]
    assert validate.check_host("a..b", aliases) == "a..b"
    assert validate.check_host("rented box", aliases) == "rented box"
    with pytest.raises(ValidationError):
        validate.check_host("a..b")
    with pytest.raises(ValidationError):
        validate.check_host("bad\x1b", ["bad\x1b"])


# -- datasets --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["config.yaml", "run.sh", "status", "train.pid", "train.log",
                                  "train.ident", "stop_requested", "stopped", "launch.out",
                                  ".rtrain-nonce", "status.tmp", "run.sh.part", "lora_model",
                                  "train.token", "submit_unknown", "attempts.jsonl", "attempts",
                                  "launch.json"])
def test_a_dataset_named_like_a_run_dir_file_is_refused_naming_the_collision(name: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_dataset_name(name)
    assert "collides with the run directory's own" in str(err.value)
    assert repr(name.removesuffix(".tmp").removesuffix(".part")) in str(err.value) or name.startswith(
        ("launch.", ".rtrain"))


def _written_in_run_dirs() -> set[str]:
    """Every plain name a run's wrapper (the golden run scripts: run dir as their cwd)
    writes, makes or reads there, and the files a start or resume writes beside them."""
    from rtrain_tui.core.host import unattended
    from rtrain_tui.core.notify import host_send

    # (`mv`'s source is a whole word: a quoted one must not end in a one-letter "name".)
    target = re.compile(r'(?:(?<![0-9&])>>?|\bmv(?: -f)? \S+(?= )|\bmkdir(?: -p)?|\[ -[ers] ) *'
                        r'"?([A-Za-z_][A-Za-z0-9_.]*)"?(?=[\s;)&|]|$)')
    golden = Path(__file__).parent.parent / "golden"
    names = {found.group(1) for path in golden.glob("run*")
             for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
             for found in target.finditer(line)}
    return names | {host_send.SETTINGS, host_send.PROGRAM, host_send.LOG,
                    unattended.RETRY_PROGRAM, "notified"}


def test_a_dataset_is_never_named_like_a_file_a_run_writes_in_its_dir() -> None:
    """Placed under its own name, such a dataset would be copied over that file (the
    host's notify.json, the queue's gpus, a stop's stop_requested…), or it over the data.
    An attempt's own files (the watchdog's stalled…) are under `.rtrain/`, a name no
    dataset takes either."""
    names = _written_in_run_dirs() | {".rtrain"}
    assert {"status", "notify.json", "stop_requested", "gpus"} <= names  # the scan finds them
    accepted = []
    for name in sorted(names):
        try:
            validate.check_dataset_name(name)
            accepted.append(name)
        except ValidationError:
            pass
    assert accepted == []


@pytest.mark.parametrize("name", ["-x.jsonl", "--config", "a\nb.jsonl", "x\x1b[2J.jsonl",
                                  "rtl\u202e.jsonl", "", ".", "..", "a" * 300])
def test_dataset_names_that_are_options_or_hold_controls_are_refused(name: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_dataset_name(name)
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


@pytest.mark.parametrize("name", ["train.jsonl", "train data;$(touch PWNED) `id`.jsonl",
                                  "x[@click(].jsonl", "config.yaml.jsonl", "statuses.csv"])
def test_odd_but_harmless_dataset_names_pass(name: str) -> None:
    assert validate.check_dataset_name(name) == name


def test_dataset_collision_is_refused_before_connecting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rtrain_tui.core.engine import StartRequest

    (tmp_path / "c.yaml").write_text("model: x\n")
    (tmp_path / "config.yaml").write_text("{}\n")
    request = StartRequest("gpu", tmp_path / "c.yaml", dataset=tmp_path / "config.yaml")
    with pytest.raises(ValidationError, match="collides with the run directory's own 'config.yaml'"):
        request.validated()


def test_fetch_paths_with_control_characters_are_refused_on_one_line() -> None:
    for path in ["a\x00b", "lora\n", "x\x1b[2J"]:
        with pytest.raises(ValidationError) as err:
            validate.check_fetch_path(path)
        assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


def test_a_local_file_name_with_nul_is_refused_not_crashed() -> None:
    with pytest.raises(ValidationError, match="does not exist"):
        validate.check_local_file("config", "a\x00b.yaml")
