"""Reading a binding's signature, and binding a call's arguments to it (no process needed)."""

from __future__ import annotations

import pytest

from runner._host import parse_signature


@pytest.mark.parametrize(
    ("signature", "positional", "keyword"),
    [
        ("search(query, limit=10)", ("query", "limit"), {"query", "limit"}),
        ("get_logs(host, count)", ("host", "count"), {"host", "count"}),
        ("f(a, host)", ("a", "host"), {"a", "host"}),
        ("f()", (), set()),
        ("f(a, b,)", ("a", "b"), {"a", "b"}),
        ("f(a, /, b, *, c)", ("a", "b"), {"b", "c"}),
        ("f(q: dict[str, int] = {'a,b': (1, 2)}, n: int = 3) -> list[str]", ("q", "n"), {"q", "n"}),
        (
            "f(query: string, limit?: number): Promise<string[]>",
            ("query", "limit"),
            {"query", "limit"},
        ),
        ("f(cb: (x: number) => void, m: Map<string, number>)", ("cb", "m"), {"cb", "m"}),
        ("get-logs(count)", ("count",), {"count"}),
    ],
)
def test_parameters_are_read_from_python_and_javascript_shapes(
    signature: str, positional: tuple[str, ...], keyword: set[str]
) -> None:
    """Names come from each parameter (``host`` too); types and defaults are skipped."""
    params = parse_signature(signature)
    assert params.positional == positional
    assert params.keyword == keyword


@pytest.mark.parametrize("signature", ["search", "f(1, 2)", "f(a", "f(a, = 3)"])
def test_an_unreadable_signature_is_refused(signature: str) -> None:
    """No parameter list, unbalanced parentheses, or a parameter without a name."""
    with pytest.raises(ValueError):
        parse_signature(signature)


def test_binding_follows_python_rules_without_defaults() -> None:
    """Positional and keyword arguments map to names; defaults are left to the host."""
    params = parse_signature("search(query, limit=10)")
    assert params.bind("search", ("q",), {}) == {"query": "q"}
    assert params.bind("search", ("q", 3), {}) == {"query": "q", "limit": 3}
    assert params.bind("search", (), {"limit": 1, "query": "q"}) == {"limit": 1, "query": "q"}
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3 were given"):
        params.bind("search", (1, 2, 3), {})
    with pytest.raises(TypeError, match="unexpected keyword argument 'page'"):
        params.bind("search", (), {"page": 2})
    with pytest.raises(TypeError, match="multiple values for argument 'query'"):
        params.bind("search", ("q",), {"query": "r"})


def test_variadic_parameters_collect_the_rest() -> None:
    """``*args`` (or ``...args``) takes extra positionals as a list; ``**kw`` any keyword."""
    params = parse_signature("f(a, *rest, b, **options)")
    assert params.bind("f", (1, 2, 3), {"b": 4, "z": 5}) == {"a": 1, "rest": [2, 3], "b": 4, "z": 5}
    js = parse_signature("f(a, ...rest)")
    assert js.bind("f", (1, 2), {}) == {"a": 1, "rest": [2]}
    with pytest.raises(TypeError, match="unexpected keyword argument 'a'"):
        parse_signature("f(a, /)").bind("f", (), {"a": 1})
