"""Run a study: the fields (quickstart defaults) with the study's cost on this machine, an explicit Start
(nothing starts on Enter), the study in the background, then watch: progress, a Stop button, live training
losses (colour per PE, dash per seed), learning curves, and the results as cells finish. The run is found
again after a refresh through the `run` query parameter, or picked from the runs the app started."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from posbench.app import background, charts
from posbench.app.app_paths import runs_root
from posbench.app.outputs import in_study_order, live_losses, read_cells
from posbench.app.studyform import ARM_EXAMPLE, DIMS, build_study, defaults
from posbench.app.views.study import show_study
from posbench.config_loader import from_dict, to_dict
from posbench.errors import ConfigError, PosbenchError
from posbench.pe import PES
from posbench.studies.study_runner import estimate_text
from posbench.studies.study_spec import StudyConfig, expand

POLL_S = 2.0


def page() -> None:
    st.header("Run a study")
    root = runs_root()
    _form(root)
    runs = background.app_runs(root)
    if not runs:
        st.caption(f"Studies started here are kept under {root}.")
        return
    names = [p.name for p in runs]
    current = st.query_params.get("run")
    index = names.index(current) if current in names else 0
    name = st.selectbox("Study", names, index=index, key="run_pick",
                        help="every study started from this page; running ones keep running when the page closes")
    st.query_params["run"] = name
    _monitor(root / name)


def _form(root) -> None:
    """The study's fields, then what it would cost, then an explicit Start button. Not an st.form: Enter in a
    field (or Ctrl+Enter in Tasks) only applies the value, and the estimate follows every change."""
    d = defaults()
    with st.expander("New study", expanded=not background.app_runs(root)):
        form = {"name": st.text_input("Name", d["name"], key="f_name"),
                "tasks": st.text_area("Tasks (one per line)", d["tasks"], key="f_tasks"),
                "pes": st.multiselect("PEs", PES.names(), default=d["pes"], key="f_pes"),
                "arms": st.text_area("Arms (optional, one per line: a labelled row with its own PE options)", "",
                                     key="f_arms", placeholder=ARM_EXAMPLE,
                                     help="an ablation of one PE's options: docs/studies.md, Arms"),
                "seeds": st.text_input("Seeds", d["seeds"], key="f_seeds")}
        cols = st.columns(4)
        form["steps"] = cols[0].number_input("Steps", 2, 100000, d["steps"], key="f_steps")
        form["batch_size"] = cols[1].number_input("Batch", 1, 4096, d["batch_size"], key="f_batch")
        form["lr"] = cols[2].number_input("Learning rate", 1e-6, 1.0, d["lr"], format="%.4g", key="f_lr")
        form["workers"] = cols[3].number_input("Worker processes", 1, 64, d["workers"], key="f_workers")
        cols = st.columns(len(DIMS))
        for col, dim in zip(cols, DIMS):
            form[dim] = col.number_input(dim, 1, 8192, d[dim], key=f"f_{dim}")
        form["other_overrides"] = d["other_overrides"]
        form["keep_checkpoints"] = st.checkbox("Keep each cell's final checkpoint (to open it on the Try page)",
                                               False, key="f_keep",
                                               help="kept in <study>/checkpoints/<cell>; off, a cell's training run "
                                                    "is deleted once it is scored")
        try:
            study = build_study(form)
            cost = _estimate(json.dumps(to_dict(study), sort_keys=True), str(root / study.name))
            st.info(f"**Cost**: {cost}", icon=":material/timer:")
        except (ConfigError, ValueError) as e:  # checked as the fields change: Start stays off until fixed
            study = None
            st.error(f"Cannot start the study: {e}")
        if not st.button("Start study", type="primary", key="start", disabled=study is None) or study is None:
            return
    try:
        started = background.start(study, root / study.name)
    except (PosbenchError, ValueError, OSError) as e:  # another study's name, a file or no permission in the way
        st.error(f"Cannot start the study: {e}")
        return
    st.query_params["run"] = study.name
    st.session_state["run_pick"] = study.name
    if not started:
        st.info(f"`{study.name}` is already running; showing it.")


@st.cache_data(max_entries=16, ttl=10, show_spinner=False)  # ttl: cells finish meanwhile
def _estimate(spec: str, run_dir: str) -> str:
    """The cost line of a study (by its spec), skipping the cells already finished in `run_dir`: the line
    `posbench study SPEC --out RUN_DIR --estimate` prints."""
    return estimate_text(from_dict(StudyConfig, json.loads(spec), "study"), Path(run_dir))


def _monitor(run_dir) -> None:
    try:
        state = background.state(run_dir)
    except (ConfigError, ValueError, OSError, PosbenchError) as e:  # each names the file (spec, pid, status)
        st.error(f"{run_dir}: cannot read this study's files ({e})")
        return
    # while it runs, only this part of the page re-runs every POLL_S seconds: the rest stays usable
    st.fragment(run_every=POLL_S if state.state == "running" else None)(_progress)(run_dir, state.state)


def _progress(run_dir, started_as: str) -> None:
    try:
        _show_progress(run_dir, started_as)
    except (ValueError, OSError, PosbenchError) as e:  # a file damaged while the page polls: one line naming it
        st.error(f"{run_dir}: cannot read this study's files ({e})")


def _show_progress(run_dir, started_as: str) -> None:
    state = background.state(run_dir)
    if state.state != started_as:  # finished or stopped: redraw the whole page once (and stop polling)
        st.rerun(scope="app")
    st.progress(state.done / max(1, state.total), text=f"{state.done} / {state.total} cells finished ({state.state})")
    if state.state == "failed":
        st.error(f"The study failed: {state.error} (logs in {run_dir / 'logs'})")
    if state.state == "running" and st.button("Stop", key="stop", icon=":material/stop:",
                                              help="ends the study's processes; finished cells are kept and a "
                                                   "resume skips them (the cells in training start over)"):
        background.stop(run_dir)
        st.rerun(scope="app")
    if state.state in ("failed", "stopped") and st.button("Resume (finished cells are kept)", key="resume"):
        background.start(background.read_spec(run_dir), run_dir)
        st.rerun(scope="app")
    spec = background.read_spec(run_dir)
    grid = {c.cell_id: c for c in expand(spec)}
    cells = in_study_order(read_cells(run_dir), list(grid))  # legends in the study's order, as its PNGs
    losses = {c.cell_id: c.train_loss for c in cells}
    if state.state == "running":  # a stopped run's half-trained cells are not live
        losses.update(live_losses(run_dir))
    tasks = [t.name for t in spec.tasks]
    if losses and len(tasks) > 1:  # one PE and seed in two tasks would share a colour and a dash: one task at a time
        task = st.selectbox("Training loss of the task", tasks, key="live_loss_task")
        losses = {cid: rows for cid, rows in losses.items() if cid in grid and grid[cid].task.name == task}
    if losses:
        order = [cid for cid in grid if cid in losses]  # the study's order: its rows (PEs), then seeds
        st.plotly_chart(charts.loss_curves({cid: losses[cid] for cid in order},
                                           "training loss per cell (live; colour: PE, dash: seed)",
                                           groups={cid: grid[cid].label for cid in order},
                                           dashes={cid: spec.seeds.index(grid[cid].seed) for cid in order}),
                        key="live_loss")
    show_study(cells, spec, key="run")
