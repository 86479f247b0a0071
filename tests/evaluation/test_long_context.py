"""The long_context suite with scripted models of known behaviour: a reader that solves every family from the
text scores 100% at every cell that fits and its effective length is open-ended; one that fails past a prompt
size gets exactly that length; a first-needle copier on multi-key NIAH scores exactly the share of examples
whose asked needle comes first; a learned table's limit, few-shot demonstrations inside the length, the mix's
families asked by default, and the report's headline table."""

import re

import pytest

from posbench.config import load_config
from posbench.data.tasks import get_task_class
from posbench.errors import ConfigError
from posbench.evaluation.eval_config import EvalConfig
from posbench.evaluation.suites import ALL
from posbench.evaluation.suites.long_context import MEAN, LongContext, LongContextConfig, families
from tests.evaluation.helpers import ScriptedModel, session_for, small_model, target_for
from tests.tasks.long_context_solvers import common_words, frequent_words, kv_retrieval, niah, variable_tracking

# (a marker of the family's prompt, where its text starts after any exact_length padding, its solver)
SOLVE = [("Words: ", "Words: ", common_words), ("Text: ", "Text: ", frequent_words), (" Key: ", "{", kv_retrieval),
         ("Which variables equal", "", variable_tracking), ("", "", niah)]
FAMILIES = ["niah_single", "niah_multikey", "variable_tracking", "common_words", "frequent_words", "kv_retrieval"]


def task_cfgs(names=FAMILIES):
    # 4-digit values and 3 keys: every one of these fits a 128-token training length with filler to spare
    small = {"niah_multikey": {"value_digits": 4, "n_keys": 3}, "niah_single": {"value_digits": 4}}
    return [get_task_class(n).Config(**small.get(n, {})) for n in names]


def read_answer(hist):
    """(prompt text, the answer) read off the text of `hist` (the query after any demonstrations)."""
    text = bytes(t for t in hist if t < 256).decode().split("\n")[-1]
    for marker, start, solve in SOLVE:
        if marker in text:
            text = text[text.index(start):]
            m = re.search(r"(They are|\? \w+ is| Value:)", text)
            prompt = text[:text.index(m.group(1)) + len(m.group(1))] if m else text
            return prompt, solve(None, prompt)[1], text
    raise AssertionError(text)


def reader(hist):
    prompt, answer, text = read_answer(hist)
    given = text[len(prompt):]
    return ord(answer[len(given)]) if len(given) < len(answer) else None


def run(cfg, lengths, model=None, max_positions=None, **kw):
    _, run_cfg = small_model("rope", seq_len=128, **kw)
    target = target_for(run_cfg, lengths, seed=1)
    target.max_positions = max_positions
    ev = LongContext(cfg, target)
    return ev, ev.run(session_for(model or ScriptedModel(257, reader)))


def test_a_reader_scores_every_fitting_cell_and_has_an_open_ended_effective_length():
    ev, res = run(LongContextConfig(tasks=task_cfgs(), n_samples=2, depths=[0.0, 1.0]), [128, 256, 512])
    assert list(res["families"]) == FAMILIES and res["asked_as"] == "given"
    assert ev.work() == sum(2 * 3 * (2 if get_task_class(n).depth_controlled else 1) for n in FAMILIES)
    for name, fam in res["families"].items():
        for c in fam["cells"]:
            assert c["accuracy"] == 1.0 and c["tokens_mean"] == c["length"], (name, c)  # exact_length
            assert c["commonest"] == 0.0 and c["baseline"] == c["chance"] < 1e-3  # unique answers
        assert fam["effective"]["length"] == 512 and fam["effective"]["limit"].startswith("passes at every")
    assert res["families"]["niah_multikey"]["guess_by_length"]["256"] == pytest.approx(1 / 3)
    assert res["mean"]["effective"]["length"] == 512
    md = LongContext.markdown(res)
    assert "| niah_multikey | >= 512 | 100.0% | 128 |" in md and f"| {MEAN} | >= 512 |" in md
    assert "### kv_retrieval: length x depth" in md and "### common_words" not in md  # no depth axis there


