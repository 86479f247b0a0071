"""The algorithmic evaluator scores a scripted model that always answers right at 100% and one that
answers wrong at 0%, on every task, ID and OOD, zero- and few-shot; a learned PE gives n/a cells for
prompts beyond its table; ID prompts stay inside the training length (demonstrations chosen to fit, cells that
cannot fit n/a with their reason); chance is counted per whole answer; the plot says "no correct answers"."""

import pytest

from posbench.data.tasks import get_task_class, task_names
from posbench.evaluation.suites.algorithmic import Algorithmic, AlgorithmicConfig
from tests.evaluation.helpers import BYTES, ScriptedModel, session_for, small_model, target_for

SEED, N = 3, 3
ROOMY = 8192  # a training length every prompt of these tests fits in, demonstrations included
# the long-context tasks (and mqar: 1,024 tokens at 64 pairs) at small sizes: this test is about scoring, not length
SMALL = {"needle": {"id_range": (8, 24), "ood_range": (30, 40)}, "passkey": {"context": 64},
         "mqar": {"id_range": (2, 3), "ood_range": (4, 5), "vocab_size": 16, "tokens_per_pair": 6}}


def configs():
    return [get_task_class(name).Config(**SMALL.get(name, {})) for name in task_names()]


def answer_key(tasks):
    """(prompt ids, answer ids) of every question the evaluator may ask: examples 0..N-1 of each split,
    drawn here from the generators and tokenized by hand (bytes)."""
    key = []
    for cfg in tasks:
        task = get_task_class(cfg.name)(cfg)
        for split in ("id", "ood"):
            for i in range(N):
                ex = task.example(SEED, i, split)
                key.append((list(ex.prompt.encode()), list(ex.answer.encode())))
    return key


def oracle(key, wrong: bool):
    """Next token: the answer's next byte when the history ends with a known prompt plus the part of its
    answer given so far (whatever demonstrations come before), shifted by one when `wrong`."""
    by_tail = {}  # the last 8 tokens of (prompt + answer so far) -> candidates, so a step is a lookup
    for prompt, answer in key:
        for k in range(len(answer)):
            seq = prompt + answer[:k]
            by_tail.setdefault(tuple(seq[-8:]), []).append((seq, (answer[k] + wrong) % 256))

    def rule(hist):
        for n in range(8, 0, -1):  # a sequence shorter than 8 (`7*6=`) is keyed by all of it: longest match first
            for seq, token in by_tail.get(tuple(hist[-n:]), []):
                if hist[-len(seq):] == seq:
                    return token
        return None
    return rule


@pytest.mark.parametrize("wrong,expected", [(False, 1.0), (True, 0.0)])
def test_scripted_right_and_wrong_models(wrong, expected):
    _, cfg = small_model("rope", seq_len=ROOMY)
    tasks = configs()
    ev = Algorithmic(AlgorithmicConfig(tasks=tasks, n_examples=N, shots=[0, 2]), target_for(cfg, [64], seed=SEED))
    model = ScriptedModel(257, oracle(answer_key(tasks), wrong))
    result = ev.run(session_for(model))
    cells = result["cells"]
    assert {c["task"] for c in cells} == set(task_names())
    assert {(c["split"], c["shots"]) for c in cells} == {("id", 0), ("id", 2), ("ood", 0), ("ood", 2)}
    assert len(cells) == len(task_names()) * 4
    for c in cells:
        assert c["accuracy"] == expected, (c["task"], c["split"], c["shots"], c["samples"][:1])
        assert c["correct"] == expected * N and c["n_na"] == 0
    assert all(s["output"] == s["answer"] for s in cells[0]["samples"]) != wrong
    # few-shot prompts carry their demonstrations
    by = {(c["task"], c["split"], c["shots"]): c for c in cells}
    assert by[("reverse", "id", 2)]["tokens_mean"] > by[("reverse", "id", 0)]["tokens_mean"]
    md = Algorithmic.markdown(result)
    assert f"| reverse | {100 * expected:.1f}% |" in md


def test_prompt_starts_with_bos_and_ends_with_the_query():
    _, cfg = small_model("rope")
    task_cfg = get_task_class("sort").Config()
    ev = Algorithmic(AlgorithmicConfig(tasks=[task_cfg], shots=[0, 1]), target_for(cfg, [64], seed=SEED))
    task = get_task_class("sort")(task_cfg)
    built = ev.prompt(ev.tasks[0], "ood", 1, 5)
    ids, answer, passed = built.ids, built.answer, built.passed_over
    assert built.positions is None  # a rope checkpoint: no data ids
    assert passed == 0  # OOD prompts are never trimmed
    query = task.example(SEED, 5, "ood")
    assert ids[0] == BYTES.bos_id and answer == query.answer
    assert bytes(ids[-len(query.prompt):]).decode() == query.prompt
    demo = bytes(ids[1:-len(query.prompt)]).decode()
    assert demo.endswith("\n") and demo.startswith("Sort") and query.prompt not in demo


