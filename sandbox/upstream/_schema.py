"""JSON schemas of upstream tools: the check a call's arguments pass, the call shape the
runner binds, and the typed Python stub a model reads.

The stubs are for reading, not for importing: a schema's object types become ``TypedDict``
classes named after the tool, the rest the nearest Python annotation (``Any`` where JSON
schema says more than a Python type can).
"""

from __future__ import annotations

import keyword
import textwrap
from collections.abc import Sequence
from typing import Any, Final

from jsonschema import exceptions as schema_errors
from jsonschema.validators import validator_for

from protocol import CallError, Kind

__all__ = ["Checker", "call_shape", "stub"]

_SCALARS: Final = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}


class Checker:
    """Checks a call's arguments against one tool's input schema, before it is sent.

    A schema that is not valid JSON schema is refused when the tool is called (the
    upstream's fault, said as such), not when it is listed: its other tools still work.
    """

    __slots__ = ("_error", "_name", "_validator")

    def __init__(self, name: str, schema: dict[str, Any]) -> None:
        self._name = name
        self._error: str | None = None
        self._validator: Any = None
        try:
            cls = validator_for(schema)
            cls.check_schema(schema)
            self._validator = cls(schema)
        except schema_errors.SchemaError as exc:
            self._error = f"{name}: the upstream's input schema is not valid: {exc.message}"

    def check(self, arguments: dict[str, Any]) -> None:
        """Raises:
        CallError: ``invalid``, naming what does not match (the best match of every error),
            or ``raised`` when the upstream's schema itself is broken.
        """
        if self._error is not None:
            raise CallError(Kind.RAISED, self._error)
        errors = list(self._validator.iter_errors(arguments))
        if not errors:
            return
        best = schema_errors.best_match(errors)
        where = "".join(f"[{p!r}]" for p in best.absolute_path)
        at = f" at arguments{where}" if where else ""
        raise CallError(
            Kind.INVALID,
            f"{self._name}: arguments do not match its input schema{at}: {best.message}",
        )


