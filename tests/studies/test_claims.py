"""Published orderings judged on per-seed values built by hand, where every CI is known in advance:
a constant per-seed difference d bootstraps to exactly [d, d]; alternating signs straddle 0."""

import pytest

from posbench.config_loader import ConfigError, from_dict
from posbench.studies.claims import ClaimConfig, judge, parse_order, verdict
from posbench.studies.study_spec import StudyConfig

SEEDS = range(5)


def by_seed(values):
    return dict(zip(SEEDS, values))


def const(v):
    return by_seed([v] * 5)


def test_parse_order():
    assert parse_order("none >= t5 > alibi > rope ~ learned") == (
        ["none", "t5", "alibi", "rope", "learned"], [">=", ">", ">", "~"])
    assert parse_order("rope>alibi~0") == (["rope", "alibi", "0"], [">", "~"])
    for bad in ("rope", "rope >", "> rope", "rope >> alibi", "rope > (alibi)", "1 > 0"):
        with pytest.raises(ConfigError, match="claim order"):
            parse_order(bad)


def test_each_relation_against_known_intervals():
    base = by_seed([0.50, 0.60, 0.55, 0.40, 0.45])
    by_pe = {"up": {s: v + 0.1 for s, v in base.items()}, "same": dict(base), "base": base,
             "noisy": {s: v + (0.1 if s % 2 else -0.1) for s, v in base.items()},  # diffs -.1 .1 -.1 .1 -.1
             "down": {s: v - 0.1 for s, v in base.items()}}

    def holds(order):
        (r,) = judge(ClaimConfig(order), by_pe, 0.95, 2000)
        return r.diff, r.holds

    diff, ok = holds("up > base")
    assert diff.mean == pytest.approx(0.1) and diff.lo == pytest.approx(0.1) and diff.hi == pytest.approx(0.1)
    assert ok
    assert holds("up >= base")[1] and not holds("up ~ base")[1]
    assert holds("same ~ base")[1] and holds("same >= base")[1] and not holds("same > base")[1]
    assert not holds("down >= base")[1] and not holds("down > base")[1] and not holds("down ~ base")[1]
    diff, ok = holds("noisy ~ base")
    assert diff.lo < 0 < diff.hi and ok and holds("noisy >= base")[1] and not holds("noisy > base")[1]


def test_constants_and_the_verdict_line():
    by_pe = {"rope": const(0.8), "alibi": by_seed([0.01, -0.01, 0.02, -0.02, 0.0]), "sin": const(0.9)}
    rels = judge(ClaimConfig("sin > rope > alibi ~ 0"), by_pe, 0.95, 2000)
    assert [r.holds for r in rels] == [True, True, True] and verdict(rels) == "reproduced"
    rels = judge(ClaimConfig("rope > sin ~ alibi"), by_pe, 0.95, 2000)
    assert [r.holds for r in rels] == [False, False]
    line = verdict(rels, pct=False, unit="ppl/doubling")
    assert line.startswith("not reproduced: `rope > sin` fails (rope - sin = -0.100 [-0.100, -0.100] ppl/doubling)")
    assert "`sin ~ alibi` fails" in line
    one_seed = {"a": {0: 1.0}, "b": {0: 0.0}}
    assert verdict(judge(ClaimConfig("a > b"), one_seed, 0.95, 2000)).startswith("undecided")


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
