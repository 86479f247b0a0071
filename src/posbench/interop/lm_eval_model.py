"""posbench checkpoints in EleutherAI's lm-evaluation-harness (`pip install -e '.[lm_eval]'`).

    python -m posbench.interop.lm_eval_model --model posbench --model_args pretrained=RUN --tasks hellaswag
    # or, in Python: import posbench.interop.lm_eval_model, then lm_eval.simple_evaluate(model="posbench", ...)

lm_eval 0.4.13 discovers models only through its own registry (no plugin entry points), so the model is
registered by importing this module; `python -m posbench.interop.lm_eval_model` is the `lm_eval` command line
with it imported first, and `posbench lm-eval` (console script `posbench-lm-eval`: posbench/cli/lm_eval.py) the
same with one-line errors (a task whose dataset is on an unreachable Hub says how to run it offline).

model_args: pretrained (a run, its `latest` or a step_N dir; `checkpoint` is the same), device (cpu), batch_size
(8), max_length.
max_length is the longest input scored: by default the PE's range when it is bounded (a learned table),
else the training length; a bounded PE caps it. Longer inputs are truncated from the left to their last
max_length tokens, as the harness's own models do, and every call that truncates logs a warning saying so.

- loglikelihood: batches right-padded (a causal model's real tokens never see the pads, and positions
  count from 0 in every row) when the checkpoint's logits on a prefix do not depend on the tokens after
  it, which is probed once (randomized positions and dynamic NTK fail it); otherwise rows of equal length.
- loglikelihood_rolling: the harness's disjoint rolling windows of max_length tokens after a `<|bos|>`
  prefix; on text of k * max_length tokens this is exactly eval.py's non-overlapping protocol at that length.
- generate_until: greedy, with posbench's KV cache (re-running the sequence where positions are drawn per
  sequence), batched over prompts of equal length; stops at `until` strings or max_gen_toks.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from posbench.errors import ConfigError

log = logging.getLogger("posbench.lm_eval")


def _truncation_warning(kind: str, n: int, total: int, limit: int, why: str) -> None:
    log.warning(f"posbench: {n} of {total} {kind} inputs were longer than {limit} tokens ({why}): truncated from "
                f"the left to their last {limit} tokens, as harness models do; their scores are for that shorter "
                "context, not the full one")


def checkpoint_arg(checkpoint: str = "", pretrained: str = "") -> str:
    """The checkpoint that model_args name. `pretrained=` is the harness's own name for the model to load: it also
    names the folder of --output_path (lm_eval's tracker reads it; with `checkpoint=` only, the name is random)."""
    if checkpoint and pretrained and checkpoint != pretrained:
        raise ConfigError(f"model_args: checkpoint={checkpoint} and pretrained={pretrained} differ; give one")
    if not (pretrained or checkpoint):
        raise ConfigError("model_args: name the checkpoint, e.g. --model_args pretrained=checkpoints/RUN (a run "
                          "directory, its `latest` or a step_N directory)")
    return pretrained or checkpoint


def resolve_device(device: str | None) -> str:
    device = device or "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():  # the harness CLI's default device
        log.warning(f"posbench: device={device} but CUDA is not available; running on cpu")
        device = "cpu"
    return device


# checkpoint loaded by `preload` before the harness started, keyed by (argument, device): the model it builds next
# takes it instead of loading the same files again
_PRELOADED: dict[tuple[str, str], object] = {}


def load_checked(checkpoint: str, device: str):
    """posbench's checkpoint load, refused when it is not a language model (a damaged one raises CheckpointError)."""
    from posbench.evaluation.loading import load_model

    loaded = _PRELOADED.pop((checkpoint, device), None) or load_model(checkpoint, device)
    if loaded.cfg.model.arch.not_a_language_model:
        raise ConfigError(f"{loaded.path}: {loaded.cfg.model.arch.not_a_language_model}")
    return loaded


def preload(model_args: dict, device: str | None) -> None:
    """Load (and so check) the checkpoint that `--model posbench` will score before the harness indexes its task
    registry, which takes seconds: a missing or damaged checkpoint is then refused before any of that work."""
    known = {k: str(model_args[k]) for k in ("checkpoint", "pretrained") if model_args.get(k)}
    checkpoint, device = checkpoint_arg(**known), resolve_device(model_args.get("device") or device)
    _PRELOADED.clear()
    _PRELOADED[(checkpoint, device)] = load_checked(checkpoint, device)


@register_model("posbench")
class PosbenchLM(TemplateLM):
    def __init__(self, checkpoint: str = "", device: str = "cpu", batch_size: int | str = 8,
                 max_length: int | None = None, max_batch_size: int | None = None, pretrained: str = "", **kwargs):
        super().__init__()
        from posbench.data.layout import DataLayout
        from posbench.evaluation.generate import supports_cache

        device = resolve_device(device)
        loaded = load_checked(checkpoint_arg(checkpoint, pretrained), device)
        cfg = loaded.cfg
        self.model, self._device = loaded.model, torch.device(device)
        self.tok = DataLayout.from_config(cfg.data).tokenizer.build()
        self.batch_size = 8 if str(batch_size).startswith("auto") else int(batch_size)
        pe = getattr(self.model, "pe", None)
        self.pe_limit = pe.max_positions if pe is not None else None
        self.max_length = int(max_length) if max_length else (self.pe_limit or cfg.model.seq_len)
        if self.pe_limit is not None and self.max_length > self.pe_limit:
            log.warning(f"posbench: max_length={self.max_length} is beyond PE `{cfg.pe.name}`'s "
                        f"{self.pe_limit} positions; using {self.pe_limit}")
            self.max_length = self.pe_limit
        self.why_limit = (f"PE `{cfg.pe.name}` is defined for positions 0..{self.pe_limit - 1}"
                          if self.max_length == self.pe_limit else f"max_length={self.max_length}")
        self.cached = supports_cache(self.model)
        self.pad_ok = self.cached and self._prefix_stable()

    # -- tokens ------------------------------------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self.tok.bos_id  # posbench separates documents with <|bos|>: it is the end of the previous one

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tok.encode(string)

    def tok_decode(self, tokens, **kwargs) -> str:
        # ids past the tokenizer's (embedding rows padded to model.vocab_size) decode to nothing: no text has them
        return self.tok.decode([t for t in tokens if t < self.tok.encoding.n_vocab])

    @torch.no_grad()
    def _logits(self, x_BT: torch.Tensor) -> torch.Tensor:
        return self.model(x_BT.to(self._device)).logits.float()

    @torch.no_grad()
    def _prefix_stable(self) -> bool:
        """Whether the logits of a prefix are the same with more tokens after it (right padding is then exact)."""
        T = self.max_length
        ids = torch.randint(0, 256, (1, T),  # ids every tokenizer has (bytes or byte-level BPE)
                            generator=torch.Generator().manual_seed(0))
        full, prefix = self._logits(ids)[0, : T // 2 + 1], self._logits(ids[:, : T // 2 + 1])[0]
        return bool(torch.allclose(full, prefix, atol=1e-4, rtol=1e-4))

    # -- loglikelihood -----------------------------------------------------------------------------------
    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Indices in batches, longest first; rows of equal length only unless right padding is exact."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        if self.pad_ok:
            return [order[a:a + self.batch_size] for a in range(0, len(order), self.batch_size)]
        groups = defaultdict(list)
        for i in order:
            groups[lengths[i]].append(i)
        return [g[a:a + self.batch_size] for g in groups.values() for a in range(0, len(g), self.batch_size)]

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        rows = []  # (input ids, number of scored tokens at its end, the scored tokens)
        truncated = 0
        for _, context_enc, continuation_enc in requests:
            full = list(context_enc) + list(continuation_enc)
            truncated += len(full) - 1 > self.max_length
            full = full[-(self.max_length + 1):]
            n = min(len(continuation_enc), len(full) - 1)
            rows.append((full[:-1], n, full[-n:]))
        if truncated:
            _truncation_warning("loglikelihood", truncated, len(requests), self.max_length, self.why_limit)
        out: list[tuple[float, bool] | None] = [None] * len(rows)
        for batch in self._batches([len(r[0]) for r in rows]):
            T = max(len(rows[i][0]) for i in batch)
            x_BT = torch.zeros(len(batch), T, dtype=torch.long)
            for b, i in enumerate(batch):
                x_BT[b, : len(rows[i][0])] = torch.tensor(rows[i][0])
            logp_BTV = F.log_softmax(self._logits(x_BT), dim=-1).cpu()
            for b, i in enumerate(batch):
                inp, n, target = rows[i]
                logp_NV = logp_BTV[b, len(inp) - n: len(inp)]
                target_N = torch.tensor(target)
                ll = float(logp_NV.gather(1, target_N[:, None]).sum())
                greedy = bool((logp_NV.argmax(-1) == target_N).all())
                out[i] = (ll, greedy)
                if requests[i][0] is not None:
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], (ll, greedy))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        out = []
        for (string,) in [req.args for req in requests]:
            windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length, context_len=1)]
            scores = self._loglikelihood_tokens([(None, ctx, cont) for ctx, cont in windows])
            total = sum(ll for ll, _ in scores)
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), total)
            out.append(total)
        return out

    # -- generation --------------------------------------------------------------------------------------
    @torch.no_grad()
    def _greedy(self, prompt_BT: torch.Tensor, n_new: int, done) -> list[list[int]]:
        """Greedy tokens per row, at most n_new, stopping early once done(row tokens) holds for every row."""
        cache = self.model.new_cache() if self.cached else None
        seq_BT = prompt_BT.to(self._device)
        logits = (self.model(seq_BT, cache=cache) if cache is not None else self.model(seq_BT)).logits
        new: list[list[int]] = [[] for _ in range(len(prompt_BT))]
        for step in range(n_new):
            next_B = logits[:, -1].float().argmax(-1)
            for b, t in enumerate(next_B.tolist()):
                new[b].append(t)
            if step + 1 == n_new or all(done(row) for row in new):
                break
            if cache is not None:
                logits = self.model(next_B[:, None], cache=cache).logits
            else:
                seq_BT = torch.cat((seq_BT, next_B[:, None]), dim=1)
                logits = self.model(seq_BT).logits
        return new

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        jobs, truncated = [], 0
        for context, gen_kwargs in [req.args for req in requests]:
            kw = dict(gen_kwargs or {})
            until = kw.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            if kw.get("do_sample") or (kw.get("temperature") or 0) > 0:
                log.warning("posbench: generate_until decodes greedily; do_sample/temperature are ignored")
            max_gen = int(kw.get("max_gen_toks", 256))
            max_gen = max(1, min(max_gen, self.max_length - 1))
            ids = self.tok_encode(context) or [self.prefix_token_id]
            keep = self.max_length - max_gen + 1  # the last generated token is never fed back
            truncated += len(ids) > keep
            jobs.append((ids[-keep:], max_gen, until))
        if truncated:
            _truncation_warning("generate_until", truncated, len(requests), self.max_length, self.why_limit
                                + ", including the tokens to generate")
        out: list[str | None] = [None] * len(jobs)
        groups = defaultdict(list)
        for i, (ids, max_gen, until) in enumerate(jobs):
            groups[(len(ids), max_gen, tuple(until))].append(i)
        for (_, max_gen, until), rows in groups.items():

            def done(tokens, until=until):
                return self.eot_token_id in tokens or any(s in self.tok_decode(tokens) for s in until)

            for a in range(0, len(rows), self.batch_size):
                chunk = rows[a:a + self.batch_size]
                prompt_BT = torch.tensor([jobs[i][0] for i in chunk], dtype=torch.long)
                for i, tokens in zip(chunk, self._greedy(prompt_BT, max_gen, done), strict=True):
                    if self.eot_token_id in tokens:
                        tokens = tokens[: tokens.index(self.eot_token_id)]
                    text = self.tok_decode(tokens)
                    for s in until:
                        text = text.split(s)[0]
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return out


if __name__ == "__main__":  # the lm_eval command line with this module (hence `--model posbench`) imported
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()
