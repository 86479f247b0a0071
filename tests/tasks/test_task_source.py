"""TaskSource (the BatchSource for training on a task), the evaluation batcher, and the pretraining mixer."""

import numpy as np
import pytest
import torch

from posbench.config_loader import from_dict
from posbench.data.tasks import IGNORE, PAD_ID, TaskConfig, build_task, get_task_class, task_names
from posbench.data.tasks.mix import TaskMixConfig, TaskMixer, build_mixer
from posbench.data.tasks.source import TaskSource, eval_batch
from posbench.errors import ConfigError
from posbench.training.batch_sources import micro_indices, val_indices


def make(name, **kw):
    return build_task(get_task_class(name).Config(**kw))


@pytest.mark.parametrize("name", task_names())
def test_rows_have_the_right_shape_and_padding(name):
    task = make(name, **({"id_range": (16, 64), "ood_range": (100, 160)} if name == "needle" else {}))
    seq_len = task.max_tokens("train") + 3
    source = TaskSource(task, seq_len, seed=4, n_val=8)
    idx = micro_indices(step=2, micro=1, micro_batch=4, accum=2, rank=0, world=1)
    x, y = source.samples(idx)
    assert x.shape == y.shape == (4, seq_len) and x.dtype == y.dtype == torch.int64
    for row, i in enumerate(idx):
        ex = task.example(4, i, "train")
        n = len(ex.tokens_T)
        assert torch.equal(x[row, :n], torch.from_numpy(ex.tokens_T))
        assert torch.equal(y[row, :n], torch.from_numpy(ex.targets_T))
        assert (x[row, n:] == PAD_ID).all() and (y[row, n:] == IGNORE).all()
    assert int(x.max()) < source.vocab_size and int(y.max()) < source.vocab_size


def test_validation_rows_come_from_the_id_split():
    task = make("reverse")
    source = TaskSource(task, 20, seed=0, n_val=6)
    assert source.n_val() == 6
    idx = val_indices(batch=1, micro_batch=4, rank=0, world=1, n_val=source.n_val())  # wraps at n_val
    x, _ = source.val_samples(idx)
    for row, i in enumerate(idx):
        ex = task.example(0, i, "id")
        assert torch.equal(x[row, : len(ex.tokens_T)], torch.from_numpy(ex.tokens_T))
    train, _ = source.samples(list(range(6)))
    val, _ = source.val_samples(list(range(6)))
    assert not torch.equal(train, val)
    with pytest.raises(IndexError, match="outside"):
        source.val_samples([6])


def test_fingerprint_is_stable_and_specific():
    a = TaskSource(make("sort"), 16, seed=1).fingerprint
    assert a == TaskSource(make("sort"), 16, seed=1).fingerprint
    assert a.startswith("task:sort:")
    assert a != TaskSource(make("sort"), 16, seed=2).fingerprint
    assert a != TaskSource(make("sort", n_symbols=12), 16, seed=1).fingerprint


def test_rows_that_cannot_hold_an_example_are_refused():
    with pytest.raises(ConfigError, match="up to 18 tokens but rows have seq_len=10"):
        TaskSource(make("reverse"), 10, seed=0)
    with pytest.raises(ConfigError, match="n_val=0"):
        TaskSource(make("reverse"), 32, seed=0, n_val=0)


def test_task_config_is_polymorphic():
    """As a study's `tasks` entries are read: the `name` picks the task's own strict Config."""
    cfg = from_dict(TaskConfig, {"name": "modular_sum", "base": 7}, "study.tasks[0]")
    source = TaskSource(build_task(cfg), seq_len=32, seed=0, n_val=32)
    assert source.task.name == "modular_sum" and source.vocab_size == 8 and source.n_val() == 32
    with pytest.raises(ConfigError, match=r"unknown config key `study.tasks\[0\].bas`"):
        from_dict(TaskConfig, {"name": "modular_sum", "bas": 7}, "study.tasks[0]")


def test_eval_batch_pads_ood_rows_to_the_longest():
    task = make("simple_copy")
    examples, x, y = eval_batch(task, 0, "ood", range(5))
    longest = max(len(ex.tokens_T) for ex in examples)
    assert x.shape == (5, longest) and y.shape == (5, longest)
    assert all(ex.info["length"] >= 13 for ex in examples)
    with pytest.raises(ValueError, match="more than the row length"):
        eval_batch(task, 0, "ood", range(5), seq_len=10)


def test_training_a_model_on_rows_gives_a_finite_loss():
    from tests.conftest import build_test_model

    source = TaskSource(make("k_back"), 32, seed=0)
    model = build_test_model("rope", vocab_size=source.vocab_size, seq_len=32)
    x, y = source.samples([0, 1, 2])
    loss = model(x, y).loss
    assert torch.isfinite(loss) and loss.item() > 0


