"""docs/adding-a-pe.md's code runs as written: its PE file registers a PE the contract accepts, and its test of the
formula passes against it (the registration is removed afterwards, so no other test sees the name)."""

import re
import types
from pathlib import Path

from posbench.pe import PES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "adding-a-pe.md"


def test_the_pages_pe_and_its_test_run_as_written():
    pe_file, test_file = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert len(pe_file.strip().splitlines()) <= 20  # the toy is short enough to read at a glance
    assert "my_log_bias" not in PES
    try:
        exec(compile(pe_file, "my_log_bias.py", "exec"), types.ModuleType("my_log_bias").__dict__)
        assert PES.get("my_log_bias").summary == "a log-distance logit bias, steeper per head"
        namespace = types.ModuleType("test_my_log_bias").__dict__
        exec(compile(test_file, "test_my_log_bias.py", "exec"), namespace)
        namespace["test_my_log_bias_reaches_attention_as_written"]()
        # the test can fail: another bias gives other logits
        cls = PES.get("my_log_bias")
        real = cls.bias
        cls.bias = lambda self, t, h, dist, q_pos: -dist * (h + 1) / self.ctx.n_heads
        try:
            failed = False
            try:
                namespace["test_my_log_bias_reaches_attention_as_written"]()
            except AssertionError:
                failed = True
            assert failed
        finally:
            cls.bias = real
    finally:
        if "my_log_bias" in PES:
            PES.unregister("my_log_bias")
