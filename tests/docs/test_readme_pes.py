"""The README's PE table lists every registered PE once, each linked to the file that registers it, and every recipe
preset linked to its YAML."""

import inspect
import re
from pathlib import Path

from posbench.pe import PES

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[(\w+)\]\(((?:src|configs)/[\w/]+\.(?:py|yaml))\)")


def table_links() -> list[tuple[str, str]]:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("| family | what it does | PEs |")
    end = next(i for i, line in enumerate(lines[start:]) if not line.startswith("|"))
    return [m for line in lines[start + 2:start + end] for m in LINK.findall(line)]


def test_every_pe_is_in_the_table_once_linked_to_its_source():
    links = table_links()
    pes = {name: path for name, path in links if path.startswith("src/")}
    assert sorted(pes) == sorted(PES.names()) and len(pes) == sum(p.startswith("src/") for _, p in links)
    for name, path in pes.items():
        assert Path(inspect.getsourcefile(PES.get(name))).resolve() == (ROOT / path).resolve(), name


def test_every_recipe_is_in_the_table_linked_to_its_file():
    recipes = {name: path for name, path in table_links() if path.startswith("configs/")}
    assert sorted(recipes) == sorted(p.stem for p in (ROOT / "configs" / "recipe").glob("*.yaml"))
    assert all((ROOT / path).is_file() for path in recipes.values())
