"""A griffe extension that reads scichains' docstrings for the API reference.

scichains writes numpy-style sections whose items are mostly ``name : what it means`` (the
types are in the signature's annotations), sometimes ``name : type`` with an indented
description, and sometimes a paragraph of prose after the last item. griffe's numpy parser
reads the text after `` : `` as a type and every paragraph in a section as another item. This
extension rewrites each docstring before it is parsed:

- ``name : text`` with no indented continuation, or with text longer than a short type,
  becomes ``name`` with ``text`` as its (indented) description;
- unindented continuation lines of an item are indented under it;
- ``a, b : text`` becomes one item per name, each with ``text``;
- Sphinx roles (``:class:`X```) become inline code;
- paragraphs after the items of a Parameters/Attributes section (separated by a blank line,
  not themselves items) move out of the section, to just before the section.

Only the text given to the renderer changes; the source is not touched.
"""

from __future__ import annotations

import re

import griffe

_SECTIONS = {"parameters", "other parameters", "attributes", "keyword arguments"}
_ITEM = re.compile(r"^(\*{0,2}[A-Za-z_][\w]*(?:\s*,\s*\*{0,2}[A-Za-z_]\w*)*) : (.*)$")
_TYPE = re.compile(r"^[\w\[\]().,| ]{1,40}$")


def _is_header(lines: list[str], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and lines[i].strip().lower()
        in _SECTIONS
        | {
            "returns",
            "raises",
            "yields",
            "notes",
            "examples",
            "see also",
            "warns",
            "references",
            "methods",
        }
        and re.fullmatch(r"-{3,}", lines[i + 1].strip() or "x") is not None
    )


_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`~?([^`]+)`")
_NAMES = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)+)$")


def _split_names(lines: list[str]) -> list[str]:
    """``a, b`` followed by an indented description: one item per name (griffe would give
    the second name the first one's default)."""
    out: list[str] = []
    section = None
    i = 0
    while i < len(lines):
        if _is_header(lines, i):
            section = lines[i].strip().lower()
            out += lines[i : i + 2]
            i += 2
            continue
        m = _NAMES.match(lines[i]) if section in _SECTIONS else None
        if m:
            j = i + 1
            while j < len(lines) and lines[j].startswith((" ", "\t")) and lines[j].strip():
                j += 1
            for name in re.split(r"\s*,\s*", m.group(1)):
                out += [name] + lines[i + 1 : j]
            i = j
            continue
        out.append(lines[i])
        i += 1
    return out


def rewrite(text: str) -> str:
    text = _ROLE.sub(r"`\1`", text)  # Sphinx roles read as code here
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not (_is_header(lines, i) and lines[i].strip().lower() in _SECTIONS):
            out.append(lines[i])
            i += 1
            continue
        start = len(out)
        out += lines[i : i + 2]
        i += 2
        in_item = False
        while i < len(lines) and not _is_header(lines, i):
            line = lines[i]
            m = _ITEM.match(line)
            if m:
                name, rest = m.groups()
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if _TYPE.match(rest) and nxt.startswith((" ", "\t")) and nxt.strip():
                    out.append(line)
                else:
                    out.append(name)
                    out.append("    " + rest)
                in_item = True
            elif not line.strip():
                # a blank line: the section goes on only if an item follows
                j = i + 1
                while j < len(lines) and not lines[j].strip():
                    j += 1
                if (
                    j < len(lines)
                    and not _ITEM.match(lines[j])
                    and not _is_header(lines, j)
                    and not lines[j].startswith((" ", "\t"))
                ):
                    # prose after the items: take it (up to the next header) out of the section
                    k = j
                    while k < len(lines) and not _is_header(lines, k):
                        k += 1
                    prose = lines[j:k]
                    while prose and not prose[-1].strip():
                        prose.pop()
                    out[start:start] = prose + [""]
                    out.append("")
                    i = k
                    break
                out.append(line)
                in_item = False
            elif line.startswith((" ", "\t")):
                out.append(line)
            elif in_item:
                out.append("    " + line)
            else:
                out.append(line)
            i += 1
    return "\n".join(_split_names(out))


class ScichainsDocstrings(griffe.Extension):
    """Rewrite docstrings as described in the module docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
