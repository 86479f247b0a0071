"""The training step minimises the PE's own objective beside the LM loss (ModelOutput.aux_loss: SeqPE's contrastive
and distillation losses): the same first step with the objectives weighted 0 logs exactly the LM loss, with their
weights the LM loss plus a positive term."""

from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.training.helpers import losses, nano_config


def first_loss(tmp_path, name, *extra):
    cfg = nano_config(tmp_path / name, "pe.name=seqpe", "train.max_steps=1", "pe.contrastive_batch=4",
                      "pe.transfer_batch=4", "pe.random_shift_rate=0", "model.d_model=32", "model.n_heads=2",
                      "model.n_layers=1", "model.d_ff=64", *extra)
    run_dir = train(cfg, RandomTokens(512, 64))["run_dir"]
    return losses(run_dir)[min(losses(run_dir))]


def test_the_step_adds_the_pes_objective(tmp_path):
    plain = first_loss(tmp_path, "plain", "pe.contrastive_weight=0", "pe.transfer_weight=0")
    with_objectives = first_loss(tmp_path, "objectives")
    assert with_objectives > plain + 1e-3
