"""Published orderings judged on per-seed values built by hand, where every interval is known in advance:
a constant per-seed difference d has the t-interval [d, d] (and is decided by the exact sign-flip test, which
needs 6 seeds: hence 6 here); alternating signs straddle 0."""

import pytest

from posbench.config_loader import from_dict
from posbench.errors import ConfigError, DataError
from posbench.studies.claims import ClaimConfig, check_claims, claims_section, judge, parse_order, verdict
from posbench.studies.study_spec import StudyConfig

SEEDS = range(6)


def by_seed(values):
    return dict(zip(SEEDS, values))


def const(v):
    return by_seed([v] * 6)


def test_parse_order():
    assert parse_order("none >= t5 > alibi > rope ~ learned") == (
        ["none", "t5", "alibi", "rope", "learned"], [">=", ">", ">", "~"])
    assert parse_order("rope>alibi~0") == (["rope", "alibi", "0"], [">", "~"])
    for bad in ("rope", "rope >", "> rope", "rope >> alibi", "rope > (alibi)", "1 > 0"):
        with pytest.raises(ConfigError, match="claim order"):
            parse_order(bad)


def test_each_relation_against_known_intervals():
    base = by_seed([0.50, 0.60, 0.55, 0.40, 0.45, 0.52])
    by_pe = {"up": {s: v + 0.1 for s, v in base.items()}, "same": dict(base), "base": base,
             "noisy": {s: v + (0.1 if s % 2 else -0.1) for s, v in base.items()},  # diffs -.1 .1 -.1 .1 -.1 .1
             "down": {s: v - 0.1 for s, v in base.items()}}

    def state(order, margin=None):
        (r,) = judge(ClaimConfig(order, margin=margin), by_pe, 0.95, 2000)
        return r.diff, r.holds

    diff, ok = state("up > base")
    assert diff.mean == pytest.approx(0.1) and diff.lo == pytest.approx(0.1) and diff.hi == pytest.approx(0.1)
    assert ok is True
    assert state("up >= base")[1] is True
    assert state("up ~ base")[1] is False  # 10 points apart on every seed: outside the 2-point margin
    assert state("up ~ base", margin=0.2)[1] is True
    assert state("same ~ base")[1] is True and state("same >= base")[1] is True
    assert state("same > base")[1] is None  # exactly equal: not shown, not refuted
    assert state("down >= base")[1] is False and state("down > base")[1] is False and state("down ~ base")[1] is False
    diff, ok = state("noisy ~ base")
    # the interval straddles 0 and is 25 points wide: that is no evidence of sameness, nor of a difference
    assert diff.lo < 0 < diff.hi and ok is None
    assert state("noisy >= base")[1] is None and state("noisy > base")[1] is None
    assert state("noisy ~ base", margin=0.5)[1] is True  # inside a margin that wide it is shown


def test_constants_and_the_verdict_line():
    by_pe = {"rope": const(0.8), "alibi": by_seed([0.01, -0.01, 0.02, -0.02, 0.0]), "sin": const(0.9)}
    rels = judge(ClaimConfig("sin > rope > alibi ~ 0", margin=0.05), by_pe, 0.95, 2000)
    assert [r.holds for r in rels] == [True, True, True] and verdict(rels) == "reproduced"
    rels = judge(ClaimConfig("rope > sin ~ alibi"), by_pe, 0.95, 2000)
    assert [r.holds for r in rels] == [False, False]
    line = verdict(rels, pct=False, unit="ppl/doubling")
    assert line.startswith("not reproduced: `rope > sin` refuted (rope - sin = -0.100 [-0.100, -0.100] ppl/doubling)")
    assert "`sin ~ alibi` refuted" in line
    one_seed = {"a": {0: 1.0}, "b": {0: 0.0}}
    assert verdict(judge(ClaimConfig("a > b"), one_seed, 0.95, 2000)).startswith("inconclusive: one seed")
    wide = {"a": by_seed([0.9, 0.5, 0.7, 0.3, 0.6]), "b": by_seed([0.5, 0.6, 0.4, 0.5, 0.5])}
    line = verdict(judge(ClaimConfig("a > b"), wide, 0.95, 2000))
    assert line.startswith("inconclusive: `a > b` neither shown nor refuted") and "seeds would decide it" in line