def test_a_model_that_fails_past_a_prompt_size_gets_that_effective_length():
    def short_reader(hist):
        return reader(hist) if len(hist) <= 300 else ord("?")
    _, res = run(LongContextConfig(tasks=task_cfgs(["kv_retrieval", "variable_tracking"]), n_samples=2,
                                   depths=[0.5]), [128, 256, 512, 1024], ScriptedModel(257, short_reader))
    for fam in res["families"].values():
        assert [fam["by_length"][str(L)] for L in (128, 256, 512, 1024)] == [1.0, 1.0, 0.0, 0.0]
        assert fam["effective"]["length"] == 256 and fam["effective"]["limit"].startswith("512 tokens scores 0.0%")
    assert LongContext.effective_text(res["mean"]["effective"]) == "256"


def test_a_first_needle_copier_scores_the_share_of_examples_whose_asked_needle_comes_first():
    def first_value(hist):
        text = bytes(t for t in hist if t < 256).decode()
        q = text.rindex("? ")
        value = " " + re.search(r" is (\d+)\.", text).group(1)
        given = text[text.index(" is", q + 2) + 3:]
        return ord(value[len(given)]) if len(given) < len(value) else None
    cfg = LongContextConfig(tasks=task_cfgs(["niah_multikey"]), n_samples=6, depths=[0.0, 0.5, 1.0])
    ev, res = run(cfg, [256], ScriptedModel(257, first_value))
    grid = ev.grids["niah_multikey"]
    for c in res["families"]["niah_multikey"]["cells"]:
        firsts = 0
        for i in range(6):
            units = grid.fit(i, 256, c["depth"])[3]
            points = list(grid.make_example(i, units, c["depth"], grid.target.seed).info["needle_points"].values())
            firsts += points[0] <= min(points[1:])  # the asked needle goes first where points tie
        assert c["correct"] == firsts, c
    cells = {c["depth"]: c for c in res["families"]["niah_multikey"]["cells"]}
    assert cells[0.0]["accuracy"] == 1.0 and cells[1.0]["accuracy"] < 0.5


def test_lengths_beyond_a_learned_table_are_na_and_end_the_effective_length():
    _, res = run(LongContextConfig(tasks=task_cfgs(["kv_retrieval"]), n_samples=2, depths=[0.5]), [128, 256, 512],
                 max_positions=256)
    fam = res["families"]["kv_retrieval"]
    assert fam["by_length"]["512"] is None and fam["effective"]["length"] == 256
    assert fam["effective"]["limit"] == "512 tokens is n/a: the PE represents at most 256 positions"


def test_few_shot_demonstrations_count_inside_every_length():
    ev, res = run(LongContextConfig(tasks=task_cfgs(["kv_retrieval"]), n_samples=2, depths=[0.5], shots=2),
                  [160, 256])
    grid = ev.grids["kv_retrieval"]
    ids, answer, _, _ = grid.fit(0, 256, 0.5)
    text = bytes(ids[1:]).decode()
    assert text.count("\n") == 2 and text.count(" Key: ") == 3  # two solved demonstrations, then the query
    cells = res["families"]["kv_retrieval"]["cells"]
    assert all(c["tokens_mean"] <= c["length"] and c["accuracy"] == 1.0 for c in cells)
    assert "2-shot (demonstrations inside every length)" in LongContext.markdown(res)


def test_a_checkpoint_pretrained_with_families_is_asked_those_with_its_options():
    mix = ["data.mix.tasks=[{name: niah_multikey, value_digits: 3}, {name: reverse}]", "data.mix.ratio=0.2"]
    _, run_cfg = small_model("rope", *mix, seq_len=128)
    ev = LongContext(LongContextConfig(n_samples=1), target_for(run_cfg, [128]))
    assert list(ev.grids) == ["niah_multikey"] and ev.grids["niah_multikey"].task.cfg.value_digits == 3
    assert ev.asked_as == "mix"
    plain = LongContext(LongContextConfig(n_samples=1), target_for(small_model("rope", seq_len=128)[1], [128]))
    assert list(plain.grids) == families() and plain.asked_as == "defaults"