def test_learned_pe_beyond_its_table_gives_na_cells():
    model, cfg = small_model("learned", seq_len=64)
    ev = Algorithmic(AlgorithmicConfig(tasks=[get_task_class("reverse").Config()], n_examples=4, shots=[0, 3]),
                     target_for(cfg, [64], seed=SEED))
    result = ev.run(session_for(model))
    by = {(c["split"], c["shots"]): c for c in result["cells"]}
    fits = by[("id", 0)]  # "Reverse the letters: a b c ->" + answer: at most ~45 bytes
    assert fits["tokens_max"] <= 64 and fits["accuracy"] is not None and fits["na"] is None
    cell = by[("ood", 3)]  # demonstrations push the prompt past 64 positions
    assert cell["tokens_max"] > 64
    assert cell["accuracy"] is None and cell["correct"] is None and "positions" in cell["na"]
    # in distribution, three demonstrations do not fit beside the query in 64 tokens: n/a, said so
    assert by[("id", 3)]["accuracy"] is None and "cannot hold 3 demonstrations" in by[("id", 3)]["na"]
    md = Algorithmic.markdown(result)
    assert "- reverse ID 3-shot: n/a, 4 of 4 prompts cannot hold 3 demonstrations" in md
    assert "- reverse OOD 3-shot: n/a, 4 of 4 prompts need more positions than the PE represents" in md


def test_always_yes_scores_the_commonest_answer_baseline_not_chance():
    """A balanced yes/no task's finite example set is rarely split in half: a model that answers "yes" to
    everything scores the share of "yes" answers, which each cell reports beside the per-token chance."""
    _, cfg = small_model("rope", seq_len=ROOMY)
    task_cfg = get_task_class("k_back").Config(k=1, ask="last")
    task, n = get_task_class("k_back")(task_cfg), 40
    answers = [task.example(SEED, i, "id").answer for i in range(n)]
    yes = next(a for a in answers if "yes" in a)
    by_hand = max(answers.count(a) for a in set(answers)) / n  # counted here from the generator
    assert by_hand != 0.5  # with 40 examples of this seed; otherwise the test could not tell the two apart
    ev = Algorithmic(AlgorithmicConfig(tasks=[task_cfg], n_examples=n, shots=[0], splits=["id"]),
                     target_for(cfg, [64], seed=SEED))
    said = list(yes.encode())

    def always_yes(hist):  # the next byte of " yes" after whatever part of it the history ends with
        return next((said[j] for j in (3, 2, 1) if hist[-j:] == said[:j]), said[0])
    model = ScriptedModel(257, always_yes)
    result = ev.run(session_for(model))
    cell = result["cells"][0]
    assert cell["most_common_answer_accuracy"] == pytest.approx(by_hand)
    assert cell["chance_per_token"] == 0.5
    assert cell["accuracy"] == pytest.approx(answers.count(yes) / n)
    assert f"| {100 * by_hand:.1f}% |" in Algorithmic.markdown(result)  # the report's commonest-answer column


def test_id_prompts_stay_inside_the_training_length():
    """nano's 128 tokens, bytes, every task at its default size, 0 and 3 shots: every ID prompt that is asked
    fits with its answer in 128 tokens (demonstrations are the first candidates that fit), and an ID cell that
    cannot fit is n/a and says why; the k-shot demonstrations stay a prefix of the (k+1)-shot ones."""
    _, cfg = small_model("rope", seq_len=128)
    tasks = [get_task_class(name).Config() for name in task_names()]
    ev = Algorithmic(AlgorithmicConfig(tasks=tasks, n_examples=6, shots=[0, 3], splits=["id"]),
                     target_for(cfg, [128], seed=SEED))
    result = ev.run(session_for(ScriptedModel(257, lambda hist: None)))
    measured = [c for c in result["cells"] if c["na"] is None]
    assert measured and {c["shots"] for c in measured} == {0, 3}  # some 3-shot cells fit (no_carry_add, sort, ...)
    for c in result["cells"]:
        assert c["fits_in"] == 128
        if c["na"] is None:
            assert c["tokens_max"] <= 128 and c["accuracy"] is not None, c
        else:
            assert c["accuracy"] is None and (c["na"].startswith("not in distribution: ") or
                                              "cannot hold 3 demonstrations" in c["na"]), c
    by = {(c["task"], c["shots"]): c for c in result["cells"]}
    assert by[("passkey", 0)]["na"].startswith("not in distribution: 6 of 6 queries with their answers alone take ")
    md = Algorithmic.markdown(result)
    assert "ID prompts, answer included, stay inside the training length (128 tokens)" in md
    assert "- passkey ID 0-shot: n/a, not in distribution: 6 of 6 queries" in md
    assert "- sort ID 3-shot: n/a, 6 of 6 prompts cannot hold 3 demonstrations beside the query" in md


