"""The arithmetic tasks against hand-built examples: the token forms (reversed operands and result, reversed result
only, as written, index hints), the digit place ids each token carries, and the rule that gives the ids of
answer tokens while they are generated."""

import numpy as np
import pytest

from posbench.data.tasks import build_task, get_task_class
from posbench.data.tasks.source import pad_positions, pad_rows
from posbench.errors import ConfigError
from posbench.targets import IGNORE


def task(name="addition", **kw):
    return build_task(get_task_class(name).Config(**kw))


def syms(t, ex):
    return t.vocab.decode(ex.tokens_T)


def test_reversed_addition_by_hand():
    t = task()
    ex = t.render(123, 45)  # 123 + 45 = 168
    assert syms(t, ex) == list("321+54=861") + ["<end>"]
    assert (ex.prompt, ex.answer) == ("321+54=", " 861")  # text: the answer after a space, as every task
    assert ex.positions_T.tolist() == [1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 0]
    want = np.full(11, IGNORE)
    want[6:10] = t.vocab.ids(["8", "6", "1", "<end>"])  # predicted from `=` and the answer digits
    assert ex.targets_T.tolist() == want.tolist()
    assert ex.info["digits"] == 3


def test_a_carry_into_a_new_digit_gets_the_next_place():
    t = task()
    ex = t.render(99, 7)  # 99 + 7 = 106
    assert syms(t, ex) == list("99+7=601") + ["<end>"]
    assert ex.positions_T.tolist() == [1, 2, 0, 1, 0, 1, 2, 3, 0]


def test_only_the_result_reversed():
    t = task(reverse="answer")
    ex = t.render(123, 45)
    assert syms(t, ex) == list("123+45=861") + ["<end>"]
    # coupled ids: digits of equal significance share one (the hundreds of 123 and of 168 both 3)
    assert ex.positions_T.tolist() == [3, 2, 1, 0, 2, 1, 0, 1, 2, 3, 0]


def test_as_written_has_no_ids_because_the_answer_places_are_unknown_while_generating():
    t = task(reverse="none")
    ex = t.render(123, 45)
    assert syms(t, ex) == list("123+45=168") + ["<end>"]
    assert ex.positions_T is None and t.answer_positions([1, 2]) is None


def test_the_coupling_format_pads_operands_and_result_with_zeros():
    # Cho et al. 2024's main format (HanseulJo/position-coupling, configs/task/addition_coupled.yaml: padding, the
    # result reversed): 123 + 45 -> "123+045=8610", ids as their AdditionDatasetWithCoupledPositions gives them with
    # start 0: operand digits start + place counted from the least significant, `+` and `=` at start, the result's
    # digits start + 1.. in written (reversed) order; the padded carry place 4 belongs to the result only
    t = task(reverse="answer", pad=True)
    ex = t.render(123, 45)
    assert syms(t, ex) == list("123+045=8610") + ["<end>"]
    assert (ex.prompt, ex.answer) == ("123+045=", " 8610")
    assert ex.positions_T.tolist() == [3, 2, 1, 0, 3, 2, 1, 0, 1, 2, 3, 4, 0]
    assert t.answer_positions(t.vocab.ids(list("8610") + ["<end>"])) == [1, 2, 3, 4, 0]
    assert ex.info["digits"] == 3
    # the same padding in the all-reversed format, and a carry filling the padded place
    t = task(pad=True)
    ex = t.render(99, 7)  # 99 + 07 = 106
    assert syms(t, ex) == list("99+70=601") + ["<end>"]
    assert ex.positions_T.tolist() == [1, 2, 0, 1, 2, 0, 1, 2, 3, 0]


def test_padding_keeps_the_value_and_the_row_bound():
    t = task(reverse="answer", pad=True, id_range=(1, 6), ood_range=(7, 12))
    rng = np.random.default_rng(0)
    for split in ("id", "ood"):
        for _ in range(200):
            ex = t.generate(rng, split)
            a, b = ex.prompt[:-1].split("+")
            assert len(a) == len(b) and len(ex.answer) - 1 == len(a) + 1
            assert int(ex.answer[::-1]) == int(a) + int(b)  # the reversed padded result reads as the sum
            assert len(ex.tokens_T) <= t.max_tokens(split)


def test_index_hints_mark_each_digit_with_its_place():
    t = task(index_hints=True)
    ex = t.render(123, 45)
    assert syms(t, ex) == ["a", "3", "b", "2", "c", "1", "+", "a", "5", "b", "4", "=",
                           "a", "8", "b", "6", "c", "1", "<end>"]
    assert ex.positions_T.tolist() == [1, 1, 2, 2, 3, 3, 0, 1, 1, 2, 2, 0, 1, 1, 2, 2, 3, 3, 0]
    written = task(index_hints=True, reverse="none").render(123, 45)
    assert "".join(syms(t, written)[:12]) == "c1b2a3+b4a5="  # each hint stays before its digit


def test_multiplication_by_hand():
    t = task("multiplication")
    ex = t.render(123, 45)  # 123 * 45 = 5535
    assert syms(t, ex) == list("321*54=5355") + ["<end>"]
    assert ex.positions_T.tolist() == [1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 0]


@pytest.mark.parametrize("kw", [{}, {"reverse": "answer"}, {"index_hints": True}, {"name": "multiplication"}])
def test_the_answer_rule_gives_the_ids_the_examples_carry(kw):
    """What decoding feeds (answer_positions over the tokens generated so far) is what training saw."""
    t = task(kw.pop("name", "addition"), **kw)
    for split in ("train", "ood"):
        for i in range(30):
            ex = t.example(0, i, split)
            n_prompt = int(np.argmax(ex.targets_T != IGNORE)) + 1  # the first target is the first answer token
            answer = ex.tokens_T[n_prompt:].tolist()
            assert t.answer_positions(answer) == ex.positions_T[n_prompt:].tolist()
            for k in range(1, len(answer)):  # a prefix's ids do not depend on what follows
                assert t.answer_positions(answer[:k]) == ex.positions_T[n_prompt:n_prompt + k].tolist()
            assert len(ex.tokens_T) <= t.max_tokens(split)
            n = ex.info["digits"]
            lo, hi = t.cfg.split_range(split)
            assert lo <= n <= hi


def test_results_are_right():
    t = task()
    for i in range(50):
        ex = t.example(3, i, "ood")
        a, b = ex.prompt[:-1].split("+")
        assert int(a[::-1]) + int(b[::-1]) == int(ex.answer[::-1])


def test_rows_carry_the_ids_padded_with_zero_and_text_rows_carry_none():
    t = task()
    examples = [t.example(0, i, "id") for i in range(4)]
    rows = pad_rows(examples, 40)
    x, y = rows  # still the pair every reader unpacks
    assert rows.positions.shape == x.shape == (4, 40)
    for b, ex in enumerate(examples):
        n = len(ex.tokens_T)
        assert rows.positions[b, :n].tolist() == ex.positions_T.tolist()
        assert (rows.positions[b, n:] == 0).all()
    assert pad_positions([task("reverse").example(0, 0, "id")], 20) is None


def test_bad_configs_say_what_to_change():
    with pytest.raises(ConfigError, match="index_hints name at most 52 places"):
        task(index_hints=True, ood_range=(6, 60))
    with pytest.raises(ConfigError, match="ood_range"):
        task(id_range=(1, 5), ood_range=(3, 8))
