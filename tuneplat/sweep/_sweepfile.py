"""Reading sweep files (YAML, TOML) into plain data with a location for every key.

Only this package (:mod:`tuneplat.config` is its public face) turns text from a sweep file into
values. YAML is read with a *composer* built on PyYAML's ``SafeLoader``: the
node tree gives a line and column for every key and value, and any tag that is
not plain data (``!!python/...``, custom ``!tags``, ``!!binary``, ``!!set``)
is refused before anything is constructed. TOML is read with ``tomllib``
(plain data by construction); it reports positions only for syntax errors, so
key positions come from a small line scanner (see :func:`_scan_toml`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["Doc", "Loc", "SweepFileError", "format_path", "parse_scalar", "read_document"]

Path = tuple[Any, ...]


@dataclass(frozen=True)
class Loc:
    """Where something was written: a file (or ``--set ...``), 1-based line and column."""

    source: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.col}"


class SweepFileError(ValueError):
    """A sweep file (or a ``--set`` override) is invalid.

    ``str(error)`` is one line: ``file:line:col: key.path: what is wrong; expected ...``.

    Attributes:
        loc: where (a :class:`Loc`), or None.
        path: the key path as written (e.g. ``scheduler.max_t``), or "" for the document.
        problem: the message after the path.
    """

    def __init__(self, problem: str, loc: Loc | None = None, path: str = "") -> None:
        self.loc = loc
        self.path = path
        self.problem = problem
        where = f"{loc}: " if loc else ""
        super().__init__(f"{where}{path + ': ' if path else ''}{problem}")


def format_path(path: Path) -> str:
    """``("a", "b", 0, "c")`` → ``a.b[0].c``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


@dataclass
class Doc:
    """A sweep document: plain data plus where each part was written.

    ``locs`` maps key paths to the position of the value, ``key_locs`` to the
    position of the key itself. ``aliases`` maps a path prefix of translated
    data (e.g. ``("param_space",)`` for a W&B file) to the prefix written in
    the file (``("parameters",)``), for error positions and paths.
    """

    data: Any
    source: str
    locs: dict[Path, Loc] = field(default_factory=dict)
    key_locs: dict[Path, Loc] = field(default_factory=dict)
    aliases: dict[Path, Path] = field(default_factory=dict)
    leaf_aliases: set[Path] = field(default_factory=set)
    fmt: str = "yaml"

    def written(self, path: Path) -> Path:
        """The path as written in the file (translated prefixes mapped back)."""
        for prefix in sorted(self.aliases, key=len, reverse=True):
            if path[: len(prefix)] == prefix:
                if prefix in self.leaf_aliases:
                    return self.aliases[prefix]
                return self.aliases[prefix] + path[len(prefix) :]
        return path

    def loc(self, path: Path, key: bool = False) -> Loc:
        """Position of ``path`` (its key when ``key``), else of its nearest written parent."""
        path = self.written(path)
        table = self.key_locs if key else self.locs
        if path in table:
            return table[path]
        while path:
            path = path[:-1]
            if path in self.locs:
                return self.locs[path]
            if path in self.key_locs:
                return self.key_locs[path]
        return self.locs.get((), Loc(self.source, 1, 1))

    def error(self, path: Path, problem: str, key: bool = False) -> SweepFileError:
        return SweepFileError(problem, self.loc(path, key), format_path(self.written(path)))


# --------------------------------------------------------------------------- YAML

_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null")}


def _show_tag(tag: str) -> str:
    return "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag


class _Loader(yaml.SafeLoader):
    """SafeLoader whose implicit floats also cover ``1e-4`` (YAML 1.2 style)."""