def test_mixer_ratio_is_exact_and_deterministic():
    tasks = [make("reverse"), make("modular_sum")]
    mixer = TaskMixer(tasks, ratio=0.1, seed=3)
    docs = [mixer.document(i) for i in range(1000)]
    flags = [d is not None for d in docs]
    for start in range(0, 1000, 10):  # one task document in every 10
        assert sum(flags[start:start + 10]) == 1
    task_docs = [d for d in docs if d is not None]
    assert [d.task for d in task_docs[:4]] == ["reverse", "modular_sum", "reverse", "modular_sum"]
    assert len({(d.task, d.example_index) for d in task_docs}) == len(task_docs)  # no repeats
    first = task_docs[0]
    assert first.text == tasks[0].example(3, first.example_index, "train").text
    again = TaskMixer([make("reverse"), make("modular_sum")], ratio=0.1, seed=3)
    assert all(again.document(i) == docs[i] for i in range(0, 1000, 7))
    corpus = [mixer.corpus_index(i) for i in range(1000) if not flags[i]]
    assert corpus == list(range(len(corpus)))  # every corpus document, in order, none skipped


@pytest.mark.parametrize("ratio", [0.0, 0.03, 0.25, 1 / 3])
def test_mixer_ratio_holds(ratio):
    mixer = TaskMixer([make("sort")], ratio=ratio)
    share = np.mean([mixer.is_task_doc(i) for i in range(3000)])
    assert share == pytest.approx(ratio, abs=1 / 3000)


def test_mix_config_defaults_and_errors():
    cfg = from_dict(TaskMixConfig, {"tasks": [{"name": "reverse"}, {"name": "passkey", "context": 128}]})
    assert cfg.ratio == 0.1
    mixer = build_mixer(cfg)
    assert [t.name for t in mixer.tasks] == ["reverse", "passkey"]
    with pytest.raises(ConfigError, match="ratio=1.5"):
        TaskMixConfig(ratio=1.5)
    with pytest.raises(ConfigError, match="twice"):
        from_dict(TaskMixConfig, {"tasks": [{"name": "sort"}, {"name": "sort"}]})
    with pytest.raises(ConfigError, match="needs at least one task"):
        TaskMixer([], ratio=0.1)


def test_mixer_weights_documents_follow_the_furthest_behind_rule():
    # weights 3:1 by documents. Hand-walked: a (tie, listed first), b (1/3 > 0/1), then a until
    # a's count / 3 exceeds b's count / 1 ... : a b a a a b a a a b
    mixer = TaskMixer([make("reverse"), make("sort")], ratio=0.5, weights=[3, 1])
    names = [mixer.task_document(k).task for k in range(10)]
    assert names == ["reverse", "sort", "reverse", "reverse", "reverse", "sort", "reverse", "reverse", "reverse",
                     "sort"]
    # each task's documents are its train examples 0, 1, 2, ... in order
    assert [mixer.task_document(k).example_index for k in (0, 2, 3, 5)] == [0, 1, 2, 1]
    assert mixer.fingerprint != TaskMixer([make("reverse"), make("sort")], ratio=0.5).fingerprint


def test_mixer_weights_split_task_tokens_whatever_the_document_lengths():
    # needle documents are ~10x longer than sort's; weights 1:1 by tokens give each half the task tokens,
    # 1:3 a quarter and three quarters (within one document's tokens)
    tasks = [make("needle"), make("sort")]
    lengths = {}
    for weights in ([1, 1], [1, 3]):
        mixer = TaskMixer(tasks, ratio=0.5, unit="tokens", weights=weights)
        counts = {"needle": 0, "sort": 0}
        for kind, ids in mixer.stream(["x" * 200] * 400, lambda text: np.zeros(len(text) + 1, np.int32)):
            if kind != "corpus":
                counts[kind] += len(ids)
                lengths[kind] = max(lengths.get(kind, 0), len(ids))
        total = sum(counts.values())
        assert lengths["needle"] > 5 * lengths["sort"]
        assert counts["needle"] / total == pytest.approx(weights[0] / sum(weights), abs=lengths["needle"] / total)


def test_mix_config_weights_are_checked():
    cfg = from_dict(TaskMixConfig, {"tasks": [{"name": "reverse"}, {"name": "sort"}], "weights": {"sort": 2.5}})
    assert cfg.task_weights() == [1.0, 2.5]
    with pytest.raises(ConfigError, match=r"names \['srot'\], which data.mix.tasks does not list"):
        from_dict(TaskMixConfig, {"tasks": [{"name": "sort"}], "weights": {"srot": 2}})
    with pytest.raises(ConfigError, match=r"weights.sort=0(\.0)? must be a number > 0"):
        from_dict(TaskMixConfig, {"tasks": [{"name": "sort"}], "weights": {"sort": 0}})
