"""Reading YAML bounded: every YAML text posbench reads (a config file, a checkpoint's config.yaml, an override's
value) goes through `parse_yaml`.

Bounded (design rule: bounded): a file larger than MAX_CONFIG_BYTES is refused before it is
read, nesting deeper than MAX_DEPTH is refused while the YAML is composed (before Python's recursion limit),
anchors and aliases are allowed but the document they expand to may hold at most MAX_NODES nodes (a
"billion laughs" file of 3 KB is refused in milliseconds), and a key given twice in one mapping is an error
naming the key and both lines (the last one silently winning hides typos). Messages show values through
`posbench.errors.brief`, bounded whatever the value.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from posbench.errors import ConfigError, brief, brief_key, user_path_error

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB; the largest preset is 3 KB
MAX_DEPTH = 32  # nested mappings/lists; a run config is 4 deep
MAX_NODES = 100_000  # scalars, lists and mappings in the document with every alias expanded


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error as one short phrase with its position (the library's text spans several lines)."""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


class YAMLLimitError(yaml.MarkedYAMLError):
    """The YAML is well formed but beyond a limit (depth, expanded size) or ambiguous (a key given twice)."""


class _BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that counts nesting while composing and refuses duplicate keys while constructing."""

    def __init__(self, stream):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise YAMLLimitError(problem=f"nested deeper than {MAX_DEPTH} levels",
                                     problem_mark=self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            lines: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue  # `<<: *base` merges are meant to be overridden
                key = self.construct_object(key_node)
                if key in lines:
                    raise YAMLLimitError(problem=f"key `{brief_key(key)}` given twice (lines {lines[key]} and "
                                                 f"{key_node.start_mark.line + 1}); keep one")
                lines[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def _expanded_size(node: yaml.Node) -> None:
    """Refuse a document whose aliases expand past MAX_NODES nodes or MAX_DEPTH levels, or refer to
    themselves; a pass over the composed graph, each node counted once (so the check itself is linear)."""
    memo: dict[int, tuple[int, int]] = {}
    open_: set[int] = set()

    def size(n: yaml.Node) -> tuple[int, int]:  # (nodes when expanded, depth when expanded)
        if id(n) in memo:
            return memo[id(n)]
        if id(n) in open_:
            raise YAMLLimitError(problem="an alias refers to the node that contains it", problem_mark=n.start_mark)
        children = [] if isinstance(n, yaml.ScalarNode) else (
            n.value if isinstance(n, yaml.SequenceNode) else [c for pair in n.value for c in pair])
        open_.add(id(n))
        count, depth = 1, 1
        for c in children:
            c_count, c_depth = size(c)
            count, depth = count + c_count, max(depth, c_depth + 1)
            if count > MAX_NODES or depth > MAX_DEPTH:
                what = f"more than {MAX_NODES:,} values" if count > MAX_NODES else f"deeper than {MAX_DEPTH} levels"
                raise YAMLLimitError(problem=f"its anchors and aliases expand to {what}", problem_mark=n.start_mark)
        open_.discard(id(n))
        memo[id(n)] = (count, depth)
        return count, depth

    size(node)


def parse_yaml(text: str):
    """YAML text -> Python values with yaml.SafeLoader's types, within the module's limits. Raises
    yaml.YAMLError (YAMLLimitError for a limit) or ValueError (a value PyYAML cannot build, e.g. an integer
    of 5000 digits or the date 2024-13-45)."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_bounded(path: Path, limit: int, what: str = "a config") -> bytes:
    """The bytes of a regular file the user gave, refused (ConfigError) past `limit` bytes, before it is read
    (and the read itself stops at limit + 1, should the file grow meanwhile)."""
    try:
        size = path.stat().st_size
        if size <= limit:
            with path.open("rb") as f:
                data = f.read(limit + 1)
            size = len(data)
    except OSError as e:  # the user's file exists but cannot be read (permissions, a FIFO gone, ...)
        raise user_path_error(e) from e
    if size > limit:
        raise ConfigError(f"{path}: {size:,} bytes is more than {what} may hold ({limit:,} bytes); is it the "
                          "right file?")
    return data


def load_yaml(path: str | Path, limit: int = MAX_CONFIG_BYTES) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    raw = read_bounded(path, limit)
    try:
        data = parse_yaml(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {e.start}); pass a YAML config") from None
    except YAMLLimitError as e:
        raise ConfigError(f"{path}: refused: {yaml_problem(e)}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {yaml_problem(e)}") from None
    except ValueError as e:
        raise ConfigError(f"{path}: a value YAML cannot build: {brief(str(e), 120)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data
