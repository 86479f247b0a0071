"""Attention dispatch as a plan (model/attention_plan.py): the path chosen for each case of PE capability, grad
mode, training dropout, packing, window, device and length, written out by hand; kernels execute the plan and
read a PE's fast forms only from its FastBias, never from attributes of a score_mod."""

import re
from pathlib import Path

import pytest
import torch

from posbench.model import attention_plan, bias_attention, far_field
from posbench.model.attention_plan import AUTO_KERNEL, BIAS_PATHS, BiasCall, BiasPath, auto_kernel_name, plan_bias_call
from posbench.model.kernels import KERNELS, select_kernel
from posbench.model.packing import PackingConfig
from posbench.model.sdpa_bias_kernel import BlockedBiasKernel
from posbench.pe import PES
from tests.conftest import build_test_model

MODEL = Path(__file__).resolve().parents[2] / "src" / "posbench" / "model"


def call(bias="score", grad=False, dropout=False, documents=False, per_row=False, window=False, device="cpu",
         H=4, T=512, S=512, table_rows=None, far=False, rows=False, dense=False, sinks=False, far_start=0):
    """A BiasCall; `table_rows` None: the table serves every query."""
    asked = []

    def table():
        asked.append(1)
        return T if table_rows is None else table_rows

    c = BiasCall(bias, grad, dropout, documents, per_row, window, device, H, T, S, table, far_field=far,
                 rows_bias=rows, dense_grad=dense, sinks=sinks, far_start=lambda: far_start)
    return c, asked


ONE = dict(T=8, S=8)  # 4 x 8 x 8 bias floats: one block
LONG = dict(T=512, S=512)  # 2**20 floats a block: 4 x 512 x 512 is one block; 1,024 is not
LONGER = dict(T=1024, S=1024)
DECODE = dict(T=1, S=300)

CASES = [
    # (name, BiasCall fields, path)
    ("autograd", dict(grad=True), BiasPath.EAGER),
    ("autograd, sdpa_dense", dict(grad=True, dense=True), BiasPath.DENSE),
    ("autograd, sdpa_dense, documents, dropout", dict(grad=True, dense=True, documents=True, dropout=True),
     BiasPath.DENSE),
    ("autograd, sdpa_dense, sinks", dict(grad=True, dense=True, sinks=True), BiasPath.EAGER),
    ("autograd, sdpa_dense, CoPE's logits_mod", dict(grad=True, dense=True, bias="logits"), BiasPath.EAGER),
    ("no grad, sdpa_dense", dict(dense=True, **ONE), BiasPath.ONE_BLOCK_TABLE),
    ("training dropout", dict(dropout=True), BiasPath.EAGER),
    ("no bias", dict(bias="none"), BiasPath.EAGER),
    ("CoPE's logits_mod", dict(bias="logits"), BiasPath.EAGER),
    ("CoPE's logits_mod, no grad, documents", dict(bias="logits", documents=True), BiasPath.EAGER),
    ("documents", dict(documents=True, far=True), BiasPath.DOCUMENTS),
    ("documents with token features", dict(documents=True, per_row=True), BiasPath.DOCUMENTS),
    ("FoX's token features", dict(per_row=True, **ONE), BiasPath.PER_ROW),
    ("ALiBi decoding step", dict(far=True, **DECODE), BiasPath.ONE_BLOCK_TABLE),
    ("ALiBi short prompt", dict(far=True, **ONE), BiasPath.ONE_BLOCK_TABLE),
    ("ALiBi long prompt CPU", dict(far=True, **LONGER), BiasPath.FAR_FIELD),
    # one block by size (4 x 512^2 = BLOCK_ELEMENTS), but the far field skips the second chunk's future: cheaper
    ("ALiBi 512 tokens, priced", dict(far=True, **LONG), BiasPath.FAR_FIELD),
    ("T5 512 tokens, priced", dict(far=True, far_start=113, **LONG), BiasPath.FAR_FIELD),
    ("ALiBi 256 tokens, a tie keeps one block", dict(far=True, T=256, S=256), BiasPath.ONE_BLOCK_TABLE),
    ("ALiBi long prompt CUDA", dict(far=True, device="cuda", **LONGER), BiasPath.BLOCKED_TABLE),
    ("ALiBi long prompt window", dict(far=True, window=True, **LONGER), BiasPath.BLOCKED_TABLE),
    ("ALiBi short prompt window", dict(far=True, window=True, **ONE), BiasPath.BLOCKED_TABLE),
    ("ALiBi 255 queries, long keys", dict(far=True, T=255, S=5000), BiasPath.BLOCKED_TABLE),
    ("ALiBi 256 queries, long keys", dict(far=True, T=256, S=5000), BiasPath.FAR_FIELD),
    ("KERPLE long prompt (no far field)", dict(**LONGER), BiasPath.BLOCKED_TABLE),
    ("KERPLE one block", dict(**LONG), BiasPath.ONE_BLOCK_TABLE),
    ("FIRE before its threshold", dict(rows=True, **LONGER), BiasPath.BLOCKED_TABLE),
    ("FIRE across its threshold, one block", dict(rows=True, table_rows=3, **ONE), BiasPath.ONE_BLOCK_ROWS),
    ("FIRE across its threshold, long", dict(rows=True, table_rows=100, **LONGER), BiasPath.BLOCKED_ROWS),
    ("FIRE spread positions (no table)", dict(rows=True, table_rows=0, **LONGER), BiasPath.BLOCKED_ROWS),
    ("FIRE past its threshold, window", dict(rows=True, table_rows=0, window=True, **ONE), BiasPath.BLOCKED_ROWS),
    ("ALiBi spread positions (no table)", dict(far=True, table_rows=0, **LONGER), BiasPath.BLOCKED),
    ("ALiBi spread positions, one block", dict(far=True, table_rows=0, **ONE), BiasPath.BLOCKED),
    ("a bias with no fast form", dict(table_rows=0, **ONE), BiasPath.BLOCKED),
]