def _properties(schema: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    props = schema.get("properties")
    required = schema.get("required")
    return (
        props if isinstance(props, dict) else {},
        set(required) if isinstance(required, list) else set(),
    )


def call_shape(name: str, schema: dict[str, Any]) -> str:
    """The call shape the runner binds (``name(path, head=..., **more)``): the required
    properties first, then the optional ones, all by keyword too. Properties whose names
    are not Python identifiers can only be given as ``**{"a-b": 1}``, so they add
    ``**more``."""
    props, required = _properties(schema)
    names = [p for p in props if _identifier(p)]
    params = [p for p in names if p in required] + [f"{p}=..." for p in names if p not in required]
    if len(names) < len(props):
        params.append("**more")
    return f"{name}({', '.join(params)})"


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


class _Namer:
    """Names and collects the TypedDicts one tool's stub needs."""

    def __init__(self, prefix: str, root: dict[str, Any]) -> None:
        self.prefix = prefix
        self.root = root
        self.refs: dict[str, str] = {}
        self.classes: list[str] = []
        self._taken: set[str] = set()

    def resolve(self, ref: str) -> Any:
        """What a local ``$ref`` (``#/$defs/Name``) points at in the schema being read;
        None (read as ``Any``) for any other reference."""
        if not ref.startswith("#/"):
            return None
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def name(self, hint: str) -> str:
        base = self.prefix + "".join(w[:1].upper() + w[1:] for w in _words(hint))
        name, n = base, 2
        while name in self._taken:
            name, n = f"{base}{n}", n + 1
        self._taken.add(name)
        return name


def _words(text: str) -> list[str]:
    out, word = [], ""
    for ch in text:
        if ch.isalnum():
            word += ch
        elif word:
            out.append(word)
            word = ""
    if word:
        out.append(word)
    return out


def annotation(schema: Any, namer: _Namer, hint: str, depth: int = 0) -> str:
    """The Python annotation of a JSON schema (object types with properties become
    TypedDicts collected by ``namer``)."""
    if not isinstance(schema, dict) or depth > 6:
        return "Any"
    ref = schema.get("$ref")
    if isinstance(ref, str):
        if ref not in namer.refs:
            namer.refs[ref] = "Any"  # while it is read: a schema that refers to itself
            target = namer.resolve(ref)
            namer.refs[ref] = annotation(target, namer, ref.rsplit("/", 1)[-1], depth + 1)
        return namer.refs[ref]
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return f"Literal[{', '.join(repr(v) for v in schema['enum'])}]"
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return _union([annotation(o, namer, hint, depth + 1) for o in options])
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([annotation({**schema, "type": k}, namer, hint, depth + 1) for k in kind])
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        return f"list[{annotation(schema.get('items'), namer, hint + ' item', depth + 1)}]"
    if kind == "object" or "properties" in schema:
        props, _ = _properties(schema)
        if props and all(_identifier(p) for p in props):
            return _typed_dict(schema, namer, hint, depth)
        extra = schema.get("additionalProperties")
        value = annotation(extra, namer, hint + " value", depth + 1) if extra else "Any"
        return f"dict[str, {value}]"
    return "Any"


def _union(parts: Sequence[str]) -> str:
    seen: list[str] = []
    for p in parts:
        if p not in seen:
            seen.append(p)
    return "Any" if "Any" in seen else " | ".join(seen)


def _typed_dict(schema: dict[str, Any], namer: _Namer, hint: str, depth: int) -> str:
    props, required = _properties(schema)
    name = namer.name(hint)
    lines = [
        f"class {name}(TypedDict, total=False):" if not required else f"class {name}(TypedDict):"
    ]
    doc = schema.get("description")
    if isinstance(doc, str) and doc.strip():
        lines.append(_docstring(doc, "    "))
    for prop, sub in props.items():
        kind = annotation(sub, namer, f"{hint} {prop}", depth + 1)
        if required and prop not in required:
            kind = f"NotRequired[{kind}]"
        if isinstance(sub, dict) and isinstance(sub.get("description"), str):
            lines.append(f"    {_comment(sub['description'])}")
        lines.append(f"    {prop}: {kind}")
    namer.classes.append("\n".join(lines))
    return name


def _comment(text: str) -> str:
    first = " ".join(text.split())
    return f"# {first[:200]}"


def _docstring(text: str, indent: str) -> str:
    body = text.strip().replace('"""', "'''").replace("\\", "\\\\")
    return textwrap.indent(f'"""{body}\n"""' if "\n" in body else f'"""{body}"""', indent)


def stub(
    name: str,
    description: str,
    input_schema: dict[str, Any],
    output_schema: dict[str, Any] | None,
    notes: Sequence[str] = (),
) -> str:
    """A tool as an ``async def`` stub: its parameters from ``input_schema`` (required ones
    first, optional ones keyword-only with ``= None`` unless the schema gives a default),
    its return type from ``output_schema`` (without one: the text or content blocks, see
    :mod:`sandbox.upstream`), its docstring from ``description`` and ``notes``."""
    prefix = "".join(w[:1].upper() + w[1:] for w in _words(name))
    namer = _Namer(prefix, input_schema)
    props, required = _properties(input_schema)
    params: list[str] = []
    optional: list[str] = []
    arg_docs: list[str] = []
    more = False
    for prop, sub in props.items():
        if not _identifier(prop):
            more = True
            continue
        kind = annotation(sub, namer, f"{prop}", 0)
        if prop in required:
            params.append(f"{prop}: {kind}")
        else:
            default = sub.get("default") if isinstance(sub, dict) else None
            if default is None and kind != "Any" and "None" not in kind.split(" | "):
                kind = f"{kind} | None"
            optional.append(f"{prop}: {kind} = {default!r}")
        if isinstance(sub, dict) and isinstance(sub.get("description"), str):
            arg_docs.append(f"    {prop}: {' '.join(sub['description'].split())}")
    if optional:
        params.append("*")
        params.extend(optional)
    if more:
        params.append("**more: Any")
    returns = "str | list[dict[str, Any]]"
    if isinstance(output_schema, dict):
        namer.root, namer.refs = output_schema, {}
        returns = annotation(output_schema, namer, "result", 0)
    doc = description.strip() or "(no description)"
    if arg_docs:
        doc += "\n\nArgs:\n" + "\n".join(arg_docs)
    if notes:
        doc += "\n\n" + "\n".join(notes)
    head = f"async def {name}({', '.join(params)}) -> {returns}:"
    body = _docstring(doc, "    ")
    return "\n\n".join([*namer.classes, f"{head}\n{body}\n    ..."])
