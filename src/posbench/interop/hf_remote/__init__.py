"""The two files written next to an exported checkpoint whose PE has no transformers architecture.

They are copied verbatim into the export directory and loaded there by transformers with
`trust_remote_code=True`, so they import only torch and transformers, never posbench."""
