"""At most one host sync per optimizer step in the loop (the fused finite check + stop flag); logging
syncs only on log steps. CPU has no sync debug mode (torch.cuda.set_sync_debug_mode is CUDA-only), so
this counts the calls that force a device->host transfer, made from posbench's own code."""

import sys

import torch

from posbench.training.batch_sources import RandomTokens
from posbench.training.loop import train
from tests.training.helpers import nano_config

SYNCING = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__")


def _counting(monkeypatch, counter):
    for name in SYNCING:
        original = getattr(torch.Tensor, name)

        def wrapped(self, *a, _original=original, **k):
            # torch's own optimizer reads its CPU step counters with .item(); only our calls count
            if "/posbench/" in sys._getframe(1).f_code.co_filename:
                counter[0] += 1
            return _original(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, wrapped)


def _syncs(tmp_path, monkeypatch, steps, log_interval, name):
    cfg = nano_config(tmp_path, f"train.run_name={name}", f"train.max_steps={steps}",
                      f"train.log_interval={log_interval}", "train.ckpt_interval=0")
    counter = [0]
    with monkeypatch.context() as m:
        _counting(m, counter)
        train(cfg, RandomTokens(512, 64))
    return counter[0]


def test_one_sync_per_step_and_logging_only_on_log_steps(tmp_path, monkeypatch):
    # accum 4 micro-batches per step (512 tokens / (2 x 64)); setup and the final save cancel out
    a = _syncs(tmp_path, monkeypatch, 3, 100, "a")
    b = _syncs(tmp_path, monkeypatch, 7, 100, "b")
    assert (b - a) / 4 == 1, f"{(b - a) / 4} syncs per step without logging"
    c = _syncs(tmp_path, monkeypatch, 7, 2, "c")  # logs at steps 2, 4, 6
    per_log = (c - b) / 3
    assert per_log == int(per_log) and 0 < per_log <= 4, per_log
