"""Position ids from the data (a task's digit places) through the model: Abacus is an embedding lookup at the
places, position coupling hands the ids to its inner PE as positions, PEs that do not read data ids ignore them,
training shifts places by a random offset and evaluation does not, cached decoding with the task's id rule equals
the full forward, and the training loop hands a task's ids to the model."""

import numpy as np
import pytest
import torch

from posbench.config import load_config
from posbench.data.tasks import build_task, get_task_class
from posbench.data.tasks.source import TaskSource, pad_rows
from posbench.errors import ConfigError
from posbench.evaluation.generate import DataPositions, greedy_cached, greedy_recompute
from posbench.pe import PES
from posbench.pe.abacus import Abacus
from tests.conftest import build_test_model

ADD = build_task(get_task_class("addition").Config())
COUPLED = build_task(get_task_class("addition").Config(reverse="answer"))


def nothing():
    raise AssertionError("a PE that reads data ids never makes the default positions")


def hand_rows(task, pairs):
    rows = pad_rows([task.render(a, b) for a, b in pairs])
    return rows[0], rows[1], rows.positions


def test_abacus_adds_the_table_row_of_each_digit_place():
    model = build_test_model("abacus", vocab_size=ADD.vocab.size).eval()
    x, _, places = hand_rows(ADD, [(123, 45), (99, 7)])
    assert places[0, :11].tolist() == [1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 0]
    seen = {}
    model.blocks[0].register_forward_pre_hook(lambda mod, args: seen.update(x=args[0]))
    model(x, data_pos_BT=places)
    table, tok = model.pe.table.weight, model.tok_emb.weight
    want = torch.stack([torch.stack([tok[x[b, t]] + table[places[b, t]] for t in range(x.shape[1])])
                        for b in range(x.shape[0])])
    torch.testing.assert_close(seen["x"], want)


def test_abacus_shifts_digit_places_in_training_only_and_never_non_digits():
    pe = build_test_model("abacus", overrides=["pe.max_offset=50"]).pe
    places = torch.tensor([[1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 0]] * 64)
    pe.eval()
    assert torch.equal(pe.data_positions(places, nothing), places.float())
    pe.train()
    torch.manual_seed(0)
    shifted = pe.data_positions(places, nothing)
    k = shifted[:, 0] - 1  # one offset per row
    assert torch.equal(shifted, torch.where(places > 0, places + k[:, None], places).float())
    assert k.min() >= 0 and k.max() <= 49 and len(set(k.tolist())) > 10
    assert pe.table.num_embeddings == 64 + 49  # every shifted place has a row (model.seq_len places + offsets)


def test_abacus_shift_batch_draws_one_offset_per_batch_as_the_authors_do():
    """mcleish7/arithmetic's Abacus: `k = random.randint(0, max_k)` once per forward, max_k = 100 with both ends
    included, added to every digit place (`output[output > 0] += k`): max_offset=101 with shift=batch here."""
    pe = build_test_model("abacus", overrides=["pe.max_offset=101", "pe.shift=batch"]).pe.train()
    places = torch.tensor([[1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 0], [1, 0, 1, 2, 0, 1, 2, 0, 0, 0, 0]])
    ks = set()
    torch.manual_seed(0)
    for _ in range(400):
        shifted = pe.data_positions(places, nothing)
        k = int(shifted[0, 0] - 1)
        assert torch.equal(shifted, torch.where(places > 0, places + k, places).float())  # every row, one k
        ks.add(k)
    assert min(ks) == 0 and max(ks) == 100 and len(ks) > 90  # their randint(0, 100): 101 values, both ends


def test_coupled_ids_are_the_inner_rope_positions():
    """Coupling on a hand example: the digits of equal significance share an id (the hundreds of 123 and of its
    result 168), and the coupled model computes what RoPE computes at those positions given explicitly."""
    coupled = build_test_model("coupled", vocab_size=COUPLED.vocab.size).eval()
    rope = build_test_model("rope", vocab_size=COUPLED.vocab.size).eval()
    rope.load_state_dict(coupled.state_dict(), strict=False)
    x, _, ids = hand_rows(COUPLED, [(123, 45)])
    assert ids[0].tolist() == [3, 2, 1, 0, 2, 1, 0, 1, 2, 3, 0]
    got = coupled(x, data_pos_BT=ids).logits
    torch.testing.assert_close(got, rope(x, pos_T=ids[0].float()).logits)
    assert not torch.allclose(got, coupled(x).logits)  # the ids change what it computes


