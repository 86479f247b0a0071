"""Tokenize a source's files into token shards (shards.py), one output shard per input file.

    input file i of split s  --worker-->  tokens/<source>/<tokenizer>/<s>_<i:05d>.bin
                                          <|bos|> doc <|bos|> doc ...   (uint16, uint32 if vocab > 65536)

Train files get the task mix (`data.mix`, tasks/mix.py): task documents placed among the file's own
documents at the configured share (of tokens, by default), each a task example's text exactly as
eval.py's algorithmic suite asks it (`<|bos|> prompt` + answer). Val and filler shards stay pure
corpus text. When a mixed task defines per-token position ids and the tokenizer gives each of its symbols a token
(token_positions.py), the train and val shards carry a position id per token (version 2): the task's ids in its
documents, 0 elsewhere. The manifest records, per shard, the documents and tokens of each kind (a task name or
"corpus") counted from the tokens written; `prepare_fineweb info` sums them, and `info --verify`
replays the mixing rule over the shards to recount and check them.

Bounded: documents longer than `data.tokenize.max_doc_chars` are split into pieces (counted per shard as
`split_documents`, shown by `info`), parquet row groups decompressing past `max_row_group_bytes` are refused
before any worker starts (readers.py), and files of different splits with the same content are refused
(splits.check_disjoint_content). A failed or interrupted run leaves no temp file (removed in a `finally`), and
worker processes exit when the parent dies (procpool.exit_with_parent), even if it is SIGKILLed.

Determinism: a shard depends only on its input file and the tokenizer, never on the worker count or
the order workers finish, so any run gives byte-identical shards. Idempotence and resume: a shard is
written atomically and then recorded in the manifest with its input's identity (name, size, mtime)
and the tokenizer fingerprint; a re-run redoes exactly the inputs without a matching entry and a
valid shard, so a run killed at any point resumes where it stopped. Workers are spawned processes
(no fork: the parent may hold threads or CUDA) that rebuild the tokenizer from a JSON-able spec.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from posbench.data.corpus_sources import InputFile
from posbench.data.hints import inputs_hint
from posbench.data.layout import DataLayout, shard_name
from posbench.data.manifest import Manifest
from posbench.data.readers import reader_for
from posbench.data.shards import ShardWriter, fingerprint_prefix, read_header
from posbench.data.splits import check_disjoint_content
from posbench.data.tasks.mix import EXAMPLES_PER_FILE, TaskMixConfig, build_mixer, position_tasks
from posbench.data.token_positions import SPLITS_WITH_POSITIONS, TEXT_ID, document_positions
from posbench.data.tokenizers import Tokenizer, tokenizer_from_spec
from posbench.errors import DataError, ShardError
from posbench.fileio import DirLock, remove_stale_temps, sha256_file
from posbench.procpool import exit_with_parent, usable_cores


@dataclass(frozen=True)
class Task:
    split: str
    index: int
    input: str
    output: str
    text_field: str
    batch_rows: int
    mix: TaskMixConfig | None = None  # train files only
    max_doc_chars: int | None = None
    max_row_group_bytes: int = 256 << 20
    positions: bool = False  # a position id per token (version 2 shard, data/token_positions.py)


@dataclass
class TokenizeReport:
    done: int = 0
    skipped: int = 0
    removed: int = 0
    tokens: int = 0
    documents: int = 0
    split_documents: int = 0  # documents longer than max_doc_chars, split into pieces (each counted in documents)
    seconds: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def input_identity(path: Path) -> dict:
    st = path.stat()
    return {"input_name": path.name, "input_size": st.st_size, "input_mtime_ns": st.st_mtime_ns}


def tokenize_file(task: Task, tok: Tokenizer) -> dict:
    """Stream one input file's documents in row batches into one shard (bounded memory)."""
    reader = reader_for(task.input, task.text_field, task.batch_rows, task.max_doc_chars, task.max_row_group_bytes)
    ids_of = {"positions": True} if task.positions else {}
    if task.mix is None or not task.mix.active:
        with ShardWriter(task.output, tok.vocab_size, tok.fingerprint, positions=task.positions) as writer:
            for texts in reader.batches():
                ids = tok.encode_documents(texts)
                if task.positions:  # text documents only: every id is TEXT_ID
                    writer.write(ids, len(texts), np.full(len(ids), TEXT_ID, np.int32))
                else:
                    writer.write(ids, len(texts))
        return {"tokens": writer.n_tokens, "documents": writer.n_docs, "split_documents": reader.split_docs,
                **ids_of}
    mixer = build_mixer(task.mix)
    corpus = (text for texts in reader.batches() for text in texts)
    counts: dict[str, list[int]] = {}
    with ShardWriter(task.output, tok.vocab_size, tok.fingerprint, positions=task.positions) as writer:
        stream = mixer.stream_documents(corpus, lambda text: tok.encode_documents([text]),
                                        task.index * EXAMPLES_PER_FILE)
        for batch in _batched(stream, task.batch_rows):
            for kind, ids, _ in batch:
                c = counts.setdefault(kind, [0, 0])
                c[0] += 1
                c[1] += len(ids)
            positions = (np.concatenate([document_positions(tok, ids, doc) for _, ids, doc in batch])
                         if task.positions else None)
            writer.write(np.concatenate([ids for _, ids, _ in batch]), len(batch), positions)
    mix = {kind: {"documents": d, "tokens": t} for kind, (d, t) in sorted(counts.items())}
    return {"tokens": writer.n_tokens, "documents": writer.n_docs, "split_documents": reader.split_docs, "mix": mix,
            **ids_of}


