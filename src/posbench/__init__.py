"""pos-enc-bench: how positional encodings shape what transformer LMs learn."""

__version__ = "0.1.0"
