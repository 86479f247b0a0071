"""Which rows the kernels mode runs, in which order, as data: the throughput table's rows (each library option of
model.kernels on and off, one at a time and then all, per size; then the PEs) and which rows of each table were
measured on a GPU before (docs/performance.md, "Measured on one H100"). A lent GPU call is short: rows never
measured run before rows measured last time, so a budget that runs out costs repeats, not news."""

from __future__ import annotations

from dataclasses import dataclass

from posbench.model.kernels_config import PIECES

# (size, PE) of the throughput rows measured on the H100 (tiny, every option at torch)
MEASURED_THROUGHPUT = {("tiny", "rope"), ("tiny", "alibi"), ("tiny", "none"), ("tiny", "rnope_swa")}
# (case, row) of the correctness rows measured there; a row is a kernel name, "compiled" or "kv-cache"
MEASURED_CORRECTNESS = {("rope", "sdpa"), ("rope", "flex"), ("rope", "sdpa_bias"), ("rope", "compiled"),
                        ("rope", "kv-cache"), ("alibi", "flex"), ("alibi", "sdpa_bias"), ("alibi", "compiled")}


@dataclass(frozen=True)
class ThroughputRow:
    """One timed run of the loop: a size, a PE and the model.kernels options it sets (none: torch's everywhere)."""

    size: str
    pe: str
    options: tuple[tuple[str, str], ...] = ()  # (piece, option) pairs of model.kernels

    @property
    def overrides(self) -> list[str]:
        return [f"model.kernels.{piece}={name}" for piece, name in self.options]

    @property
    def label(self) -> str:
        return ", ".join(f"{piece}={name}" for piece, name in self.options) or "torch"

    @property
    def measured(self) -> bool:
        return not self.options and (self.size, self.pe) in MEASURED_THROUGHPUT

    def unusable(self, device_type: str) -> str | None:
        """Why one of its options cannot run here (a package missing, no kernel for the device), else None."""
        for piece, name in self.options:
            reason = PIECES[piece].get(name).supports(device_type)
            if reason:
                return f"model.kernels.{piece}={name}: {reason}"
        return None


def library_options() -> list[tuple[str, str]]:
    """Every (piece, option) of model.kernels but torch's, from the registries (a new option is a new row)."""
    return [(piece, name) for piece, registry in PIECES.items() for name in registry.names() if name != "torch"]


def all_on() -> list[tuple[tuple[str, str], ...]]:
    """Every option on at once, one set per option of the piece with the most (the losses): each loss with the
    library norm and MLP."""
    options = library_options()
    by_piece: dict[str, list[str]] = {}
    for piece, name in options:
        by_piece.setdefault(piece, []).append(name)
    widest = max(by_piece, key=lambda p: len(by_piece[p]))
    rest = tuple((p, names[0]) for p, names in by_piece.items() if p != widest)
    return [((widest, name), *rest) for name in by_piece[widest]]


def throughput_rows(sizes: list[str], pes: list[str]) -> list[ThroughputRow]:
    """Per size, the first PE with torch's kernels (the anchor the options are compared with), each library option
    alone, then all at once; the other PEs at the first size. The first row is the profiled one and stays first;
    the rest run never-measured first (a stable order otherwise)."""
    anchor, *others = pes
    rows = []
    for i, size in enumerate(sizes):
        rows.append(ThroughputRow(size, anchor))
        rows += [ThroughputRow(size, anchor, (option,)) for option in library_options()]
        rows += [ThroughputRow(size, anchor, options) for options in all_on()]
        if i == 0:
            rows += [ThroughputRow(size, pe) for pe in others]
    return rows[:1] + sorted(rows[1:], key=lambda r: r.measured)
