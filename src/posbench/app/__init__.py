"""The interactive app (`posbench-app`, `python -m posbench.app`): run a study in the background and watch it,
explore study and eval outputs on disk, try a checkpoint. A Streamlit front end over the project's own
study runner, evaluation outputs and generation; it adds no numbers of its own."""
