"""Evaluators: perplexity vs length, algorithmic tasks, passkey, needle-in-a-haystack."""
