"""Valid settings that are easy to misread get one line at the start of training: a sliding window longer than
the training length (it binds only at evaluation), the task mix going into a user's own corpus."""

from posbench.config import load_config
from posbench.model.build import build_model
from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from posbench.training.start_notes import mix_note, start_notes, window_note
from tests.training.helpers import nano_config


def test_a_window_longer_than_the_training_length_is_said_once_at_start(tmp_path, capsys):
    cfg = nano_config(tmp_path, "pe.name=rnope_swa", "pe.swa_layers=1", "pe.window=256", "train.max_steps=2")
    train(cfg, RandomTokens(512, 64))
    said = capsys.readouterr()
    lines = [x for x in (said.out + said.err).splitlines() if "sliding window" in x]
    assert lines == ["note: sliding window 256 >= the training length 64: training attends to every position "
                     "(full attention); the window binds only at evaluation lengths above 256"]
    cfg = nano_config(tmp_path, "pe.name=rnope_swa", "pe.swa_layers=1", "pe.window=32")
    assert window_note(cfg, build_model(cfg.model, cfg.pe, "cpu").pe) is None  # a window that binds: nothing


def test_the_task_mix_on_a_users_own_corpus_is_said():
    own = load_config(model_size="nano", overrides=["data.source.name=local", "data.source.paths=[mydocs]"])
    assert "your corpus `local` mix in task documents (10% of tokens: simple_copy, reverse" in mix_note(own)
    assert mix_note(load_config(model_size="nano")) is None  # the default corpus: its documented mix
    assert mix_note(load_config(model_size="nano", overrides=["data.source.name=local", "data.source.paths=[d]",
                                                              "data.mix.tasks=[]"])) is None
    assert start_notes(load_config(model_size="nano", overrides=["train.stream=random"]), None) == []