def test_coupled_learned_looks_up_its_ids_and_shifts_all_of_them_in_training():
    model = build_test_model("coupled", overrides=["pe.inner={name: learned}", "pe.max_offset=8"])
    pe = model.pe
    ids = torch.tensor([[3, 2, 1, 0, 2, 1, 0, 1, 2, 3, 0]])
    x = torch.zeros(1, 11, 32)
    pe.eval()
    pos = pe.data_positions(ids, nothing)
    torch.testing.assert_close(pe.embed(x, pos), pe.inner.table.weight[ids])
    pe.train()
    torch.manual_seed(3)
    shifted = pe.data_positions(ids.expand(32, -1), nothing)
    s = shifted - ids
    assert (s == s[:, :1]).all() and s.min() >= 0 and s.max() <= 7 and len(set(s[:, 0].tolist())) > 3
    assert pe.inner.table.num_embeddings == 64 + 7


def test_coupled_offset_fit_draws_the_authors_start_for_each_row():
    """offset=fit, as position coupling's authors draw the start: every shift that keeps the row's largest id inside
    the table (ids 0..max_positions-1), uniformly, one per row; a short row can reach the last rows, a long one less
    far; evaluation does not shift."""
    pe = build_test_model("coupled", overrides=["pe.inner={name: learned}", "pe.offset=fit",
                                                "pe.max_positions=20"]).pe
    short = torch.tensor([[1, 2, 0, 1, 2, 0, 1, 2, 3, 0]])  # largest id 3: shifts 0..16
    long = torch.tensor([[5, 4, 3, 2, 1, 0, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6, 0]])  # largest id 6: shifts 0..13
    pe.eval()
    assert torch.equal(pe.data_positions(short, nothing), short.float())
    pe.train()
    torch.manual_seed(0)
    for ids, top in ((short, 16), (long, 13)):
        shifted = pe.data_positions(ids.expand(4000, -1), nothing)
        s = shifted - ids
        assert (s == s[:, :1]).all()  # one shift per row, operators included
        counts = torch.bincount(s[:, 0].long(), minlength=top + 1)
        assert len(counts) == top + 1 and counts.min() > 4000 / (top + 1) * 0.7  # every start, about uniformly
        assert shifted.max() == 19  # the table's last row is reached and never passed
    assert pe.inner.table.num_embeddings == 20


def test_coupled_offset_fit_refuses_a_fixed_offset_beside_it():
    with pytest.raises(ConfigError, match="pe.offset=fit draws each row's shift from pe.max_positions"):
        build_test_model("coupled", overrides=["pe.offset=fit", "pe.max_offset=8"])


@pytest.mark.parametrize("name", ["rope", "none", "fire", "alibi"])
def test_pes_that_do_not_read_data_ids_ignore_them(name):
    assert not PES.get(name).reads_data_positions()
    model = build_test_model(name, vocab_size=ADD.vocab.size).eval()
    x, _, places = hand_rows(ADD, [(123, 45)])
    torch.testing.assert_close(model(x, data_pos_BT=places).logits, model(x).logits)


@pytest.mark.parametrize("name,task", [("abacus", ADD), ("coupled", COUPLED), ("rope", ADD)])
def test_cached_decoding_with_the_task_rule_equals_the_full_forward(name, task):
    """The prompt's ids, then each generated token's id by the task's rule, through the KV cache: the same tokens
    and logits as re-running the sequence, and each step's logits equal the full forward's at that position."""
    torch.manual_seed(0)
    model = build_test_model(name, vocab_size=task.vocab.size).eval()
    examples = [task.render(4821, 376), task.render(1234, 999)]  # equal prompt lengths: one batch
    n_prompt = int((examples[0].targets_T != -100).argmax()) + 1  # 9 for both: the prompt ends at `=`
    prompt = torch.from_numpy(np.stack([ex.tokens_T[:n_prompt] for ex in examples]))
    prompt_pos = torch.from_numpy(np.stack([ex.positions_T[:n_prompt] for ex in examples]))
    rule = DataPositions(prompt_pos, lambda answer: task.answer_positions(answer))
    cached_scores, full_scores = [], []
    new = greedy_cached(model, prompt, 6, cached_scores, positions=rule)
    assert torch.equal(new, greedy_recompute(model, prompt, 6, full_scores, positions=rule))
    torch.testing.assert_close(torch.stack(cached_scores), torch.stack(full_scores), atol=1e-5, rtol=1e-5)
    seq = torch.cat((prompt, new), dim=1)
    ids = torch.cat((prompt_pos, rule.answer_BN(new)), dim=1)
    logits = model(seq, data_pos_BT=ids).logits
    for i, step in enumerate(cached_scores):
        torch.testing.assert_close(step, logits[:, n_prompt - 1 + i], atol=1e-5, rtol=1e-5)