def test_suite_is_registered_in_all_and_checks_its_options():
    assert "long_context" in ALL and isinstance(EvalConfig().long_context, LongContextConfig)
    with pytest.raises(ConfigError, match="reverse is not a long-context family"):
        LongContextConfig(tasks=[get_task_class("reverse").Config()])
    with pytest.raises(ConfigError, match="keep in"):
        LongContextConfig(keep=1.5)


def test_comparison_and_plots(tmp_path):
    _, a = run(LongContextConfig(tasks=task_cfgs(["niah_single", "common_words"]), n_samples=1, depths=[0.0, 1.0]),
               [128, 256])
    text = LongContext.comparison({"rope": a, "alibi": a})
    assert "| niah_single | >= 256 | >= 256 |" in text and "common_words: exact match by length" in text
    paths = LongContext.plots({"rope": a, "alibi": a}, tmp_path)
    assert [p.name for p in paths] == ["long_context_niah_single_heatmap.png", "long_context_common_words_heatmap.png"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_load_config_accepts_the_families_in_the_mix():
    cfg = load_config(overrides=["data.mix.tasks=[{name: frequent_words, alpha: 1.5}, {name: kv_retrieval}]"])
    assert [t.name for t in cfg.data.mix.tasks] == ["frequent_words", "kv_retrieval"]
    assert cfg.data.mix.tasks[0].alpha == 1.5


def test_exact_length_pads_after_bos_and_batches_a_cell():
    cfg = LongContextConfig(tasks=task_cfgs(["niah_single"]), n_samples=4, depths=[0.0])
    model = ScriptedModel(257, reader)
    ev, res = run(cfg, [256], model)
    grid = ev.grids["niah_single"]
    ids, _, n_new, units = grid.fit(0, 256, 0.0)
    plain = LongContext(LongContextConfig(tasks=task_cfgs(["niah_single"]), n_samples=4, depths=[0.0],
                                          exact_length=False), ev.target).grids["niah_single"].fit(0, 256, 0.0)
    assert len(ids) + n_new == 256 and plain[3] == units and len(plain[0]) < len(ids)
    pad = bytes(ids[1:len(ids) - len(plain[0]) + 1]).decode()
    assert ids[len(ids) - len(plain[0]) + 1:] == plain[0][1:] and pad.endswith(" ")  # whole words, then the prompt
    assert model.calls[0] == (4, 256 - n_new)  # the cell's four prompts in one forward pass


def test_more_shots_than_any_length_holds_are_refused_before_they_are_built():
    """shots=1e9 built demonstrations until memory ran out; now the family stops once they exceed the longest
    length (each demonstration is tens of tokens: a few fit in 256, a billion do not)."""
    with pytest.raises(ConfigError, match=r"long_context.shots=1000000000: \d+ demonstrations of kv_retrieval already "
                                          r"take [\d,]+ tokens, the longest length evaluated \(256\)"):
        run(LongContextConfig(tasks=task_cfgs(["kv_retrieval"]), n_samples=2, depths=[0.5], shots=10 ** 9),
            [160, 256])


def test_one_needle_has_no_question_blind_pick_beside_its_scores():
    """Item 8: single-needle NIAH read "0.0% (baseline 0.0%, guess 100.0%)": a question-blind pick among
    the context's candidates is certain when the context holds one candidate (finding it is the whole task), so it
    is no chance level. The report says so instead of a 100% baseline; multi-key NIAH keeps its 1/keys pick."""
    _, res = run(LongContextConfig(tasks=task_cfgs(["niah_single", "niah_multikey"]), n_samples=2, depths=[0.5]),
                 [128], model=ScriptedModel(257, lambda hist: None))
    assert res["families"]["niah_single"]["guess_by_length"]["128"] == 1.0  # the measure itself: one candidate
    md = LongContext.markdown(res)
    assert "guess 100.0%" not in md and "100.0%" not in md.split("| niah_single |")[2].splitlines()[0]
    assert "question-blind pick n/a (one candidate in the context)" in md
    assert "question-blind pick 33.3%" in md  # niah_multikey with 3 keys
