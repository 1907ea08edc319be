"""Add entries to a YAML file by inserting text, so every byte of what was there stays as it was.

A round-trip dump (ruamel.yaml's, or any other) re-indents a file to one style and moves comments
that sit between entries; a bot's files often mix styles (Rasa's own starter bot does). So the file
is only *read* with ruamel.yaml's composer, for the exact place of each node, and new entries are
inserted as text after the last entry of their section, in that section's indentation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mcp_bridge.errors import ConfigError


def compose(text: str, where: str) -> Node | None:
    """The YAML node tree of ``text`` with positions; ConfigError naming ``where`` if it is not YAML."""
    try:
        node: Node | None = YAML(typ="rt").compose(text)
    except YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None
    return node


def load(text: str, where: str) -> Any:
    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}") from None


def top_level(root: Node | None, key: str) -> tuple[ScalarNode, Node] | None:
    """The key node and value node of a top-level ``key``, or None."""
    if not isinstance(root, MappingNode):
        return None
    for key_node, value_node in root.value:
        if isinstance(key_node, ScalarNode) and key_node.value == key:
            return key_node, value_node
    return None


def entry_name(node: Node) -> str | None:
    """The name a list entry stands for: ``- affirm`` or ``- affirm: {use_entities: []}``."""
    if isinstance(node, ScalarNode):
        return str(node.value)
    if isinstance(node, MappingNode) and len(node.value) == 1 and isinstance(node.value[0][0], ScalarNode):
        return str(node.value[0][0].value)
    return None


def _last_content_index(text: str, node: Node) -> int:
    """Index just past the last non-blank character that belongs to ``node``."""
    if isinstance(node, MappingNode | SequenceNode) and not node.flow_style and node.value:
        last = node.value[-1]
        return _last_content_index(text, last[1] if isinstance(node, MappingNode) else last)
    end: int = node.end_mark.index
    while end > 0 and text[end - 1] in " \t\r\n":
        end -= 1
    return end


def _line_end(text: str, index: int) -> int:
    """Index of the start of the line after the one holding ``index`` (len(text) at the end)."""
    newline = text.find("\n", index)
    return len(text) if newline == -1 else newline + 1


def reindent(block: str, by: int) -> str:
    if by == 0:
        return block
    lines = block.splitlines(keepends=True)
    if by > 0:
        return "".join(" " * by + line if line.strip() else line for line in lines)
    return "".join(line[-by:] if line[:-by].strip() == "" else line for line in lines)


@dataclass
class Splice:
    """Insertions into one file's text, applied together (positions refer to the original text)."""

    text: str
    where: str
    inserts: list[tuple[int, str]] = field(default_factory=list)
    appended: list[str] = field(default_factory=list)
    # (start, end, text): text[start:end] replaced (an empty flow list by a block list)
    replaced: list[tuple[int, int, str]] = field(default_factory=list)

    def root(self) -> Node | None:
        return compose(self.text, self.where)

    def add_list_items(self, key: str, items: list[str]) -> None:
        """Add ``- item`` lines (each item's text may span lines, as written at indent 0) to a list."""
        found = top_level(self.root(), key)
        if found is None:
            self.appended.append(f"{key}:\n" + "".join(reindent(item, 2) for item in items))
            return
        key_node, value = found
        if isinstance(value, SequenceNode) and not value.flow_style and value.value:
            first = value.value[0]
            line_start = self.text.rfind("\n", 0, first.start_mark.index) + 1
            dash = self.text.index("-", line_start) - line_start
            self._insert_after(value, items, dash)
        elif isinstance(value, SequenceNode) and value.flow_style and _all_scalars(items):
            close = self._flow_close(value)
            empty = not value.value
            names = ", ".join(item.strip().removeprefix("- ").strip() for item in items)
            self.inserts.append((close, names if empty else f", {names}"))
        elif isinstance(value, SequenceNode) and value.flow_style and not value.value:
            # `key: []` and items of several lines: the [] goes, the items follow on the next lines
            # (a comment after [] stays on the key's line).
            start, end = value.start_mark.index, value.end_mark.index
            while start > 0 and self.text[start - 1] == " ":
                start -= 1
            self.replaced.append((start, end, ""))
            self._insert_under(key_node, items)
        elif _is_empty(self.text, value):
            self._insert_under(key_node, items)
        else:
            raise ConfigError(
                f"{self.where}: {key}: cannot add {', '.join(i.strip() for i in items)} to it; "
                "write it as a block list (one '- name' per line) and run init again"
            )

    def add_map_entries(self, key: str, entries: list[str], *, spaced: bool = False) -> None:
        """Add entries (each written at indent 0, with its comments) to a top-level mapping.

        ``spaced``: a blank line before each entry (as responses are usually written).
        """
        found = top_level(self.root(), key)
        gap = "\n" if spaced else ""
        if found is None:
            self.appended.append(f"{key}:\n" + gap.join(reindent(entry, 2) for entry in entries))
            return
        entries = [gap + entry for entry in entries]
        key_node, value = found
        if isinstance(value, MappingNode) and not value.flow_style and value.value:
            self._insert_after(value, entries, value.value[0][0].start_mark.column)
        elif _is_empty(self.text, value):
            self._insert_under(key_node, entries)
        else:
            raise ConfigError(
                f"{self.where}: {key}: cannot add entries to it; write it as a block mapping "
                "(one 'name:' per line) and run init again"
            )

    def append(self, block: str) -> None:
        self.appended.append(block)

    def _insert_after(self, value: Node, blocks: list[str], indent: int) -> None:
        """Insert ``blocks`` (each written at indent 0) on the lines after ``value``'s last content,
        indented by ``indent``."""
        at = _line_end(self.text, _last_content_index(self.text, value))
        self.inserts.append((at, "".join(reindent(block, indent) for block in blocks)))

    def _insert_under(self, key_node: Node, blocks: list[str]) -> None:
        """Insert ``blocks`` (each written at indent 0) on the lines after an empty ``key:``, indented
        two columns past the key."""
        at = _line_end(self.text, key_node.end_mark.index)
        indent = key_node.start_mark.column + 2
        self.inserts.append((at, "".join(reindent(block, indent) for block in blocks)))

    def _flow_close(self, node: Node) -> int:
        close: int = node.end_mark.index - 1
        while close > 0 and self.text[close - 1] in " \t\r\n":
            close -= 1
        return close

    @property
    def changed(self) -> bool:
        return bool(self.inserts or self.appended or self.replaced)

    def result(self) -> str:
        text = self.text
        edits = [(at, at, insert) for at, insert in self.inserts] + self.replaced
        for at, end, insert in sorted(edits, key=lambda item: item[0], reverse=True):
            if at == end and at > 0 and text[at - 1] != "\n" and insert.startswith(" "):
                if not text[at - 1].isspace():
                    insert = "\n" + insert
            text = text[:at] + insert + text[end:]
        if self.appended:
            if text and not text.endswith("\n"):
                text += "\n"
            for block in self.appended:
                text += ("\n" if text.strip() and not text.endswith("\n\n") else "") + block
        return text


def _all_scalars(items: list[str]) -> bool:
    return all("\n" not in item.strip() and ":" not in item for item in items)


def _is_empty(text: str, node: Node) -> bool:
    """A key with nothing after it (``actions:``), which YAML reads as null."""
    return (
        isinstance(node, ScalarNode)
        and node.value in ("", None)
        and node.start_mark.index == node.end_mark.index
        and not node.style
    )


def block_of(text: str, node: Node, start_line: int, indent: int) -> str:
    """The text of an entry from ``start_line`` (its first comment line) to its end, at indent 0."""
    lines = text.splitlines(keepends=True)
    start = sum(len(line) for line in lines[:start_line])
    end = _line_end(text, _last_content_index(text, node))
    return reindent(text[start:end], -indent)


def leading_comment_line(text: str, line: int, indent: int) -> int:
    """The first line of the comment block right above ``line`` at the same indentation."""
    lines = text.splitlines()
    while line > 0:
        above = lines[line - 1]
        stripped = above.lstrip(" ")
        if stripped.startswith("#") and len(above) - len(stripped) == indent:
            line -= 1
        else:
            break
    return line
