"""Reading YAML written by users: PyYAML's safe loader, refusing duplicate keys.

PyYAML's `safe_load` silently keeps the last of two equal keys in a mapping, so a target file or
config with `steps: 64` and, further down, `steps: 8` runs with 8 and nobody is told. Every YAML
that mcd-cli reads (target files, `--config`, `--param` values) goes through `load`, which builds
plain data exactly as `yaml.safe_load` does (no tags, nothing executed) but raises
`DuplicateKeyError`, naming the key and its line, when a mapping repeats a key.

Example:
    >>> load("a: 1\\nb: [2, 3]")
    {'a': 1, 'b': [2, 3]}
    >>> load("steps: 64\\nsteps: 8")
    Traceback (most recent call last):
    ...
    mcd_cli.io.safeyaml.DuplicateKeyError: while constructing a mapping
    ...
    duplicate key 'steps' (first on line 1)
    ...
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["DuplicateKeyError", "load"]


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping repeats a key; `problem_mark` points at the repeat."""


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults` followed by an override of one of them is allowed
                key = self.construct_object(key_node, deep=True)
                try:
                    repeated = key in first_line
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if repeated:
                    raise DuplicateKeyError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key!r} (first on line {first_line[key]})", key_node.start_mark,
                    )
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def load(text: str) -> Any:
    """Plain data from YAML text, as `yaml.safe_load`, but a repeated mapping key is an error.

    Raises:
        DuplicateKeyError: a mapping repeats a key (a `yaml.YAMLError`, with the line).
        yaml.YAMLError: anything `yaml.safe_load` rejects.
    """
    return yaml.load(text, Loader=_Loader)  # noqa: S506 — _Loader is a SafeLoader
