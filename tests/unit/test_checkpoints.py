"""The "newest complete checkpoint" rule (core/runs/checkpoints.py): each way a save is
cut short is judged incomplete with its reason, a finished save is complete, and the
rule and its parser never raise on anything a host could send."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtrain_tui.core import host
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.runs import checkpoints as ck
from rtrain_tui.core.runs.checkpoints import Listing, StateText
from tests.checkpoint_files import save_order, state_json, write_checkpoint

MARK = "ck_0123456789abcdef_end"


def listing(path: str, step: int, files: list[str], text: str | None = None) -> Listing:
    state = None
    if "trainer_state.json" in files:
        body = state_json(step) if text is None else text
        state = StateText(len(body), body)
    return Listing(path, {f: True for f in files if f != "trainer_state.json"} | (
        {"trainer_state.json": True} if state else {}), state)


def test_a_finished_save_is_complete_and_every_cut_before_the_end_is_not() -> None:
    order = save_order()
    done = ck.judge([listing("outputs/checkpoint-150", 150, order)])
    assert done == [ck.Checkpoint("outputs/checkpoint-150", 150)]
    assert done[0].line == "outputs/checkpoint-150 ✓"
    for cut in range(len(order)):
        [one] = ck.judge([listing("outputs/checkpoint-200", 200, order[:cut])])
        assert not one.complete
        assert one.why == "no trainer_state.json: cut off mid-save"


def test_each_reason_is_said() -> None:
    full = save_order()
    cases = {
        "trainer_state.json truncated": listing("checkpoint-3", 3, full, state_json(3)[:40]),
        "trainer_state.json is empty: cut off mid-save": listing("checkpoint-4", 4, full, ""),
        "global_step 140 ≠ 150": listing("checkpoint-150", 140, full),
        "no weights": listing("checkpoint-5", 5, [f for f in full if "model" not in f]),
        "trainer_state.json has no global_step": listing("checkpoint-6", 6, full, "{}"),
        "trainer_state.json is not JSON (line 1 column 2)": listing("checkpoint-7", 7, full, "{x}"),
    }
    for why, one in cases.items():
        [judged] = ck.judge([one])
        assert judged.why == why, judged
        assert judged.line == f"{one.path} incomplete: {why}"


def test_global_step_must_be_an_integer_not_a_bool_or_a_float() -> None:
    for said in ("true", "150.0", '"150"'):
        text = f'{{"global_step": {said}}}'
        [one] = ck.judge([listing("checkpoint-1", 1, save_order(), text)])
        assert one.why == "trainer_state.json has no global_step", said


def test_newest_complete_skips_newer_incomplete_ones_and_says_why() -> None:
    full = save_order()
    judged = ck.judge([
        listing("outputs/checkpoint-100", 100, full),
        listing("outputs/checkpoint-150", 150, full),
        listing("outputs/checkpoint-200", 200, full[:3]),
        listing("outputs/checkpoint-250", 250, full, state_json(250)[:-30]),
    ])
    assert [c.step for c in judged] == [250, 200, 150, 100]
    newest = ck.newest_complete(judged)
    assert newest.checkpoint is not None and newest.checkpoint.path == "outputs/checkpoint-150"
    assert newest.lines == [
        "outputs/checkpoint-250 incomplete: trainer_state.json truncated",
        "outputs/checkpoint-200 incomplete: no trainer_state.json: cut off mid-save"]
    assert ck.newest_complete(ck.judge([listing("checkpoint-9", 9, full[:2])])).checkpoint is None
    assert ck.newest_complete([]) == ck.Newest(None, ())


def test_candidates_are_checkpoint_dirs_at_depth_one_to_three() -> None:
    assert ck.step_of("checkpoint-150") == 150
    assert ck.step_of("outputs/checkpoint-150") == 150
    assert ck.step_of("a/b/checkpoint-7") == 7
    for not_one in ("a/b/c/checkpoint-7", "checkpoint-", "checkpoint-1a", "tmp-checkpoint-5",
                    "outputs/checkpoint-150/x", "../checkpoint-1", "a b/checkpoint-1", "",
                    "checkpoint-" + "9" * 19, "/checkpoint-1"):
        assert ck.step_of(not_one) is None, not_one
    full = save_order()
    judged = ck.judge([listing("a/b/c/checkpoint-7", 7, full), listing("lora_model", 1, full)])
    assert judged == []


def test_sharded_weights_need_their_index_and_every_shard() -> None:
    base = [f for f in save_order() if "model" not in f]
    shards = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
              "model-00003-of-00003.safetensors"]
    index = "model.safetensors.index.json"
    assert ck.judge([listing("checkpoint-1", 1, base + shards + [index])])[0].complete
    [gap] = ck.judge([listing("checkpoint-1", 1, base + shards[::2] + [index])])
    assert gap.why == "weights incomplete: shard 2 of 3 missing"
    [no_index] = ck.judge([listing("checkpoint-1", 1, base + shards)])
    assert no_index.why == "no weights"
    [bin_shards] = ck.judge([listing("checkpoint-1", 1, base + [
        "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
        "pytorch_model.bin.index.json"])])
    assert bin_shards.complete


def test_an_empty_weights_file_is_no_weights() -> None:
    one = listing("checkpoint-2", 2, save_order())
    emptied = Listing(one.path, {**one.files, "adapter_model.safetensors": False}, one.state)
    assert ck.judge([emptied])[0].why == "no weights"


def test_every_rank_must_have_written_its_rng_state() -> None:
    four = save_order(4)
    late_rank = [f for f in four if f != "rng_state_3.pth"]
    # World size inferred from the other checkpoints of the run.
    judged = ck.judge([listing("outputs/checkpoint-100", 100, four),
                       listing("outputs/checkpoint-150", 150, late_rank)])
    assert judged[0].why == "rng_state_3.pth missing (4 ranks)"
    assert judged[1].complete
    # Alone, a missing highest rank cannot be seen; the caller's world size says it.
    assert ck.judge([listing("checkpoint-150", 150, late_rank)])[0].complete
    assert ck.judge([listing("checkpoint-150", 150, late_rank)], world_size=4)[0].why == (
        "rng_state_3.pth missing (4 ranks)")
    # A single process's `rng_state.pth`, or no RNG state at all, needs no ranks.
    assert ck.judge([listing("checkpoint-1", 1, save_order()),
                     listing("checkpoint-2", 2, four)])[0].complete is True
    no_rng = [f for f in save_order() if not f.startswith("rng")]
    assert ck.judge([listing("checkpoint-1", 1, no_rng)])[0].complete


def test_a_big_state_is_judged_by_its_head_and_tail_as_transformers_writes_it() -> None:
    text = state_json(500, entries=2000)
    assert len(text) > ck.WHOLE_CAP
    full = save_order()

    def big(body: str, step: int = 500) -> ck.Checkpoint:
        cut = StateText(len(body), body[:ck.HEAD_BYTES], body[-ck.TAIL_BYTES:], whole=False)
        files = {f: True for f in full}
        return ck.judge([Listing(f"outputs/checkpoint-{step}", files, cut)])[0]

    assert big(text).complete
    assert big(text, 450).why == "global_step 500 ≠ 450"
    # Cut short at many points, including right after a nested object's `}`.
    for end in (len(text) // 2, text.rindex("}", 0, len(text) - 10) + 1, len(text) - 3):
        assert big(text[:end]).why == "trainer_state.json truncated", end
    compact = json.dumps(json.loads(text))
    assert big(compact).why.startswith("trainer_state.json cannot be checked (")


def test_parse_listing_reads_what_the_host_script_prints() -> None:
    whole = state_json(150)
    big = state_json(9, entries=2000)
    out = (f"ck\toutputs/checkpoint-150\nf\tadapter_model.safetensors\t1\nf\tscheduler.pt\t0\n"
           f"f\ttrainer_state.json\t1\nts\t{len(whole)}\twhole\n{whole}\n{MARK}\n"
           f"ck\toutputs/checkpoint-200\nf\tconfig.json\t1\n"
           f"ck\tcheckpoint-9\nts\t{len(big)}\thead\n{big[:100]}\n{MARK}\n{big[-64:]}\n{MARK}\n")
    got = ck.parse_listing(out, MARK)
    assert [g.path for g in got] == ["outputs/checkpoint-150", "outputs/checkpoint-200",
                                     "checkpoint-9"]
    assert got[0].files == {"adapter_model.safetensors": True, "scheduler.pt": False,
                            "trainer_state.json": True}
    assert got[0].state == StateText(len(whole), whole)
    assert got[1].state is None
    assert got[2].state == StateText(len(big), big[:100], big[-64:], whole=False)
    # A state whose end marker never came is not judged from half a file.
    cut = ck.parse_listing(out[: out.index(MARK) - 5], MARK)
    assert cut == []


def test_a_file_that_holds_text_like_the_format_cannot_end_its_block() -> None:
    sneaky = "{\n}\nck\tcheckpoint-999\nf\tmodel.safetensors\t1\n"
    out = f"ck\tcheckpoint-1\nf\tmodel.safetensors\t1\nts\t{len(sneaky)}\twhole\n{sneaky}\n{MARK}\n"
    [one] = ck.parse_listing(out, MARK)
    assert one.state is not None and one.state.head == sneaky


names = st.sampled_from([*save_order(4), "model.safetensors", "model.safetensors.index.json",
                         "model-00001-of-00002.safetensors", "rng_state_9999.pth", "x"])
paths = st.one_of(st.sampled_from(["checkpoint-1", "o/checkpoint-2", "a/b/checkpoint-3"]),
                  st.text(max_size=30))
states = st.one_of(st.none(), st.builds(StateText, st.integers(-5, 10**20), st.text(),
                                        st.text(), st.booleans()),
                   st.builds(lambda n, cut: StateText(0, state_json(n)[:cut]),
                             st.integers(0, 10**6), st.integers(0, 400)))
listings = st.builds(Listing, paths, st.dictionaries(names | st.text(max_size=8), st.booleans()),
                     states)


@given(st.lists(listings, max_size=6), st.one_of(st.none(), st.integers(-3, 64)))
def test_the_rule_never_raises(found: list[Listing], world: int | None) -> None:
    judged = ck.judge(found, world)
    newest = ck.newest_complete(judged)
    assert all(c.line for c in judged)
    if newest.checkpoint is not None:
        assert newest.checkpoint.complete
        assert all(s.step >= newest.checkpoint.step and not s.complete for s in newest.skipped)


pieces = st.sampled_from(["ck\t", "f\t", "ts\t", "1", "\t", "\n", "head", "whole", MARK, "x",
                          "{", "}", "-", "é", "99999999999999999999"])


@given(st.lists(pieces).map("".join))
def test_the_parser_never_raises(out: str) -> None:
    for one in ck.parse_listing(out, MARK):
        assert isinstance(one.path, str)


def test_the_deeply_nested_json_is_not_json_and_no_recursion_error() -> None:
    deep = "[" * 100000 + "]" * 100000
    [one] = ck.judge([listing("checkpoint-1", 1, save_order(), "{\"a\":" + deep + "}")])
    assert one.why == "trainer_state.json is not JSON"


# --- the host side (host/checkpoints.sh), run under the local /bin/sh and dash --------

def listed(run_dir: Path, shell: str = "/bin/sh") -> list[ck.Checkpoint]:
    script = remote_sh.checkpoints(str(run_dir.parent), run_dir.name, MARK)
    out = subprocess.run([shell, "-c", script], capture_output=True, text=True, timeout=30).stdout
    return ck.judge(ck.parse_listing(out, MARK))


@pytest.mark.parametrize("shell", ["/bin/sh", "dash"])
def test_the_host_script_lists_what_the_rule_needs(tmp_path: Path, shell: str) -> None:
    run = tmp_path / "r1"
    full = save_order()
    big = state_json(300, entries=2000)
    write_checkpoint(run, "outputs/checkpoint-100", 100, full)
    write_checkpoint(run, "outputs/checkpoint-300", 300, full, big)
    write_checkpoint(run, "outputs/checkpoint-350", 350, full, big[:-100])
    write_checkpoint(run, "outputs/checkpoint-400", 400, full[:4])
    write_checkpoint(run, "outputs/checkpoint-450", 450, full, state_json(450)[:50])
    write_checkpoint(run, "a/b/checkpoint-7", 7, full)
    write_checkpoint(run, "a/b/c/checkpoint-8", 8, full)  # too deep
    write_checkpoint(run, "checkpoint-x", 1, full)  # not a step
    write_checkpoint(run, "we ird/checkpoint-9", 9, full)  # a name that could break a line
    write_checkpoint(run, ".hidden/checkpoint-10", 10, full)
    (run / "outputs" / "checkpoint-400" / "scheduler.pt").write_text("")
    got = listed(run, shell)
    assert [c.line for c in got] == [
        "outputs/checkpoint-450 incomplete: trainer_state.json truncated",
        "outputs/checkpoint-400 incomplete: no trainer_state.json: cut off mid-save",
        "outputs/checkpoint-350 incomplete: trainer_state.json truncated",
        "outputs/checkpoint-300 ✓",
        "outputs/checkpoint-100 ✓",
        "a/b/checkpoint-7 ✓",
    ]
    assert ck.newest_complete(got).checkpoint == ck.Checkpoint("outputs/checkpoint-300", 300)


def test_the_host_script_says_nodir_and_lists_nothing_without_checkpoints(tmp_path: Path) -> None:
    script = remote_sh.checkpoints(str(tmp_path), "gone", MARK)
    assert subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                          timeout=30).stdout == "nodir\n"
    (tmp_path / "empty").mkdir()
    assert listed(tmp_path / "empty") == []


def test_the_host_script_sends_what_the_rule_expects_of_a_big_state() -> None:
    text = host.text("checkpoints.sh")
    assert f'-le {ck.WHOLE_CAP} ]' in text
    assert f"bs={ck.HEAD_BYTES} count=1" in text and f"tail -c {ck.TAIL_BYTES} " in text


def test_the_marker_is_one_safe_word() -> None:
    for bad in ("", "a b", "x'y", "ck\n", "é"):
        with pytest.raises(ValueError):
            remote_sh.checkpoints("/w", "r1", bad)


def test_the_note_before_fetching_an_incomplete_checkpoint_names_a_complete_one() -> None:
    full = save_order()
    judged = ck.judge([listing("outputs/checkpoint-150", 150, full),
                       listing("outputs/checkpoint-200", 200, full[:2])])
    assert ck.incomplete_note(judged, "outputs/checkpoint-200/") == (
        "outputs/checkpoint-200 is incomplete (no trainer_state.json: cut off mid-save); "
        "the newest complete one is outputs/checkpoint-150")
    assert ck.incomplete_note(judged, "outputs/checkpoint-150") == ""
    assert ck.incomplete_note(judged, "train.log") == ""
    assert ck.incomplete_note([judged[0]], "outputs/checkpoint-200") == (
        "outputs/checkpoint-200 is incomplete (no trainer_state.json: cut off mid-save); "
        "the run has no complete checkpoint")
