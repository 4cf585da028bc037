"""User input is refused with the seed's exact words before anything touches a host."""

import pytest

from rtrain_tui.core import validate
from rtrain_tui.core.errors import ValidationError

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


def test_trainer_template_refuses_unknown_fields() -> None:
    assert validate.check_trainer_template("torchrun --nproc_per_node {gpus} t.py {config}")
    with pytest.raises(ValidationError, match="unknown: cfg"):
        validate.check_trainer_template("{python} t.py {cfg}")
