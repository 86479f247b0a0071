"""The algorithmic evaluator scores a scripted model that always answers right at 100% and one that
answers wrong at 0%, on every task, ID and OOD, zero- and few-shot; a learned PE gives n/a cells for
prompts beyond its table."""

import pytest

from posbench.data.tasks import get_task_class, task_names
from posbench.evaluation.suites.algorithmic import Algorithmic, AlgorithmicConfig
from tests.evaluation.helpers import BYTES, ScriptedModel, session_for, small_model, target_for

SEED, N = 3, 3
# the two long-context tasks at small sizes: this test is about scoring, not about haystack length
SMALL = {"needle": {"id_range": (8, 24), "ood_range": (30, 40)}, "passkey": {"context": 64}}


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
        for seq, token in by_tail.get(tuple(hist[-8:]), []):
            if hist[-len(seq):] == seq:
                return token
        return None
    return rule


@pytest.mark.parametrize("wrong,expected", [(False, 1.0), (True, 0.0)])
def test_scripted_right_and_wrong_models(wrong, expected):
    _, cfg = small_model("rope")
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
    ids, answer = ev.prompt(ev.tasks[0], "ood", 1, 5)
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
    for cell in (by[("id", 3)], by[("ood", 3)]):  # demonstrations push the prompt past 64 positions
        assert cell["tokens_max"] > 64
        assert cell["accuracy"] is None and cell["correct"] is None and "positions" in cell["na"]
    assert "n/a" in Algorithmic.markdown(result)


def test_always_yes_scores_the_commonest_answer_baseline_not_chance():
    """A balanced yes/no task's finite example set is rarely split in half: a model that answers "yes" to
    everything scores the share of "yes" answers, which each cell reports beside the per-token chance."""
    _, cfg = small_model("rope")
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
