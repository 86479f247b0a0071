"""model.arch through the study runner: an encoder-decoder cell and a Mamba cell (1-cell grids each, run
as one study), arms that restrict themselves to tasks, the exact-match reference table, and Pig Latin on
a word list (and its fallback)."""

import json

import pytest

from posbench.data.tasks.pig_latin import to_pig_latin
from posbench.data.tasks.task import build_task, get_task_class
from posbench.errors import ConfigError
from posbench.studies.study_runner import run_study
from posbench.studies.study_spec import expand, load_study

STUDY = """
name: archs
tasks: [{name: pig_latin, words: dictionary, word_list: WORDS, id_range: [3, 5], ood_range: [6, 7], hyphen_prob: 0}]
pes: []
arms:
  - {label: encdec, pe: {name: sinusoidal}, arch: {name: encoder_decoder, decoder_pe: {name: sininit}}}
  - {label: mamba, arch: {name: mamba, d_state: 4}}
seeds: [0]
overrides: [model.d_model=16, model.n_heads=2, model.n_layers=1, model.d_ff=32]
train: {steps: 6, batch_size: 8, curve_points: 1}
eval: {n_examples: 8, n_boot: 200}
workers: 1
reference: {pig_latin: {encdec: {id_exact: 0.5, id_loss: 0.2}, mamba: {id_exact: 0.9}}}
"""

WORDS = ["cat", "dog", "apple", "string", "rhythm", "queen", "eel", "bird", "stone", "plane", "oak", "tree",
         "elbow", "yellow", "thread", "animal", "glass", "frost", "ice", "orange", "quilt", "sky", "tiny", "brown",
         "stripes", "islands", "blanket", "crumble", "planets", "bottle", "Capital", "don't", "ocean", "umbrella"]


def word_list(tmp_path):
    path = tmp_path / "words"
    path.write_text("\n".join(WORDS) + "\n")
    return path


def test_encoder_decoder_and_mamba_cells_through_the_study_runner(tmp_path):
    spec = tmp_path / "archs.yaml"
    spec.write_text(STUDY.replace("WORDS", str(word_list(tmp_path))))
    out = tmp_path / "out"
    result = run_study(load_study(str(spec)), out, progress=False)
    assert result["cells"] == 2 and result["ran"] == 2
    cells = {c["pe"]: c for c in json.loads((out / "results.json").read_text())["cells"]}
    assert {k: c["arch"] for k, c in cells.items()} == {"encdec": "encoder_decoder", "mamba": "mamba"}
    for c in cells.values():
        assert 0 <= c["id_acc"] <= 1 and 0 <= c["id_exact"] <= 1 and c["id_loss"] > 0
        assert c["data_note"].startswith("dictionary words from")
    assert cells["mamba"]["attention"]["probs"] == []  # no attention to show, and the plots skip it
    assert len(cells["encdec"]["attention"]["probs"]) == 1  # the encoder's one layer
    report = (out / "report.md").read_text()
    assert "## Exact match against the reference" in report
    assert "| pig_latin | encdec |" in report and "| pig_latin | mamba |" in report


def test_arms_restricted_to_tasks_and_bad_arms(tmp_path):
    text = STUDY.replace("WORDS", str(word_list(tmp_path))).replace(
        "tasks: [{name: pig_latin", "tasks: [{name: k_back}, {name: pig_latin").replace(
        "decoder_pe: {name: sininit}}}", "decoder_pe: {name: sininit}}, tasks: [pig_latin]}")
    spec = tmp_path / "s.yaml"
    spec.write_text(text.replace("pes: []", "pes: [{name: rope}]"))
    ids = sorted(c.cell_id for c in expand(load_study(str(spec))))
    assert ids == ["k_back_mamba_s0", "k_back_rope_s0", "pig_latin_encdec_s0", "pig_latin_mamba_s0",
                   "pig_latin_rope_s0"]
    spec.write_text(text.replace("tasks: [pig_latin]", "tasks: [sort]"))
    with pytest.raises(ConfigError, match="not in the study's tasks"):
        load_study(str(spec))
    spec.write_text(text.replace("label: mamba", "label: 'a b'"))
    with pytest.raises(ConfigError, match="label"):
        load_study(str(spec))


def test_encoder_decoder_on_a_task_without_a_source_refused_before_training(tmp_path):
    from posbench.studies.cell_config import cell_config

    spec = tmp_path / "s.yaml"
    spec.write_text(STUDY.replace("tasks: [{name: pig_latin, words: dictionary, word_list: WORDS, id_range: [3, 5], "
                                  "ood_range: [6, 7], hyphen_prob: 0}]", "tasks: [{name: k_back}]"))
    cell = expand(load_study(str(spec)))[0]
    with pytest.raises(ConfigError, match="source/target form"):
        cell_config(cell, build_task(cell.task), tmp_path)


def test_pig_latin_on_a_word_list_and_its_fallback(tmp_path):
    cfg = get_task_class("pig_latin").Config(words="dictionary", word_list=str(word_list(tmp_path)),
                                             id_range=(3, 5), ood_range=(6, 7), hyphen_prob=0.0)
    task = build_task(cfg)
    usable = {w for w in WORDS if w.isalpha() and w.islower()}  # "Capital" and "don't" are not a-z words
    for split, (low, high) in (("train", (3, 5)), ("ood", (6, 7))):
        for i in range(30):
            ex = task.example(0, i, split)
            word = ex.prompt.split(": ")[1].removesuffix(" ->")
            assert word in usable and low <= len(word) <= high
            assert ex.answer == " " + to_pig_latin(word)
    assert task.source_end_token == task.vocab.id("<sep>")
    assert to_pig_latin("string") == "ingstray" and to_pig_latin("apple") == "appleway"  # by hand
    missing = get_task_class("pig_latin").Config(words="dictionary", word_list=str(tmp_path / "absent"))
    with pytest.warns(UserWarning, match="not found"):
        fallback = build_task(missing)
    assert fallback.data_note.startswith("made-up words") and fallback.fingerprint != task.fingerprint
    assert fallback.example(0, 0, "train").tokens_T.size > 0
