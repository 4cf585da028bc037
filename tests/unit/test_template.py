"""Trainer templates: values go in as finished shell words, and nothing can unquote them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rtrain_tui.core.errors import ValidationError
from rtrain_tui.core.safety import template, validate

DEFAULT = validate.DEFAULT_TRAINER


def run_sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, cwd=cwd,
                          timeout=10)


def test_default_template_quotes_every_value() -> None:
    assert template.render(DEFAULT, "python3", "a b;$(touch x).jsonl", 1) == (
        "python3 -m praisonai_train llm 'a b;$(touch x).jsonl' --config config.yaml")


def test_without_a_dataset_the_placeholder_and_its_space_go() -> None:
    assert template.render(DEFAULT, "python3", None, 1) == "python3 -m praisonai_train llm --config config.yaml"
    assert template.render("t {dataset}{{x}}", "p", None, 1) == "t{x}"


@pytest.mark.parametrize("tmpl", ["llm '{dataset}'", 'llm "{dataset}"', "llm \"a {dataset} b\"",
                                  "llm '--data={dataset}'", "x $'{dataset}'", "x `echo {dataset}`",
                                  "x \"$(echo {dataset})\""])
def test_a_template_that_quotes_a_placeholder_itself_is_refused(tmpl: str) -> None:
    with pytest.raises(ValidationError) as err:
        template.parse(tmpl)
    assert "remove the quotes around {dataset}: values are quoted for you" in str(err.value)


def test_the_quoted_placeholder_attack_no_longer_creates_a_file(tmp_path: Path) -> None:
    """Today's bug: `llm '{dataset}'` with dataset `x;touch P;.jsonl` created P."""
    with pytest.raises(ValidationError):
        template.render("echo llm '{dataset}'", "p", "x';touch P;'.jsonl", 1)
    out = run_sh(template.render("echo llm {dataset}", "p", "x';touch P;'.jsonl", 1), tmp_path)
    assert out.stdout == "llm x';touch P;'.jsonl\n" and not (tmp_path / "P").exists()


@pytest.mark.parametrize("tmpl,why", [
    ("{python} t.py {", "lone '{'"), ("{python} t.py }", "lone '}'"), ("{python {dataset}", "lone '{'"),
    ("{python} t.py {cfg}", "unknown: cfg"), ("{gpus:d}", "unknown: gpus:d"), ("{}", "unknown: )"),
    ("x \\{dataset}", "remove the backslash"), ("x # {dataset}", "# comment"),
    ("x 'open", "not balanced"), ("x $(echo", "not balanced"), ("x\ny", "one line"),
    ("x\x1b]0;t\x07", "one line"), ("x \\", "ends with a backslash"), ("cat <<EOF", "here-documents"),
    ("x $(( {dataset} + 1 ))", "only {gpus}"), ("${HOME", "${NAME}"), ("${{HOME}}", "${NAME}"),
    ("${X:-'a'}", "${NAME}"), ("   ", "may use only"),
])
def test_unusable_templates_are_refused_on_one_line(tmpl: str, why: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate.check_trainer_template(tmpl)
    message = str(err.value)
    assert message.startswith("--trainer template ") and why.rstrip(")") in message
    assert "\n" not in message and "\x1b" not in message


def test_double_braces_are_literal_and_shell_expansions_pass_through(tmp_path: Path) -> None:
    cmd = template.render("echo ${HOME} ${X:-dflt} {{ {gpus} }} $(( {gpus} * 2 )) {config}",
                          "p", None, 3)
    assert cmd == "echo ${HOME} ${X:-dflt} { 3 } $(( 3 * 2 )) config.yaml"
    out = run_sh("HOME=/h; " + cmd, tmp_path)
    assert out.stdout == "/h dflt { 3 } 6 config.yaml\n"


def test_placeholders_inside_unquoted_command_substitution_are_fine(tmp_path: Path) -> None:
    cmd = template.render("printf '%s|' $(printf '%s' {dataset}) {dataset}", "p", "a;touch P", 1)
    out = run_sh(cmd, tmp_path)
    assert "a;touch|P|a;touch P|" == out.stdout and not (tmp_path / "P").exists()


def test_python_with_a_home_tilde_is_expanded_by_the_shell(tmp_path: Path) -> None:
    cmd = template.render("echo {python} {dataset}", "~/my venv/bin/python", "d", 1)
    assert cmd == "echo ~/'my venv/bin/python' d"
    assert run_sh(f"HOME={tmp_path}; " + cmd, tmp_path).stdout == f"{tmp_path}/my venv/bin/python d\n"


def test_the_engine_uses_the_template_module() -> None:
    from rtrain_tui.core.engine import trainer_command

    assert trainer_command(DEFAULT, "~/v/bin/python", "x y", 2) == (
        "~/v/bin/python -m praisonai_train llm 'x y' --config config.yaml")


def test_preflight_runs_a_home_tilde_python(tmp_path: Path) -> None:
    from rtrain_tui.core.backends.direct import scripts as direct_sh
    from rtrain_tui.core.runs import probes

    py = tmp_path / "my venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\necho python=3.12.1\necho trainer=ok\n")
    py.chmod(0o755)
    out = run_sh(f"HOME={tmp_path}; export HOME\n"
                 + direct_sh.preflight("~/my venv/bin/python", "~/wd"), tmp_path).stdout
    report = probes.parse_preflight("h", out, "~/my venv/bin/python", 0)
    assert report.python_version == "3.12.1", out


def test_uses_tells_whether_a_placeholder_is_in_the_template() -> None:
    assert template.uses("{python} t.py --data {dataset}", "dataset")
    assert not template.uses("{python} t.py --data {{dataset}}", "dataset")  # literal braces
    assert not template.uses("{python} t.py ${dataset:-x}", "dataset")  # the shell's


def test_resume_field_renders_its_flag_and_the_quoted_path_only_when_resuming(tmp_path: Path) -> None:
    tmpl = "{python} train.py --config {config} {resume:--resume_from_checkpoint} --x 1"
    assert template.render(tmpl, "python3", None, 1) == "python3 train.py --config config.yaml --x 1"
    resumed = template.render(tmpl, "python3", None, 1, resume="outputs/checkpoint-150")
    assert resumed == ("python3 train.py --config config.yaml "
                       "--resume_from_checkpoint outputs/checkpoint-150 --x 1")
    odd = template.render("printf '%s|' {resume:-r}", "p", None, 1, resume="a b;$(touch P)")
    assert run_sh(odd, tmp_path).stdout == "-r|a b;$(touch P)|" and not (tmp_path / "P").exists()


@pytest.mark.parametrize("tmpl", ["x {resume}", "x {resume:}", "x {resume:a b}",
                                  "x {resume:--a;b}", "x {resume:resume}", "x '{resume:--r}'"])
def test_a_resume_field_without_one_option_word_or_in_quotes_is_refused(tmpl: str) -> None:
    with pytest.raises(ValidationError, match="resume"):
        validate.check_trainer_template(tmpl)
