"""The target convention every layer shares (task rows, the loss, the scorers): a position with nothing to
predict has target IGNORE, PyTorch's cross-entropy `ignore_index`. Imports nothing, so data/, model/ and
evaluation/ can all use it without importing each other."""

IGNORE = -100


class Rows(tuple):
    """A batch of rows: the pair (inputs_BT, targets_BT) every reader unpacks (`x, y = rows`), and `positions`,
    the per-token position ids (B, T) the data defines (a task's digit places: position is data), None where it
    defines none. A tuple, so sources and readers that know nothing of positions keep working unchanged."""

    positions = None

    def __new__(cls, inputs, targets, positions=None):
        rows = super().__new__(cls, (inputs, targets))
        rows.positions = positions
        return rows

    def __getnewargs__(self):  # pickle and copy rebuild it with its positions (tuple's own gives one argument)
        return (self[0], self[1], self.positions)


def positions_of(rows) -> object | None:
    """The data's position ids of a batch a source returned: `Rows.positions`, None for a plain (inputs, targets)
    pair."""
    return rows.positions if isinstance(rows, Rows) else None
