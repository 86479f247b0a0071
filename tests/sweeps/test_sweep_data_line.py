"""The sweep report's data sentence says what the runs read (item 13: runs on `train.stream=random` were described as
"hub source, task mix 10%", the data config they never read)."""

from types import SimpleNamespace

from posbench.config import load_config


def run(group, *overrides):
    return SimpleNamespace(group=group, cfg=load_config(overrides=list(overrides)))


def test_item13_random_token_runs_are_not_described_by_their_unused_data_config():
    from posbench.sweeps.sweep_report import data_line

    cfg = run("nano", "train.stream=random").cfg
    line = data_line([run("nano", "train.stream=random")])
    assert line == (f"Data: uniform random tokens (`train.stream=random`: nothing to learn; no source, tokenizer or "
                    f"task mix is read), vocabulary {cfg.model.vocab_size}; training length {cfg.model.seq_len} "
                    "tokens.")
    assert "source" in line and "hub" not in line and "task mix 10%" not in line


def test_item13_shard_runs_keep_their_data_sentence_and_mixed_runs_say_which_is_which():
    from posbench.sweeps.sweep_report import data_line

    shards = run("nano")
    d = shards.cfg.data
    mix = (f"{d.mix.ratio:.0%} of train {d.mix.unit} ({', '.join(t.name for t in d.mix.tasks)})" if d.mix.active
           else "none")
    expected = (f"Data: `{d.source.name}` source, tokenizer `{d.tokenizer.tag()}`, task mix {mix}; training length "
                f"{shards.cfg.model.seq_len} tokens.")
    assert data_line([shards, run("nano")]) == expected
    both = data_line([shards, run("micro", "train.stream=random")])
    assert both.startswith("Data (differs by run group): nano: `") and "; micro: uniform random tokens" in both