@pytest.mark.parametrize("fields,path", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_plan_of_each_case(fields, path):
    c, _ = call(**fields)
    assert plan_bias_call(c) is path


def test_every_path_is_some_cases_plan_and_has_one_line_saying_when():
    assert {c[2] for c in CASES} == set(BiasPath) == {rule.path for rule in BIAS_PATHS}
    for rule in (*BIAS_PATHS, *AUTO_KERNEL):
        assert rule.when and "\n" not in rule.when


def test_the_table_is_made_only_when_a_rule_needs_it():
    """Documents, per-row biases and the eager reference never make a distance table (a pass over the keys)."""
    for fields in (dict(grad=True), dict(documents=True), dict(per_row=True)):
        c, asked = call(**fields)
        plan_bias_call(c)
        assert asked == []
    c, asked = call(**LONGER)
    plan_bias_call(c)
    assert asked


def test_the_prices_by_hand():
    """model/bias_cost.py at 512 tokens, 4 heads (CALL_ENTRIES = 16,384 per SDPA call): one block hands SDPA all
    4 x 512 x 512 entries in one call; blocked runs one block of 512 rows (block_rows), the same; the far field two
    chunks of 256: the first its 256 x 256 causal keys, the second 256 near keys under the mask and 256 far ones at
    0.9, in two calls."""
    from posbench.model import bias_cost

    assert bias_cost.CALL_ENTRIES == 16384 and bias_cost.FAR_ENTRY == 0.9
    assert bias_cost.one_block(4, 512, 512) == 1_048_576 + 16_384
    assert bias_cost.blocked(4, 512, 512) == 1_048_576 + 16_384
    far = 4 * 256 * 256 + 16_384 + 4 * 256 * (256 + 0.9 * 256) + 2 * 16_384
    assert bias_cost.far(4, 512, 512, 0) == pytest.approx(far) == pytest.approx(809_369.6)
    # T5's far field from distance 113: the second chunk's near band is 112 + 256 keys, its far keys 144
    assert bias_cost.far(4, 512, 512, 113) == pytest.approx(4 * 256 * 256 + 16_384 + 4 * 256 * (112 + 256 + 0.9 * 144)
                                                            + 2 * 16_384)
    # 1,024 tokens: four blocks of 256 rows over 256, 512, 768, 1,024 keys; four far-field chunks, three with far keys
    assert bias_cost.blocked(4, 1024, 1024) == 4 * 256 * (256 + 512 + 768 + 1024) + 4 * 16_384
    assert bias_cost.far(4, 1024, 1024, 0) == pytest.approx(
        4 * 256 * (4 * 256 + 0.9 * (256 + 512 + 768)) + 7 * 16_384)


def test_the_cheapest_priced_path_runs_and_a_required_one_is_not_priced(monkeypatch):
    """Pricing one block above the rest moves a short ALiBi prompt to the far field's rival; a required path
    (documents) runs whatever the prices say."""
    from posbench.model import bias_cost

    c, _ = call(far=True, **ONE)
    assert plan_bias_call(c) is BiasPath.ONE_BLOCK_TABLE  # below far_field.MIN_QUERIES: blocked is its rival
    monkeypatch.setattr(bias_cost, "one_block", lambda H, T, S: float("inf"))
    assert plan_bias_call(c) is BiasPath.BLOCKED_TABLE
    monkeypatch.setattr(bias_cost, "blocked", lambda H, T, S: float("inf"))
    assert plan_bias_call(call(documents=True)[0]) is BiasPath.DOCUMENTS


def test_the_thresholds_are_read_where_they_are_named(monkeypatch):
    """BLOCK_ELEMENTS gates the one-block paths, far_field.MIN_QUERIES the far field: changing either moves the
    boundary, and the two are distinct names."""
    c, _ = call(far=True, **LONGER)
    assert plan_bias_call(c) is BiasPath.FAR_FIELD
    monkeypatch.setattr(far_field, "MIN_QUERIES", 2048)
    assert plan_bias_call(c) is BiasPath.BLOCKED_TABLE
    monkeypatch.setattr(bias_attention, "BLOCK_ELEMENTS", 4 * 1024 * 1024)
    assert plan_bias_call(c) is BiasPath.ONE_BLOCK_TABLE
    assert not hasattr(bias_attention, "MIN_ROWS") and not hasattr(far_field, "MIN_ROWS")


@pytest.mark.parametrize("name,device,kernel", [
    ("rope", "cpu", "sdpa"), ("rope", "cuda", "sdpa"), ("alibi", "cpu", "sdpa_bias"), ("alibi", "cuda", "flex"),
    ("fox", "cpu", "sdpa_bias"), ("fox", "cuda", "flex"), ("cope", "cpu", "eager"), ("cope", "cuda", "eager"),
    ("fire", "cpu", "sdpa_bias"), ("none", "cuda", "sdpa")])
def test_the_auto_kernel(name, device, kernel):
    assert auto_kernel_name(build_test_model(name).pe, device) == kernel


def test_supports_sees_the_packing():
    """flash_alibi refuses per-document positions without the document mask, in its own supports()."""
    pe = build_test_model("alibi").pe
    flash = KERNELS.get("flash_alibi")
    causal_doc = PackingConfig(mask="causal", positions="document")
    assert "per-document positions" in flash.supports(pe, "cuda", 0.0, causal_doc)
    assert "per-document positions" not in (flash.supports(pe, "cuda", 0.0,
                                                           PackingConfig(mask="document", positions="document")) or "")
    assert flash.supports(build_test_model("t5").pe, "cuda", 0.0) == "the PE is not ALiBi"
    with pytest.raises(Exception, match="per-document positions"):
        select_kernel("flash_alibi", pe, "cuda", packing=causal_doc)


def test_the_kernels_read_no_attribute_of_a_score_mod():
    """By construction: a bias PE's score_mod is a bare function, and no model file asks a score_mod for an
    attribute (getattr, hasattr or `score_mod.x`)."""
    for name in PES.names():
        pe = build_test_model(name).pe.layer_pe(0)
        mod = pe.score_mod(0, torch.arange(4.0), torch.arange(4.0), torch.zeros(1, 4, 4))
        assert mod is None or not vars(mod), name
    pattern = re.compile(r"(getattr|hasattr)\(\s*(score_mod|mod)\b|\b(score_mod|mod)\.[a-z_]+\b(?!\()")
    for path in MODEL.glob("*.py"):
        assert not pattern.search(path.read_text()), path.name


def test_the_kernel_executes_the_planned_path(monkeypatch):
    """A spy on the plan: BlockedBiasKernel runs exactly the path plan_bias_call returned."""
    from posbench.model import sdpa_bias_kernel

    seen = []
    real = attention_plan.plan_bias_call
    monkeypatch.setattr(sdpa_bias_kernel, "plan_bias_call", lambda c: seen.append(real(c)) or seen[-1])
    ran = []
    monkeypatch.setattr(BlockedBiasKernel, "PATHS", {
        path: (lambda self, *a, _p=path, _m=method: ran.append(_p) or _m(self, *a))
        for path, method in BlockedBiasKernel.PATHS.items()})
    pe = build_test_model("alibi").pe
    q = k = v = torch.randn(1, 4, 8, 8)
    pos = torch.arange(8.0)
    with torch.no_grad():
        fast = pe.speed.fast_bias(0, pos, pos)
        BlockedBiasKernel(pe, "cpu", 0.0)(q, k, v, pe.score_mod(0, pos, pos), False, None, fast)
    assert seen == ran == [BiasPath.ONE_BLOCK_TABLE]
