"""The target convention every layer shares (task rows, the loss, the scorers): a position with nothing to
predict has target IGNORE, PyTorch's cross-entropy `ignore_index`. Imports nothing, so data/, model/ and
evaluation/ can all use it without importing each other."""

IGNORE = -100
