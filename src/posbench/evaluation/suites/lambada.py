"""LAMBADA (Paperno et al. 2016): predict the last word of a passage whose answer needs the whole passage.

Shape legend: B passages in a batch, T tokens (context + target, right-padded), V vocabulary.

Each passage is split at its last space: context = everything before, target = " " + the last word
(lm-evaluation-harness's `lambada_openai` split). Context and target are tokenized separately, the context
after <|bos|> as training documents are, and scored teacher-forced in one forward:
    accuracy    every target token is the argmax at its position (the harness's `acc`, greedy match)
    perplexity  exp(mean over passages of -log p(target | context)), the harness's `perplexity`
Passages longer than the training length keep their last train_len tokens (the target always fits).
Data: the file `python -m posbench.evaluation.prepare_data lambada` verified under data.root, or
`lambada.path` (jsonl / parquet with a `text` field).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from posbench.config_loader import Checked
from posbench.data.readers import reader_for
from posbench.errors import ConfigError, DataError
from posbench.evaluation import data_ids
from posbench.evaluation.eval_sets import prepared_files
from posbench.evaluation.evaluator import Evaluator, Session, Target
from posbench.evaluation.markdown import fmt, md_table, pct
from posbench.evaluation.suite_registry import SUITES


@dataclass(frozen=True)
class LambadaConfig(Checked):
    path: str = ""  # "" = the prepared download under the checkpoint's data.root
    text_field: str = "text"
    max_examples: int = 0  # 0 = all (5,153 in the OpenAI test set)

    def check(self) -> None:
        if self.max_examples < 0:
            raise ConfigError(f"lambada.max_examples must be >= 0 (0 = all), got {self.max_examples}")


def split_last_word(text: str) -> tuple[str, str]:
    """(context, " " + last word): the target carries its leading space, as the harness splits it."""
    text = text.strip()
    cut = text.rfind(" ")
    if cut <= 0:
        raise DataError(f"LAMBADA passage without a context word: {text[:60]!r}")
    return text[:cut], text[cut:]


@SUITES.register("lambada")
class Lambada(Evaluator):
    title = "LAMBADA last-word prediction"
    options = LambadaConfig
    order = 5
    in_all = False  # needs data fetched beforehand (posbench data download-eval)
    per_cell = "max_examples"  # one cell: the first passages of the file

    def __init__(self, cfg: LambadaConfig, target: Target):
        super().__init__(cfg, target)
        path = Path(cfg.path) if cfg.path else None
        if path is None:
            found = prepared_files("lambada", target.run_cfg.data.root)
            if not found:
                raise DataError(f"lambada: no data under {target.run_cfg.data.root}/raw; fetch it once with "
                                "`python -m posbench.evaluation.prepare_data lambada` or set lambada.path")
            path = found[0]
        reader = reader_for(path, cfg.text_field)
        reader.check()
        texts = [t for batch in reader.batches() for t in batch if t and t.strip()]
        self.texts = texts[: cfg.max_examples or None]
        if not self.texts:
            raise DataError(f"lambada: {path} holds no passages")
        self.source = str(path)
        tok, L = target.tokenizer, target.train_len
        self.rows = []  # (tokens, index of the first target token)
        for text in self.texts:
            context, word = split_last_word(text)
            ctx = [int(i) for i in tok.encode_documents([context])]
            tgt = tok.encode(word)
            ids = (ctx + tgt)[-(L + 1):]  # input is ids[:-1]: at most L positions
            self.rows.append((ids, len(ids) - len(tgt)))

    def work(self) -> int:
        return len(self.rows)

    def run(self, session: Session) -> dict:
        correct, nll = 0, []
        B = self.target.batch_size
        with_ids = data_ids.trained_with_ids(self.target.run_cfg)
        for a in range(0, len(self.rows), B):
            batch = self.rows[a:a + B]
            T = max(len(ids) for ids, _ in batch) - 1
            x_BT = torch.zeros(len(batch), T, dtype=torch.long)
            y_BT = torch.zeros(len(batch), T, dtype=torch.long)
            for b, (ids, _) in enumerate(batch):  # right padding: causal attention never looks at it
                t = torch.tensor(ids)
                x_BT[b, : len(ids) - 1], y_BT[b, : len(ids) - 1] = t[:-1], t[1:]
            x_BT, y_BT = x_BT.to(session.device), y_BT.to(session.device)
            with torch.no_grad(), session.autocast():
                # TEXT_ID per token for a run that trained with the data's ids (evaluation/data_ids.py)
                h_BTD, _ = session.model.hidden(x_BT, **data_ids.text_ids(with_ids, x_BT))
                for b, (ids, first) in enumerate(batch):
                    span = slice(first - 1, len(ids) - 1)  # positions whose next token is a target token
                    logits = session.model.lm_head(h_BTD[b, span]).float()  # only the target's few rows
                    y = y_BT[b, span]
                    correct += bool((logits.argmax(-1) == y).all())
                    nll.append(float(F.cross_entropy(logits, y, reduction="sum")))
            session.progress.update(len(batch))
        mean_nll = sum(nll) / len(nll)
        return {"data": self.source, "examples": len(self.rows), "accuracy": correct / len(self.rows),
                "nll": mean_nll, "ppl": math.exp(mean_nll) if mean_nll < 700 else None,
                "train_len": self.target.train_len, "positions": data_ids.text_positions(self.target.run_cfg)}

    @classmethod
    def markdown(cls, result: dict) -> str:
        return "\n".join([f"Data: {result['data']} ({result['examples']} passages).", "",
                          md_table(["accuracy", "last-word ppl", "mean NLL"],
                                   [[pct(result["accuracy"]), fmt(result["ppl"], 2), fmt(result["nll"])]])])

    @classmethod
    def comparison(cls, results: dict[str, dict]) -> str:
        rows = [[label, pct(r["accuracy"]), fmt(r["ppl"], 2)] for label, r in results.items()]
        return md_table(["checkpoint", "accuracy", "last-word ppl"], rows)
