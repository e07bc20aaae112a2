"""Griffe extension for the API pages: the package's docstrings as Markdown can show them.

The docstrings are numpydoc, written for ``help()`` and Sphinx; griffe parses their
sections, and this extension converts what Markdown does not understand, before parsing:

- Some classes complete their docstring at import time (the samplers append their shared
  parameters, the EM samplers those of ``MassEM``). For a class whose body assigns
  ``__doc__``, the docstring is taken from the imported class: the page shows what
  ``help()`` shows.
- Sphinx roles (``:class:`SGHMC```, ``:func:`~pkg.mod.fn```) become links to the object's
  entry in the API pages where it has one, and code where it has none (a private helper,
  another package's object). A role that names no object is reported as a warning, which
  fails a strict build.
- ``:math:`...``` and ``.. math::`` blocks become MathML, rendered by the browser itself
  (no script, no network); reST simple tables become Markdown tables, and the ``::``
  that introduces a literal block becomes ``:``.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from collections.abc import Iterator
from typing import Any

import griffe
from latex2mathml.converter import convert as latex_to_mathml

ROLE = re.compile(
    r":(?:py:)?(?:class|mod|func|meth|attr|data|obj|exc):`(?P<tilde>~?)(?P<name>[^`]+)`"
)
MATH_ROLE = re.compile(r":math:`(?P<tex>[^`]+)`")
MATH_DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. math::\s*$")
TABLE_BORDER = re.compile(r"^(?P<indent> *)=+(?: +=+)+ *$")


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


def mathml(tex: str, display: str = "inline") -> str:
    """MathML for a LaTeX formula, on one line."""
    html = latex_to_mathml(" ".join(tex.split()), display=display)
    return html.replace("<mi>&#x0007E;</mi>", "<mo>&#x0223C;</mo>")  # \sim


def literal_blocks(text: str) -> str:
    """Turn ``text::`` before an indented block into ``text:`` (the block is then code)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        following = next((nxt for nxt in lines[i + 1 :] if nxt.strip()), "")
        indent = len(line) - len(line.lstrip())
        if line.rstrip().endswith("::") and len(following) - len(following.lstrip()) > indent:
            head = line.rstrip()[:-2]
            # "text::" keeps one colon; "text ::" and a lone "::" keep none.
            lines[i] = head.rstrip() if head.endswith(" ") or not head.strip() else head + ":"
    return "\n".join(lines)


def math_blocks(text: str) -> str:
    """``.. math::`` directives as display MathML, at the directive's indentation."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        match = MATH_DIRECTIVE.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent, body = match["indent"], []
        i += 1
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(indent)
        ):
            body.append(lines[i].strip())
            i += 1
        out += ["", indent + mathml(" ".join(body), display="block"), ""]
    return "\n".join(out)


def simple_tables(text: str) -> str:
    """Turn reST simple tables without a header (``====  ====`` borders) into Markdown."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        border = TABLE_BORDER.match(lines[i])
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].rstrip() == lines[i].rstrip()),
            None,
        )
        if not border or end is None:
            out.append(lines[i])
            i += 1
            continue
        starts = [m.start() for m in re.finditer("=+", lines[i])]
        rows: list[list[str]] = []
        for line in lines[i + 1 : end]:
            cells = [
                line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line) + 1], strict=True)
            ]
            if rows and not cells[0]:  # continuation of the row above
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
            elif any(cells):
                rows.append(cells)
        indent = border["indent"]
        out += ["", indent + "|" + " |" * len(starts), indent + "| --- " * len(starts) + "|"]
        out += [indent + "| " + " | ".join(row) + " |" for row in rows]
        out.append("")
        i = end + 1
    return "\n".join(out)


class RestDocstrings(griffe.Extension):
    """Runtime docstrings where classes build them; Sphinx markup as Markdown and MathML."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite the docstrings of every object of the package once it is loaded."""
        for obj in _walk(pkg):
            if obj.is_class and "__doc__" in obj.members:
                self._use_runtime_docstring(obj)
            if obj.docstring is None:
                continue
            text = literal_blocks(math_blocks(obj.docstring.value))
            # In a span: Markdown takes a line that starts with <math> for a block.
            text = MATH_ROLE.sub(lambda m: f'<span class="math">{mathml(m["tex"])}</span>', text)
            text = ROLE.sub(lambda match, obj=obj: self._link(match, obj, pkg, loader), text)
            obj.docstring.value = simple_tables(text)

    @staticmethod
    def _use_runtime_docstring(cls: griffe.Object) -> None:
        runtime = griffe.dynamic_import(cls.path)
        lineno = cls.docstring.lineno if cls.docstring else cls.lineno
        cls.docstring = griffe.Docstring(
            inspect.cleandoc(runtime.__doc__ or ""), lineno=lineno, parent=cls
        )
        del cls.members["__doc__"]

    @staticmethod
    def _link(
        match: re.Match, obj: griffe.Object, pkg: griffe.Module, loader: griffe.GriffeLoader
    ) -> str:
        name = "".join(match["name"].split())
        code = f"<code>{name.rsplit('.', 1)[-1] if match['tilde'] else name}</code>"
        head, _, rest = name.partition(".")
        try:
            path = obj.resolve(head)
        except griffe.NameResolutionError:
            if head == pkg.name:
                path = pkg.path
            elif rest and importlib.util.find_spec(head) is not None:
                return code  # a fully qualified name in another package (numpy...)
            else:
                griffe.logger.warning(f"{obj.path}: {match[0]} does not resolve")
                return code
        path = f"{path}.{rest}" if rest else path
        if path.split(".", 1)[0] != pkg.name:  # another package's object
            return code
        try:
            loader.modules_collection.get_member(path)
        except (KeyError, ValueError, griffe.AliasResolutionError):
            griffe.logger.warning(f"{obj.path}: {match[0]} names no object")
            return code
        return f'<autoref identifier="{path}" optional>{code}</autoref>'
