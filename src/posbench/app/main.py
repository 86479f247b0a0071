"""The Streamlit script (`streamlit run` runs it top to bottom on every interaction): page choice in the
sidebar, one module per page."""

import streamlit as st

from posbench.app.views import explore, run, try_ckpt

PAGES = {"Run a study": run.page, "Explore results": explore.page, "Try a checkpoint": try_ckpt.page}

st.set_page_config(page_title="posbench", layout="wide")
st.sidebar.title("posbench")
choice = st.sidebar.radio("Page", list(PAGES), key="page")
PAGES[choice]()