def _batched(items, n: int):
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch


_WORKER_TOKENIZER: Tokenizer | None = None


def _init_worker(spec: dict, fingerprint: str, parent: int) -> None:
    global _WORKER_TOKENIZER
    exit_with_parent(parent)  # a killed parent must not leave workers (and the resource tracker) behind
    tok = tokenizer_from_spec(spec)
    if tok.fingerprint != fingerprint:  # the tokenizer files changed under us
        raise DataError(f"tokenizer at {spec['folder']} changed during the run; re-run tokenize")
    _WORKER_TOKENIZER = tok


def _run_task(task: Task) -> dict:
    return tokenize_file(task, _WORKER_TOKENIZER)


def split_inputs(layout: DataLayout, splits) -> dict[str, list[InputFile]]:
    """Files on disk grouped by split (files outside every range are ignored)."""
    out: dict[str, list[InputFile]] = {name: [] for name in splits.ranges()}
    for f in layout.source.inputs():
        split = splits.split_of(f.index)
        if split is not None:
            out[split].append(f)
    return out


def _is_done(entry: dict | None, task: Task, tok: Tokenizer) -> bool:
    if entry is None or entry.get("fingerprint") != tok.fingerprint:
        return False
    if any(entry.get(k) != v for k, v in input_identity(Path(task.input)).items()):
        return False
    try:
        header = read_header(task.output)
    except ShardError:
        return False
    return (header.n_tokens == entry["tokens"] and header.fingerprint16 == fingerprint_prefix(tok.fingerprint)
            and header.positions == task.positions)


def ensure_tokenizer(cfg, layout: DataLayout, log=print) -> Tokenizer:
    """Build the tokenizer, training the BPE on the train split first if it has not been trained."""
    kind = layout.tokenizer
    if kind.needs_training and not kind.is_ready():
        from posbench.data.bpe_train import train_bpe

        train = split_inputs(layout, cfg.splits)["train"]
        if not train:
            raise DataError(f"no train files of {layout.source.describe()} on disk to train the BPE on; "
                            + inputs_hint(layout.source.downloadable, len(layout.source.inputs())))

        def texts():
            for f in train:
                for batch in reader_for(f.path, cfg.source.text_field, cfg.tokenize.batch_rows,
                                        cfg.tokenize.max_doc_chars, cfg.tokenize.max_row_group_bytes).batches():
                    yield from batch

        log(f"training the BPE tokenizer (vocab {kind.cfg.vocab_size}) on {len(train)} train files ...")
        train_bpe(kind.cfg, texts(), kind.folder, trained_on=layout.source.describe(), log=log)
    return kind.build()


def train_tokenizer(cfg, force: bool = False, log=print) -> None:
    """`posbench data train-tokenizer`: train `cfg`'s BPE on the downloaded train split, unless one is saved
    (`force`: delete it and train again; its token shards are then redone by `tokenize`)."""
    import shutil

    layout = DataLayout.from_config(cfg)
    kind = layout.tokenizer
    if not kind.needs_training:
        log(f"tokenizer `{kind.cfg.name}` needs no training")
        return
    if kind.is_ready() and not force:
        log(f"a trained tokenizer is already in {kind.folder} (use --force to retrain; its token shards "
            "are then redone by `tokenize`)")
        return
    if force and kind.folder.exists():
        shutil.rmtree(kind.folder)
    tok = ensure_tokenizer(cfg, layout, log)
    log(f"tokenizer ready: vocab {tok.vocab_size}, fingerprint {tok.fingerprint[:16]} in {kind.folder}")