def test_id_demonstrations_are_the_first_candidates_that_fit():
    """At 160 tokens three sort demonstrations fit beside each query only if longer candidates are passed over:
    they are, counted, and the k-shot demonstrations stay a prefix of the (k+1)-shot ones."""
    _, cfg = small_model("rope", seq_len=160)
    ev = Algorithmic(AlgorithmicConfig(tasks=[get_task_class("sort").Config()], n_examples=6, shots=[0, 2, 3],
                                       splits=["id"]), target_for(cfg, [160], seed=SEED))
    result = ev.run(session_for(ScriptedModel(257, lambda hist: None)))
    cell = next(c for c in result["cells"] if c["shots"] == 3)
    assert cell["na"] is None and cell["tokens_max"] <= 160 and cell["demos_passed_over"] >= 1
    sort = ev.tasks[0]
    for i in range(6):
        two, three = ev.prompt(sort, "id", 2, i).ids, ev.prompt(sort, "id", 3, i).ids
        query = BYTES.encode(sort.example(SEED, i, "id").prompt)
        assert three[-len(query):] == query and two[:-len(query)] == three[:len(two) - len(query)]
        assert BYTES.decode(three[1:-len(query)]).count("\n") == 3


def test_chance_is_counted_per_whole_answer():
    """Beside exact match stands what uniform guessing scores on whole answers: the per-symbol chance to the power
    of the answer's symbols (counted here from the text), not the per-token chance."""
    _, cfg = small_model("rope", seq_len=ROOMY)
    tasks = [get_task_class("sort").Config(), get_task_class("long_range_match").Config()]
    ev = Algorithmic(AlgorithmicConfig(tasks=tasks, n_examples=5, shots=[0], splits=["id", "ood"]),
                     target_for(cfg, [64], seed=SEED))
    result = ev.run(session_for(ScriptedModel(257, lambda hist: None)))
    for c in result["cells"]:
        task = get_task_class(c["task"])(next(t for t in tasks if t.name == c["task"]))
        answers = [task.example(SEED, i, c["split"]).answer for i in range(5)]
        by_hand = sum(task.chance_accuracy ** len(a.split()) for a in answers) / 5  # sort: one digit per word
        assert c["chance_whole_answer"] == pytest.approx(by_hand) and c["chance_per_token"] == task.chance_accuracy
    lrm = next(c for c in result["cells"] if c["task"] == "long_range_match")
    assert lrm["chance_whole_answer"] == 0.5  # a one-word yes/no answer
    md = Algorithmic.markdown(result)
    assert "| ID chance (whole answer) | OOD chance (whole answer) |" in md and "chance/token" not in md
    assert "| 50.0% | 50.0% |" in md


def test_the_plot_says_no_correct_answers_and_draws_whole_answer_chance(monkeypatch, tmp_path):
    from posbench.evaluation import eval_plots

    texts, legends = [], []

    def keep(fig, path):
        for ax in fig.axes:
            texts.extend(t.get_text() for t in ax.texts)
            legend = ax.get_legend()
            legends.extend(t.get_text() for t in legend.get_texts()) if legend else None
        return path
    monkeypatch.setattr(eval_plots, "_save", keep)
    cells = [{"task": t, "split": s, "shots": 0, "accuracy": acc, "chance_whole_answer": 1e-4, "chance_per_token": 0.1}
             for t, acc in (("sort", 0.0), ("reverse", None)) for s in ("id", "ood")]
    Algorithmic.plots({"m": {"shots": [0], "splits": ["id", "ood"], "cells": cells}}, tmp_path)
    assert "no correct answers" in texts and texts.count("0") == 2 and texts.count("n/a") == 2
    assert "chance (whole answer)" in legends and not any("per token" in t for t in legends)
