"""Package layout that pyproject.toml alone cannot express: the repository-root `configs/` tree
(where users and docs expect the presets) ships inside the wheel as `posbench/configs/`, recursively,
so a non-editable install finds every preset. Everything else lives in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=find_packages("src") + ["posbench.configs"],
    package_dir={"": "src", "posbench.configs": "configs"},
    package_data={"posbench": ["py.typed"], "posbench.configs": ["**/*.yaml"]},
)