def tokenize(cfg, log=print, workers: int | None = None) -> TokenizeReport:
    """Tokenize every on-disk file of every split of `cfg` (a DataConfig); see the module doc."""
    layout = DataLayout.from_config(cfg)
    by_split = split_inputs(layout, cfg.splits)
    if not by_split["train"] or not by_split["val"]:
        missing = [s for s in ("train", "val") if not by_split[s]]
        raise DataError(f"no {' or '.join(missing)} files of {layout.source.describe()} on disk (ranges "
                        f"{', '.join(f'{k} {v}' for k, v in cfg.splits.ranges().items())}); "
                        + inputs_hint(layout.source.downloadable, len(layout.source.inputs())))
    for files in by_split.values():  # bad inputs fail here, before the tokenizer or any worker starts
        for f in files:
            reader_for(f.path, cfg.source.text_field, cfg.tokenize.batch_rows, cfg.tokenize.max_doc_chars,
                       cfg.tokenize.max_row_group_bytes).check()
    check_disjoint_content((split, str(f.path), f.path.stat().st_size, lambda f=f: sha256_file(f.path))
                           for split, files in by_split.items() for f in files)
    tok = ensure_tokenizer(cfg, layout, log)
    positions = layout.positions
    if position_tasks(cfg.mix) and not positions:
        log(f"note: data.mix task(s) {', '.join(position_tasks(cfg.mix))} define per-token position ids, but "
            f"tokenizer `{layout.tokenizer.cfg.tag()}` can merge several task symbols into one token, so the shards "
            "hold none (text only); a PE that reads them (abacus, coupled) refuses to train on these shards: use "
            "data.tokenizer.name=bytes for it")
    out_dir = layout.tokens_dir
    report = TokenizeReport()
    with DirLock(out_dir, "tokenize"):
        remove_stale_temps(out_dir)
        manifest = Manifest(layout.tokens_manifest, "tokens")
        tasks = [Task(split, f.index, str(f.path), str(out_dir / shard_name(split, f.index)),
                      cfg.source.text_field, cfg.tokenize.batch_rows, cfg.mix if split == "train" else None,
                      cfg.tokenize.max_doc_chars, cfg.tokenize.max_row_group_bytes,
                      positions and split in SPLITS_WITH_POSITIONS)
                 for split, files in by_split.items() for f in files]
        tasks.sort(key=lambda t: t.index)  # val and filler (low indices by default) finish first
        wanted = {Path(t.output).name for t in tasks}
        for name in list(manifest.files):  # shards of files whose split changed, or that were removed
            index = manifest.files[name]["index"]
            if name not in wanted and cfg.splits.split_of(index) != manifest.files[name]["split"]:
                (out_dir / name).unlink(missing_ok=True)
                manifest.remove(name)
                report.removed += 1
        todo = [t for t in tasks if not _is_done(manifest.get(Path(t.output).name), t, tok)]
        report.skipped = len(tasks) - len(todo)
        n_workers = max(1, min(workers or cfg.tokenize.workers or usable_cores(), len(todo)))
        t0 = time.perf_counter()
        results = _execute(todo, tok, layout, n_workers)
        try:
            with tqdm(total=sum(Path(t.input).stat().st_size for t in todo), unit="B", unit_scale=True,
                      unit_divisor=1024, desc=f"tokenize ({n_workers} workers)", disable=None) as bar:
                for task, stats in results:
                    manifest.put(Path(task.output).name, {"split": task.split, "index": task.index, **stats,
                                                          "fingerprint": tok.fingerprint,
                                                          **input_identity(Path(task.input))})
                    report.done += 1
                    report.tokens += stats["tokens"]
                    report.documents += stats["documents"]
                    report.split_documents += stats["split_documents"]
                    bar.update(Path(task.input).stat().st_size)
                    bar.set_postfix(tokens=f"{report.tokens:,}")
        finally:  # the pool is shut down first; a worker that died (OOM, killed) could not remove its temp shard
            results.close()
            remove_stale_temps(out_dir)
        report.seconds = time.perf_counter() - t0
    log(f"tokenized {report.done} files ({report.skipped} already done): {report.tokens:,} tokens, "
        f"{report.documents:,} documents in {report.seconds:.1f}s = {report.tokens_per_s:,.0f} tokens/s "
        f"-> {out_dir}" + (f"; {report.split_documents:,} documents longer than data.tokenize.max_doc_chars="
                           f"{cfg.tokenize.max_doc_chars:,} were split into pieces" if report.split_documents else ""))
    return report


def _execute(todo: list[Task], tok: Tokenizer, layout: DataLayout, n_workers: int):
    """Yield (task, stats) as tasks finish: in this process for one worker, else spawned processes."""
    if not todo:
        return
    if n_workers == 1:
        for task in todo:
            yield task, tokenize_file(task, tok)
        return
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(n_workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(layout.tokenizer.spec(), tok.fingerprint, os.getpid())) as pool:
        futures = {pool.submit(_run_task, t): t for t in todo}
        try:
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        except BrokenProcessPool:
            raise DataError("a tokenizer worker process died (killed, out of memory, or it could not start); "
                            "finished shards are kept: re-run to resume, or set data.tokenize.workers=1 to "
                            "tokenize in this process") from None
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise

