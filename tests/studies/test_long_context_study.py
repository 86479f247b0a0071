"""The long-context study: its preset, and a tiny study run end to end (2 steps; numbers meaningless) that writes the
report's long-context section, the heatmaps and each cell's grid. The section itself, on hand-made cell results:
tests/studies/test_long_context_report.py."""

import json
import re

import pytest

from posbench.data.tasks import get_task_class
from posbench.errors import ConfigError
from posbench.studies import published
from posbench.studies.cell_files import cell_spec
from posbench.studies.study_runner import run_study
from posbench.studies.study_spec import expand, load_study

ROWS = ["rope", "alibi", "none", "fire", "rnope_swa", "fox", "drope", "stick_breaking", "cable", "randomized",
        "path", "repo", "grape_m", "grape_m_ctx", "grape_a", "grape_ap", "selective_rope", "tape", "seqpe", "swan_gpt",
        "rope_dope"]


def test_preset_rows_lengths_and_grid():
    study = load_study("long_context")
    (task,) = study.tasks
    assert (task.name, task.id_range, task.ood_range) == ("ruler_mix", (64, 128), (129, 1024))
    assert [r.label for r in study.rows()] == ROWS and len(study.seeds) >= 3
    swa = study.pes[ROWS.index("rnope_swa")]
    assert (swa.window, swa.swa_layers) == (64, 1)  # half the training length, one windowed layer
    swan, dope = study.arms  # SWAN-GPT's recipe at 2 layers: rnope_swa's split, the NoPE layer's scaling floored at 1
    assert (swan.pe.window, swan.pe.swa_layers) == (64, 1)
    # DoPE's headline settings on RoPE trained as the rope row; dynamic NTK at factor 1: scale L / 128 past 128
    assert (dope.dope.n_heads, dope.dope.truncate, dope.dope.order, dope.dope.mode.name) == (3, 32, "ascending",
                                                                                            "gaussian")
    assert (dope.pe, dope.run) == (study.pes[0], {})  # trained as the rope row: its training twin
    assert (dope.rope_scaling.name, dope.rope_scaling.factor) == ("dynamic", 1.0)
    assert any(c.order == "rope_dope > rope" and c.metric == "ood_exact" for c in study.claims)
    from posbench.studies.cost import train_flop

    rows = {label: [c for c in expand(study) if c.label == label] for label in ("rope", "rope_dope", "alibi")}
    # rope_dope's cells are priced as the training they share with rope's; alibi's are a training of their own
    assert train_flop(rows["rope"] + rows["rope_dope"]) == train_flop(rows["rope"])
    assert train_flop(rows["rope"] + rows["alibi"]) > train_flop(rows["rope"])
    assert study.pes[ROWS.index("randomized")].positions == "float"
    g = study.eval.length_grid
    assert g.multiples == [1, 2, 4, 8] and g.lengths(128) == [128, 256, 512, 1024]
    names = [f.name for f in task.families]
    assert names == ["niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "variable_tracking",
                     "common_words", "frequent_words", "kv_retrieval"]
    assert task.families[1].n_keys == 4  # multi-key keeps RULER's four keys: guess 1/4
    assert len(expand(study)) == len(ROWS) * len(study.seeds)
    assert '"length_grid": {"depths": [0.0, 0.25, 0.5, 0.75, 1.0], "multiples": [1, 2, 4, 8], "per_cell": 8}' in \
        cell_spec(expand(study)[0])


def test_the_dope_arm_trains_once_with_rope_and_records_its_heads(tmp_path, capsys):
    from posbench.studies.cell import run_group

    study = load_study("long_context")
    study.tasks = [get_task_class("k_back").Config(k=2)]
    study.eval.length_grid.multiples, study.eval.n_examples = [], 4
    study.arms = [a for a in study.arms if a.label == "rope_dope"]
    study.pes, study.claims, study.seeds = [study.pes[0]], [], [0]
    study.overrides = ["model.d_model=16", "model.n_heads=2", "model.n_layers=2", "model.d_ff=32"]
    study.train.steps, study.train.batch_size, study.train.curve_points = 2, 4, 1
    rope, dope = expand(study)
    assert (rope.label, dope.label) == ("rope", "rope_dope")
    from posbench.studies.seed_groups import seed_groups

    for batch in (True, False):  # one job holds the twins, batched or not (a CPU study's default: not)
        assert [[c.label for c in g.cells] for g in seed_groups([rope, dope], batch=batch)] == [["rope", "rope_dope"]]
    # rope_dope first: rope is scored after it on the same model (what DoPE and the scaling change is undone after
    # each: tests/evaluation/test_dope.py)
    together = run_group([dope, rope], tmp_path / "together")
    assert "training k_back_rope_dope_s0, k_back_rope_s0 once: their training is the same" in capsys.readouterr().out
    assert together[0].train_loss == together[1].train_loss and together[1].dope_heads is None
    assert together[0].ood_loss != together[1].ood_loss  # DoPE changed what rope_dope scored
    # the final model's choice for each split: 3 of the 2 x 2 heads, the lowest scores
    assert [r["suite"] for r in together[0].dope_heads] == ["id", "ood"]
    for record in together[0].dope_heads:
        flat = sorted(s for row in record["scores"] for s in row)
        assert [h["score"] for h in record["heads"]] == flat[:3]
    assert '"dope": {' in cell_spec(dope) and '"rope_scaling": {' in cell_spec(dope)


def test_an_arm_with_evaluation_options_needs_a_rotary_pe():
    from posbench.evaluation.dope_config import DopeConfig
    from posbench.grid.arm import Arm
    from posbench.pe import PES
    from posbench.pe.rope_scaling import SCALINGS

    with pytest.raises(ConfigError, match="arms `x`: `dope` denoises rotary position embeddings"):
        Arm(label="x", pe=PES.config("alibi")(), dope=DopeConfig())
    with pytest.raises(ConfigError, match="arms `x`: `rope_scaling` rescales rotary position embeddings"):
        Arm(label="x", pe=PES.config("none")(), rope_scaling=SCALINGS.config("dynamic")())
    study = load_study("long_context")
    study.eval.seed = study.arms[1].dope.calibration_seed
    with pytest.raises(ConfigError, match="`rope_dope`: dope.calibration_seed 7919 is study.eval.seed"):
        study.check()


def test_a_grid_needs_the_mixed_task():
    study = load_study("long_context")
    study.tasks = [get_task_class("reverse").Config()]
    with pytest.raises(ConfigError, match="length_grid scores the long-context families of a `ruler_mix` task"):
        study.check()
    study.eval.length_grid.multiples = []  # no grid: any task
    study.check()


@pytest.mark.slow
def test_tiny_study_end_to_end(tmp_path):
    study = load_study("long_context")
    task = study.tasks[0]
    task.id_range, task.ood_range = (64, 96), (97, 192)
    fam = {f.name: f for f in task.families}
    fam["niah_multikey"].value_digits = 1
    task.families = [fam["niah_multikey"], fam["common_words"], fam["kv_retrieval"]]
    study.pes, study.arms = [p for p in study.pes if p.name == "rope"], []
    # the preset's claims compare rows this tiny grid leaves out (the 2026 PEs): keep those about rope alone
    study.claims = [c for c in study.claims if set(re.findall(r"[a-z][a-z0-9_]*", c.order)) <= {"rope"}]
    study.seeds, study.workers = [0, 1], 1
    study.overrides = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "model.d_ff=32"]
    study.train.steps, study.train.batch_size, study.train.curve_points = 2, 4, 1
    study.eval.n_examples, study.eval.n_boot = 4, 200
    study.eval.length_grid.multiples, study.eval.length_grid.depths = [1, 2], [0.0, 1.0]
    study.eval.length_grid.per_cell = 2
    run_study(study, tmp_path, progress=False)
    report = (tmp_path / "report.md").read_text()
    for head in ("## Long-context families: exact match by length", "## Effective length per row",
                 "## Multi-key NIAH above its question-blind baseline at 2x", "**mean of families**"):
        assert head in report
    assert "| row | 1x (96) | 2x (192) |" in report
    for name in ("long_context_by_family.png", "long_context_niah_multikey_heatmap.png",
                 "long_context_kv_retrieval_heatmap.png"):
        assert (tmp_path / name).stat().st_size > 0 and f"![{name}]({name})" in report
    assert not (tmp_path / "long_context_common_words_heatmap.png").exists()  # no depth axis
    # the published page (rendered from <out>/result/ alone) carries the same long-context section as the report
    page = published.page(published.Result(tmp_path / "result"))
    heads = ("## Long-context families", "## Effective length per row", "## Multi-key NIAH")
    rest = report[report.index(heads[0]):]
    ends = [m.start() for m in re.finditer(r"^## ", rest, re.M) if not rest[m.start():].startswith(heads)]
    section = rest[:ends[0]] if ends else rest
    assert "**mean of families**" in section and section.rstrip() in page
    cells = json.loads((tmp_path / "results.json").read_text())["cells"]
    assert len(cells) == 2
    for c in cells:
        g = c["length_grid"]
        assert g["train_len"] == 96 and g["lengths"] == [96, 192]
        keys = sorted((x["family"], x["length"], x["depth"]) for x in g["cells"])
        assert keys == sorted([(f, L, d) for f in ("niah_multikey", "kv_retrieval") for L in (96, 192)
                               for d in (0.0, 1.0)] + [("common_words", L, 0.5) for L in (96, 192)])
        assert all(x["n"] == 2 and x["exact"] in (0.0, 0.5, 1.0) for x in g["cells"])
        assert all(x["guess"] == 0.25 for x in g["cells"] if x["family"] == "niah_multikey")