def test_a_report_judges_its_claims_as_one_family():
    # each relation alone is shown (p about 0.01-0.03), but Holm over six relations is not satisfied by all
    by_pe = {"a": by_seed([0.62, 0.55, 0.60, 0.58, 0.66]), "b": by_seed([0.50, 0.51, 0.49, 0.52, 0.50])}
    (alone,) = judge(ClaimConfig("a > b"), by_pe, 0.95, 2000)
    assert alone.holds is True and alone.decision.p_shown < 0.05
    groups = {f"task{i}": by_pe for i in range(6)}
    checks, size = check_claims([(ClaimConfig("a > b"), groups, True, "pts")], 0.95, 2000)
    assert size == 6
    adjusted = checks[0].relations[0]
    assert adjusted.p_shown_adj == pytest.approx(min(1.0, 6 * alone.decision.p_shown))
    assert (adjusted.holds is True) == (6 * alone.decision.p_shown < 0.05)
    assert "Holm over the 6 relations" in claims_section([ClaimConfig("a > b")], groups, 0.95, 2000)


def test_margins_are_required_where_no_default_exists():
    with pytest.raises(ConfigError, match="need a margin"):
        ClaimConfig("a ~ b", metric="something_new")
    with pytest.raises(ConfigError, match="margin"):
        ClaimConfig("a > b", margin=-1.0)
    assert ClaimConfig("a > b", metric="something_new").effective_margin is None  # `>` needs none
    assert ClaimConfig("a ~ b").effective_margin == 0.02
    assert ClaimConfig("a ~ b", metric="ppl_slope").effective_margin == 0.05


def test_a_claim_naming_what_the_study_lacks_stops_before_any_work():
    base = {"tasks": [{"name": "simple_copy"}], "pes": [{"name": "rope"}, {"name": "alibi"}, {"name": "none"}]}
    with pytest.raises(ConfigError, match="unknown PE `alibbi` \\(did you mean `alibi`\\?\\)"):
        from_dict(StudyConfig, {**base, "claims": [{"order": "none > alibbi"}]})
    with pytest.raises(ConfigError, match="unknown task `revers`"):
        from_dict(StudyConfig, {**base, "claims": [{"order": "none > alibi", "tasks": ["revers"]}]})
    with pytest.raises(ConfigError, match="metric `ood_accuracy` is not one of"):
        from_dict(StudyConfig, {**base, "claims": [{"order": "none > alibi", "metric": "ood_accuracy"}]})
    study = from_dict(StudyConfig, {**base, "claims": [{"order": "none >= alibi > rope ~ 0.5"}]})
    assert study.claims[0].names == ["none", "alibi", "rope"]


@pytest.mark.parametrize("order", ["rope > rope", "rope >= rope", "rope > alibi > rope", "rope ~ 0 ~ rope"])
def test_item13_a_claim_naming_a_pe_twice_is_refused(order):
    """Item 13: a sweep claim `rope > rope` was accepted and judged (a PE against itself)."""
    with pytest.raises(ConfigError, match="`rope` named twice"):
        parse_order(order)
    with pytest.raises(ConfigError, match="`rope` named twice"):
        from_dict(ClaimConfig, {"order": order}, "claim")


def test_item2_a_claim_on_a_value_that_is_not_a_finite_number_is_refused_not_judged():
    """Item 2: NaN per-seed differences were judged (as p = 1.0)."""
    by_pe = {"a": const(0.9), "b": {**const(0.5), 3: float("nan")}}
    with pytest.raises(DataError, match="nan, not a finite number"):
        judge(ClaimConfig("a > b"), by_pe, 0.95, 2000)
    with pytest.raises(DataError, match="'x', not a number"):
        judge(ClaimConfig("a > 0.5"), {"a": {**const(0.9), 0: "x"}}, 0.95, 2000)