def test_the_training_loop_hands_the_task_ids_to_the_model(tmp_path, monkeypatch):
    task = build_task(get_task_class("addition").Config(id_range=(1, 2), ood_range=(3, 4)))
    source = TaskSource(task, 16, seed=0, n_val=8)
    cfg = load_config(overrides=[
        "model.size=test", "model.d_model=32", "model.n_heads=2", "model.n_layers=1", "model.d_ff=64",
        "model.seq_len=16", f"model.vocab_size={task.vocab.size}", "pe.name=abacus", "pe.max_offset=4",
        f"train.out_dir={tmp_path}", "train.run_name=t", "train.budget_unit=tokens", "train.target_budgets=[64]",
        "train.global_batch_tokens=32", "train.micro_batch=2", "train.device=cpu", "train.eval_interval=0",
        "logging.wandb=disabled"])
    seen = []
    original = Abacus.data_positions
    monkeypatch.setattr(Abacus, "data_positions", lambda self, d, p: seen.append(d.clone()) or original(self, d, p))
    from posbench.training.loop import train

    train(cfg.resolve(), source)
    assert seen and torch.equal(seen[0], source.samples([0, 1]).positions)


@pytest.mark.parametrize("name", ["abacus", "coupled"])
def test_the_export_refuses_a_pe_that_reads_data_ids_before_writing(tmp_path, name):
    pytest.importorskip("transformers")
    from posbench.interop.hf_export import export
    from posbench.interop.hf_refusals import refuse_data_positions
    from tests.interop.test_hf_export_remote import random_checkpoint

    refuse_data_positions(load_config(pe_type="rope"))
    with pytest.raises(ConfigError, match=f"PE `{name}` takes its positions from the data.*Nothing was exported"):
        export(random_checkpoint(tmp_path, f"pe.name={name}"), tmp_path / "out")
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("name,extra", [("abacus", ["pe.max_positions=8", "pe.max_offset=5"]),
                                        ("coupled", ["pe.inner={name: learned}", "pe.max_positions=8",
                                                     "pe.max_offset=5"])])
def test_rows_longer_than_the_id_range_are_fine_with_data_ids_and_refused_without(name, extra):
    """max_positions bounds the ids, not the row: 20 tokens of short numbers (ids <= 3) run; without data ids
    the token indices are the positions and a row past max_positions is refused, never clamped."""
    from posbench.pe import PositionRangeError

    model = build_test_model(name, overrides=extra, vocab_size=ADD.vocab.size).eval()
    x, _, ids = hand_rows(ADD, [(123, 45), (99, 7)])
    x, ids = torch.cat((x, x), dim=1)[:, :20], torch.cat((ids, ids), dim=1)[:, :20]
    assert model(x, data_pos_BT=ids).logits.shape[1] == 20
    model(x[:, :8])
    with pytest.raises(PositionRangeError, match=f"PE `{name}` is defined for positions 0..7"):
        model(x[:, :9])
    with pytest.raises(PositionRangeError, match=f"PE `{name}` is defined for positions 0..7"):
        model(x, data_pos_BT=ids + 6)  # ids up to 9: past max_positions


@pytest.mark.parametrize("name,task", [("abacus", ADD), ("coupled", COUPLED), ("rope", ADD)])
def test_generated_exact_decodes_with_the_task_ids_and_agrees_with_teacher_forcing(name, task):
    """Examples whose answers are, by construction, the model's own greedy continuation with the task's ids:
    decoding (KV cache) scores every one exact, teacher forcing with the same ids too; fed without ids, the
    abacus model's answers change, so the ids are what decoding used."""
    from posbench.data.tasks.task import Example, answer_rows
    from posbench.evaluation.task_accuracy import generated_exact, score_rows

    torch.manual_seed(1)
    model = build_test_model(name, vocab_size=task.vocab.size).eval()
    with torch.no_grad():  # weights far from init, so the continuation depends on tokens and positions
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    made = []
    for a, b in [(4821, 376), (1234, 999), (57, 8), (60, 31)]:
        ex = task.render(a, b)
        n_prompt = int((ex.targets_T != -100).argmax()) + 1
        prompt, pos = ex.tokens_T[:n_prompt], ex.positions_T[:n_prompt]
        rule = DataPositions(torch.from_numpy(pos)[None], task.answer_positions)
        new = greedy_recompute(model, torch.from_numpy(prompt)[None], 5, positions=rule)[0].tolist()
        tokens, targets = answer_rows(prompt.tolist(), new)
        made.append(Example("", "", tokens, targets, {"digits": 4}, np.concatenate([pos, task.answer_positions(new)])))
    assert generated_exact(model, task, made) == [1.0] * 4
    rows = pad_rows(made)
    assert score_rows(model, rows[0], rows[1], positions_BT=rows.positions).exact == 1.0
    if name == "abacus":
        no_ids = [Example("", "", ex.tokens_T, ex.targets_T, ex.info, None) for ex in made]
        assert generated_exact(model, task, no_ids) != [1.0] * 4