_Loader.add_implicit_resolver(
    _CORE + "float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _mark(mark: Any, source: str) -> Loc:
    return Loc(source, mark.line + 1, mark.column + 1)


def _tag_error(node: yaml.Node, source: str) -> SweepFileError:
    tag = _show_tag(node.tag)
    if "python/" in node.tag:
        why = (
            f"YAML tag '{tag}' would construct a Python object; sweep files hold plain data only "
            "(strings, numbers, booleans, null, lists, mappings): remove the tag"
        )
    else:
        why = (
            f"YAML tag '{tag}' is not allowed; sweep files hold plain data only "
            "(strings, numbers, booleans, null, lists, mappings): remove the tag"
        )
    return SweepFileError(why, _mark(node.start_mark, source))


def _yaml_value(node: yaml.Node, loader: _Loader, doc: Doc, path: Path) -> Any:
    doc.locs.setdefault(path, _mark(node.start_mark, doc.source))
    if isinstance(node, yaml.MappingNode):
        if node.tag != _CORE + "map":
            raise _tag_error(node, doc.source)
        try:
            loader.flatten_mapping(node)  # YAML merge keys ("<<: *defaults")
        except yaml.MarkedYAMLError as exc:
            raise SweepFileError(
                str(exc.problem), _mark(exc.problem_mark or node.start_mark, doc.source), format_path(path)
            ) from None
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise SweepFileError(
                    "mapping keys must be plain strings", _mark(key_node.start_mark, doc.source), format_path(path)
                )
            if key_node.tag not in _SCALAR_TAGS:
                raise _tag_error(key_node, doc.source)
            key = key_node.value  # as written: `on:` stays "on", `1:` stays "1"
            if key in out:
                first = doc.key_locs[path + (key,)]
                raise SweepFileError(
                    f"duplicate key (first written at line {first.line}); write each key once",
                    _mark(key_node.start_mark, doc.source),
                    format_path(path + (key,)),
                )
            doc.key_locs[path + (key,)] = _mark(key_node.start_mark, doc.source)
            out[key] = _yaml_value(value_node, loader, doc, path + (key,))
        return out
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _CORE + "seq":
            raise _tag_error(node, doc.source)
        return [_yaml_value(item, loader, doc, path + (i,)) for i, item in enumerate(node.value)]
    if node.tag == _CORE + "timestamp":
        return node.value  # a date stays the text written
    if node.tag not in _SCALAR_TAGS:
        raise _tag_error(node, doc.source)
    return loader.construct_object(node, deep=True)


def _yaml_doc(text: str, source: str) -> Doc:
    doc = Doc(None, source, fmt="yaml")
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            problem = exc.problem or "invalid YAML"
            if exc.context:
                problem = f"{exc.context}, {problem}" if "expected" not in problem else f"{problem} ({exc.context})"
            loc = _mark(mark, source) if mark is not None else Loc(source, 1, 1)
            raise SweepFileError(f"YAML syntax error: {problem}", loc) from None
        except yaml.YAMLError as exc:
            raise SweepFileError(f"YAML syntax error: {exc}", Loc(source, 1, 1)) from None
        if node is None:
            raise SweepFileError("the file is empty; expected a mapping of sweep settings", Loc(source, 1, 1))
        doc.data = _yaml_value(node, loader, doc, ())
    finally:
        loader.dispose()
    return doc


def parse_scalar(text: str, source: str, col: int = 1) -> tuple[Any, Doc]:
    """Parse a ``--set`` value (or an ``${env:...}`` value) as one YAML value, with the same safety rules."""
    try:
        doc = _yaml_doc(text if text.strip() else "''", source)
    except SweepFileError as exc:
        if exc.loc is None or exc.loc.line != 1:
            raise
        raise SweepFileError(exc.problem, Loc(source, 1, col + exc.loc.col - 1), exc.path) from None
    # the text sits on one line, after `key=` on the command line
    doc.locs = {p: Loc(source, 1, col + loc.col - 1) for p, loc in doc.locs.items()}
    doc.key_locs = {p: Loc(source, 1, col + loc.col - 1) for p, loc in doc.key_locs.items()}
    return doc.data, doc


# --------------------------------------------------------------------------- TOML

_TOML_POS = re.compile(r"\(at line (\d+), column (\d+)\)")
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _split_key(text: str) -> list[str] | None:
    """``a."b.c".d`` → ``["a", "b.c", "d"]``; None when it is not a key."""
    parts: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n:
            return None
        if text[i] in "\"'":
            q = text[i]
            j = text.find(q, i + 1)
            if j < 0:
                return None
            parts.append(text[i + 1 : j])
            i = j + 1
        else:
            m = _BARE.match(text, i)
            if not m:
                return None
            parts.append(m.group(0))
            i = m.end()
        while i < n and text[i] in " \t":
            i += 1
        if i < n:
            if text[i] != ".":
                return None
            i += 1
    return parts or None


def _scan_toml(text: str, source: str, doc: Doc) -> None:
    """Best-effort key positions for a TOML file.

    ``tomllib`` gives no positions for valid documents, so each line is
    scanned: ``[table]`` / ``[[array]]`` headers set the current prefix,
    ``key = value`` lines (dotted keys included) record the key's line and
    column, and ``key = value`` pairs inside one-line inline tables record
    nested paths. Arrays of tables are indexed in order. Keys inside values
    that span lines (multi-line arrays and strings) are not recorded: errors
    there point at the enclosing key.
    """
    prefix: Path = ()
    array_counts: dict[Path, int] = {}
    depth = 0  # open brackets/braces carried over from previous lines
    in_multiline: str | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if in_multiline:
            if in_multiline in line:
                in_multiline = None
            continue
        if depth > 0:
            depth = _scan_value(line, 0, lineno, source, doc, None, depth)
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("[["):
            end = stripped.find("]]")
            key = _split_key(stripped[2:end]) if end > 0 else None
            if key:
                base = tuple(key)
                idx = array_counts.get(base, 0)
                array_counts[base] = idx + 1
                prefix = base + (idx,)
                doc.locs.setdefault(base, Loc(source, lineno, indent + 1))
                doc.locs[prefix] = Loc(source, lineno, indent + 1)
            continue
        if stripped.startswith("["):
            end = stripped.find("]")
            key = _split_key(stripped[1:end]) if end > 0 else None
            if key:
                prefix = tuple(key)
                doc.locs[prefix] = doc.key_locs[prefix] = Loc(source, lineno, indent + 1)
            continue
        eq = _find_eq(line)
        if eq < 0:
            continue
        key = _split_key(line[:eq])
        if not key:
            continue
        path = prefix + tuple(key)
        doc.key_locs[path] = Loc(source, lineno, indent + 1)
        start = eq + 1
        while start < len(line) and line[start] in " \t":
            start += 1
        doc.locs[path] = Loc(source, lineno, start + 1)
        for i in range(1, len(key)):
            doc.key_locs.setdefault(prefix + tuple(key[:i]), Loc(source, lineno, indent + 1))
        rest = line[start:]
        for q in ('"""', "'''"):
            if rest.startswith(q) and rest.count(q) == 1:
                in_multiline = q
        if in_multiline is None:
            depth = _scan_value(line, start, lineno, source, doc, path, 0)


def _find_eq(line: str) -> int:
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            return -1
        elif c == "=":
            return i
    return -1


def _scan_value(line: str, start: int, lineno: int, source: str, doc: Doc, path: Path | None, depth: int) -> int:
    """Walk a value, recording ``k = v`` inside inline tables; return the bracket depth left open."""
    stack: list[Path | None] = [path] * depth if depth else []
    i, n = start, len(line)
    key_start = None
    while i < n:
        c = line[i]
        if c in "\"'":
            j = line.find(c, i + 1)
            if j < 0:
                break
            i = j + 1
            continue
        if c == "#":
            break
        if c in "[{":
            current = stack[-1] if stack else path
            stack.append(None if c == "[" else current)
            if c == "{":
                key_start = i + 1
        elif c in "]}":
            if stack:
                stack.pop()
        elif c == "," and stack:
            key_start = i + 1
        elif c == "=" and stack and key_start is not None and stack[-1] is not None:
            key = _split_key(line[key_start:i])
            if key:
                sub = stack[-1] + tuple(key)
                col = key_start + (len(line[key_start:i]) - len(line[key_start:i].lstrip())) + 1
                doc.key_locs[sub] = Loc(source, lineno, col)
                j = i + 1
                while j < n and line[j] in " \t":
                    j += 1
                doc.locs[sub] = Loc(source, lineno, j + 1)
                if j < n and line[j] == "{":
                    stack.append(sub)
                    key_start = j + 1
                    i = j + 1
                    continue
            key_start = None
        i += 1
    return len(stack)


def _plain(value: Any) -> Any:
    """TOML dates and times become their ISO text (sweep files hold plain data)."""
    import datetime

    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return value


def _toml_doc(text: str, source: str) -> Doc:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_POS.search(msg)
        loc = Loc(source, int(m.group(1)), int(m.group(2))) if m else Loc(source, 1, 1)
        raise SweepFileError(f"TOML syntax error: {_TOML_POS.sub('', msg).strip()}", loc) from None
    doc = Doc(_plain(data), source, fmt="toml")
    doc.locs[()] = Loc(source, 1, 1)
    _scan_toml(text, source, doc)
    return doc


# --------------------------------------------------------------------------- entry point


def read_document(path: str | os.PathLike[str], text: str | None = None) -> Doc:
    """Read a sweep file (``.yaml``/``.yml``/``.toml``; anything else is read as YAML).

    Raises:
        SweepFileError: the file is missing, unreadable, not UTF-8, not valid
            YAML/TOML, or holds a YAML tag that would construct an object.
    """
    source = os.fspath(path)
    if text is None:
        try:
            with open(source, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise SweepFileError(f"no such sweep file (looked in {os.getcwd()})", None, source) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SweepFileError(f"cannot read the sweep file: {exc}", None, source) from None
    if source.lower().endswith(".toml"):
        doc = _toml_doc(text, source)
    else:
        doc = _yaml_doc(text, source)
    if not isinstance(doc.data, dict):
        kind = type(doc.data).__name__
        raise SweepFileError(
            f"the document is a {kind}; expected a mapping of sweep settings (key: value)", doc.loc(())
        )
    return doc
