"""Tool results: both truncation stages, the result cache, and reading results back.

One file for the three modules (and the pipeline that joins them): their tests share the
helpers that cut a result and read it back whole."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox.agent._cache import (
    DEFAULT_NON_CACHEABLE,
    CacheMiss,
    ResultCache,
    file_path_from_arguments,
    is_mcp_source,
    result_hash,
)
from sandbox.agent._readback import MAX_FRAGMENT_BYTES, ToolResultRead
from sandbox.agent._results import NUDGE_PREFIX, process_result
from sandbox.agent._truncation import (
    ResultBudget,
    TruncationConfig,
    default_truncation,
    truncate_stage1,
    truncate_to_budget,
)
from sandbox.agent._types import estimate_tokens


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CharCounter:
    """One token a character: exact arithmetic in tests."""

    def count(self, text: str) -> int:
        return len(text)


MULTIBYTE = "aé€🎉"  # one code point each of 1, 2, 3 and 4 bytes
NEXT = re.compile(r"call tool_result_read with (\{.*\})\]$")
NUDGE_ARGS = re.compile(r"call tool_result_read with (\{.*?\}) \(offset")


def long_lines(n: int) -> str:
    return "".join(f"{i:05d} {MULTIBYTE * (i % 7)} {'x' * (i % 40)}\n" for i in range(n))


def split_nudge(text: str) -> tuple[str, dict[str, Any]]:
    """The shown prefix and the arguments the nudge says to pass."""
    shown, sep, nudge = text.rpartition(NUDGE_PREFIX)
    assert sep, "no nudge"
    m = NUDGE_ARGS.search(nudge)
    assert m is not None, nudge
    args: dict[str, Any] = msgspec.json.decode(m.group(1))
    return shown, args


def read_rest(reader: ToolResultRead, args: dict[str, Any], **extra: Any) -> list[str]:
    """Every fragment from ``args`` on, following each header to the next."""
    fragments: list[str] = []
    for _ in range(1_000_000):
        out = reader.read({**args, **extra})
        assert not out.is_error, out.text
        header, newline, fragment = out.text.partition("\n")
        assert newline
        fragments.append(fragment)
        m = NEXT.search(header)
        if m is None:
            assert header.endswith("end of result]"), header
            return fragments
        args = msgspec.json.decode(m.group(1))
    raise AssertionError("no end")


def reassemble(
    tool: str,
    text: str,
    truncation: dict[str, TruncationConfig],
    *,
    budget: ResultBudget | None = None,
    context_tokens: int = 1_000_000,
    **extra: Any,
) -> str:
    cache = ResultCache()
    r = process_result(
        tool,
        text,
        cache=cache,
        truncation=truncation,
        budget=budget or ResultBudget(),
        context_tokens=context_tokens,
    )
    assert r.truncated
    shown, args = split_nudge(r.text_for_model)
    assert text.startswith(shown)
    assert args["hash"] == r.cache_hash
    return shown + "".join(read_rest(ToolResultRead(cache), args, **extra))


# -- stage 1 --


def test_default_truncation_is_the_seeds_plus_run_program_and_fresh_each_call() -> None:
    d = default_truncation()
    assert d == {
        "read_file": TruncationConfig(max_lines=50_000),
        "ripgrep": TruncationConfig(max_lines=5_000),
        "glob": TruncationConfig(max_lines=5_000),
        "list_directory": TruncationConfig(max_lines=5_000),
        "web_fetch": TruncationConfig(max_bytes=2_097_152),
        "bash_exec": TruncationConfig(max_lines=10_000),
        "run_program": TruncationConfig(max_lines=10_000),
    }
    d.clear()
    assert len(default_truncation()) == 7


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        TruncationConfig(max_lines=-1)
    with pytest.raises(ValueError):
        ResultBudget(max_fill_fraction=1.5)


def test_stage1_keeps_the_first_lines_with_their_newlines() -> None:
    assert truncate_stage1("a\nb\nc", TruncationConfig(max_lines=2)) == ("a\nb\n", True)
    assert truncate_stage1("a\nb\n", TruncationConfig(max_lines=2)) == ("a\nb\n", False)
    assert truncate_stage1("a\nb", TruncationConfig(max_lines=2)) == ("a\nb", False)
    assert truncate_stage1("a\nb\nc", TruncationConfig()) == ("a\nb\nc", False)


def test_stage1_bytes_never_split_a_code_point() -> None:
    text = MULTIBYTE * 10
    size = len(text.encode())
    for limit in range(1, size + 2):
        kept, cut = truncate_stage1(text, TruncationConfig(max_bytes=limit))
        data = kept.encode()
        assert text.startswith(kept)
        assert len(data) <= limit
        assert len(data) >= min(limit, size) - 3  # walked back over at most 3 bytes
        assert cut == (limit < size)


def test_stage1_applies_lines_then_bytes() -> None:
    kept, cut = truncate_stage1("éé\n" * 10, TruncationConfig(max_lines=3, max_bytes=8))
    # Three lines are 15 bytes; byte 8 is the middle of the fourth "é": walk back to 7.
    assert (kept, cut) == ("éé\né", True)


@given(st.text(), st.integers(0, 20), st.integers(0, 80))
def test_stage1_keeps_a_prefix_within_the_limits(text: str, lines: int, size: int) -> None:
    kept, cut = truncate_stage1(text, TruncationConfig(max_lines=lines, max_bytes=size))
    assert text.startswith(kept)
    assert cut == (kept != text)
    if size:
        assert len(kept.encode("utf-8", "surrogatepass")) <= size
    if lines:
        assert kept.count("\n") <= lines


# -- stage 2 --


def test_the_budget_limit_is_the_smaller_of_cap_and_fraction() -> None:
    b = ResultBudget(hard_cap_tokens=100, max_fill_fraction=0.5)
    assert b.limit_tokens(1000) == 100
    assert b.limit_tokens(100) == 50
    assert b.limit_tokens(0) == 100
    assert ResultBudget(hard_cap_tokens=0, max_fill_fraction=0).limit_tokens(1000) is None
    assert ResultBudget().limit_tokens(200_000) == 30_000
    assert ResultBudget().limit_tokens(10_000) == 4_000


def test_stage2_cuts_to_the_token_limit_preferring_a_line_end() -> None:
    budget = ResultBudget(hard_cap_tokens=25, max_fill_fraction=0)
    assert truncate_to_budget("short", budget, 0, CharCounter()) == ("short", False)
    text = "0123456789\n" * 5
    kept, cut = truncate_to_budget(text, budget, 0, CharCounter())
    assert cut
    assert kept == "0123456789\n" * 2
    one_line = "é" * 100
    kept, cut = truncate_to_budget(one_line, budget, 0, CharCounter())
    assert (kept, cut) == ("é" * 25, True)
    kept, cut = truncate_to_budget(one_line, budget, 0, None)
    assert estimate_tokens(kept) <= 25 < estimate_tokens(kept + "é")


# -- the cache --


def test_the_hash_is_sha256_of_tool_nul_content() -> None:
    assert result_hash("t", "x") == hashlib.sha256(b"t\x00x").hexdigest()
    assert result_hash("read_file", "x") != result_hash("ripgrep", "x")


def test_storing_the_same_result_twice_keeps_one_entry() -> None:
    cache = ResultCache()
    h1 = cache.store("ripgrep", "hits")
    h2 = cache.store("ripgrep", "hits")
    h3 = cache.store("glob", "hits")
    assert h1 == h2 == result_hash("ripgrep", "hits")
    assert h3 != h1
    assert len(cache) == 2
    assert cache.get(h1) == cache.lookup(h3) == "hits"
    assert cache.get("0" * 64) is None
    with pytest.raises(CacheMiss) as info:
        cache.lookup("0" * 64)
    assert info.value.reason == "unknown"


def test_mcp_sources_are_those_neither_core_nor_unknown() -> None:
    assert not is_mcp_source("core")
    assert not is_mcp_source("")
    assert is_mcp_source("filesystem")


def test_mcp_entries_expire_after_the_ttl_and_others_never() -> None:
    clock = Clock()
    cache = ResultCache(mcp_ttl=60, clock=clock)
    mcp = cache.store("fetch", "page", source="web")
    core = cache.store("ripgrep", "hits", source="core")
    unknown = cache.store("mystery", "x", source="")
    clock.now += 59.9
    assert cache.get(mcp) == "page"
    clock.now += 0.1
    assert cache.get(mcp) is None
    assert mcp not in cache  # dropped when found expired
    clock.now += 10**9
    assert cache.get(core) == "hits"
    assert cache.get(unknown) == "x"


def test_sweep_drops_expired_entries_and_store_sweeps_lazily() -> None:
    clock = Clock()
    cache = ResultCache(mcp_ttl=10, clock=clock)
    cache.store("a", "1", source="srv")
    clock.now += 5
    cache.store("b", "2", source="srv")
    cache.store("c", "3")
    clock.now += 5
    assert cache.sweep() == 1
    assert len(cache) == 2
    clock.now += 5
    cache.store("d", "4")  # the next expiry is due: swept on the way
    assert len(cache) == 2
    assert cache.sweep() == 0


def test_storing_again_refreshes_an_mcp_entry() -> None:
    clock = Clock()
    cache = ResultCache(mcp_ttl=10, clock=clock)
    h = cache.store("a", "1", source="srv")
    clock.now += 9
    cache.store("a", "1", source="srv")
    clock.now += 9
    with pytest.raises(CacheMiss):
        cache.lookup("0")
    assert cache.get(h) == "1"
    clock.now += 1
    with pytest.raises(CacheMiss) as info:
        cache.lookup(h)
    assert info.value.reason == "expired"


def test_a_non_positive_ttl_is_refused() -> None:
    with pytest.raises(ValueError):
        ResultCache(mcp_ttl=0)


def test_a_file_result_is_incoherent_once_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("one")
    cache = ResultCache()
    h = cache.store("read_file", "one", file_path=path)
    assert cache.check_coherence(h)
    assert cache.get(h) == "one"
    path.write_text("three")  # size changes
    assert not cache.check_coherence(h)
    assert cache.get(h) is None
    with pytest.raises(CacheMiss):
        cache.lookup(h)
    assert not cache.check_coherence(h)  # dropped: unknown now


def test_a_touched_file_is_incoherent_even_at_the_same_size(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("one")
    cache = ResultCache()
    h = cache.store("edit_file", "ok", file_path=str(path))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert not cache.check_coherence(h)
    assert cache.get(h) is None


def test_a_vanished_file_is_incoherent(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("one")
    cache = ResultCache()
    h = cache.store("any_tool", "one", file_path=path)  # any tool, given a path
    path.unlink()
    assert not cache.check_coherence(h)
    with pytest.raises(CacheMiss) as info:
        cache.lookup(h)
    assert info.value.reason == "changed"


def test_results_without_a_file_stay_coherent() -> None:
    cache = ResultCache()
    h = cache.store("read_file", "text")  # no path: nothing to check against
    assert cache.check_coherence(h)
    assert not cache.check_coherence("nope")


def test_meta_tools_are_not_cacheable_and_more_can_be_added() -> None:
    cache = ResultCache()
    expected = {"finish", "tool_result_read", "update_checklist", "store_fact"}
    assert expected == DEFAULT_NON_CACHEABLE
    assert not any(cache.cacheable(n) for n in DEFAULT_NON_CACHEABLE)
    assert cache.cacheable("delegate")
    cache.add_non_cacheable("delegate", "reflect")
    assert not cache.cacheable("delegate")
    assert not cache.cacheable("reflect")


def test_file_path_from_arguments() -> None:
    assert file_path_from_arguments('{"path": "/a"}') == "/a"
    assert file_path_from_arguments('{"file_path": "/b"}') == "/b"
    assert file_path_from_arguments('{"pattern": "x"}') is None
    assert file_path_from_arguments("not json") is None
    assert file_path_from_arguments("[1]") is None


# -- processing --


def process(tool: str, text: str, cache: ResultCache, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "truncation": default_truncation(),
        "budget": ResultBudget(),
        "context_tokens": 100_000,
    }
    args.update(kw)
    return process_result(tool, text, cache=cache, **args)


def test_a_short_cacheable_result_is_cached_and_shown_whole() -> None:
    cache = ResultCache()
    r = process("ripgrep", "a:1\n", cache)
    assert (r.text_for_model, r.truncated) == ("a:1\n", False)
    assert r.cache_hash == result_hash("ripgrep", "a:1\n")
    assert cache.get(r.cache_hash) == "a:1\n"


def test_a_short_non_cacheable_result_is_not_cached() -> None:
    cache = ResultCache()
    r = process("finish", "done", cache)
    assert (r.text_for_model, r.truncated, r.cache_hash) == ("done", False, "")
    assert len(cache) == 0


def test_a_truncated_non_cacheable_result_is_cached_on_demand() -> None:
    cache = ResultCache()
    text = "x\n" * 50
    cut = {"store_fact": TruncationConfig(max_lines=10)}
    r = process("store_fact", text, cache, truncation=cut)
    assert r.truncated
    assert r.cache_hash == result_hash("store_fact", text)
    assert cache.get(r.cache_hash) == text


def test_the_nudge_names_the_hash_sizes_and_next_arguments() -> None:
    cache = ResultCache()
    text = long_lines(300)
    r = process("bash_exec", text, cache, truncation={"bash_exec": TruncationConfig(max_lines=100)})
    shown, args = split_nudge(r.text_for_model)
    assert shown.count("\n") == 100
    offset = len(shown.encode())
    assert args == {"hash": r.cache_hash, "offset": offset}
    nudge = r.text_for_model[len(shown) :]
    assert r.cache_hash in nudge
    assert f"showing bytes 0-{offset} of {len(text.encode())}" in nudge
    assert "100 complete lines of 300" in nudge
    assert "starts on line 101" in nudge
    assert "tool_result_read" in nudge


def test_stage2_leaves_room_for_the_nudge() -> None:
    cache = ResultCache()
    budget = ResultBudget(hard_cap_tokens=500, max_fill_fraction=0.4)
    r = process("ripgrep", long_lines(1000), cache, budget=budget, counter=CharCounter())
    assert r.truncated
    assert len(r.text_for_model) <= 500  # within the limit, nudge included
    r = process("ripgrep", long_lines(1000), cache, budget=budget, context_tokens=1000)
    assert estimate_tokens(r.text_for_model) <= 400  # 0.4 of a 1000-token window


def test_a_stage1_cut_that_fits_stage2_is_not_cut_again() -> None:
    cache = ResultCache()
    text = long_lines(200)
    r = process("glob", text, cache, truncation={"glob": TruncationConfig(max_lines=50)})
    shown, _ = split_nudge(r.text_for_model)
    assert shown == "".join(text.splitlines(keepends=True)[:50])


# -- reading back --


@pytest.mark.parametrize(
    "cfg",
    [
        TruncationConfig(max_lines=100),
        TruncationConfig(max_bytes=1000),
        TruncationConfig(max_lines=100, max_bytes=777),
    ],
    ids=["lines", "bytes", "both"],
)
def test_reading_every_fragment_reassembles_a_long_result(cfg: TruncationConfig) -> None:
    text = long_lines(2000) + "no newline at the end " + MULTIBYTE
    assert reassemble("bash_exec", text, {"bash_exec": cfg}) == text


def test_reading_every_fragment_reassembles_one_huge_line() -> None:
    text = (MULTIBYTE + "abc") * 50_000  # 650 kB and not one newline
    cfg = {"web_fetch": TruncationConfig(max_bytes=10_001)}  # mid-character
    assert reassemble("web_fetch", text, cfg) == text
    small = text[:3000]
    cfg = {"web_fetch": TruncationConfig(max_bytes=1001)}
    assert reassemble("web_fetch", small, cfg, max_bytes=3) == small  # under one 🎉 at times


def test_reading_back_a_stage2_cut_reassembles_it() -> None:
    text = long_lines(3000)
    budget = ResultBudget(hard_cap_tokens=1000, max_fill_fraction=0.4)
    assert reassemble("ripgrep", text, {}, budget=budget, context_tokens=100_000) == text
    huge = "🎉" * 30_000
    assert reassemble("ripgrep", huge, {}, budget=budget) == huge


@given(
    st.text(alphabet=st.sampled_from(["a", "\n", "é", "€", "🎉", "\r"]), min_size=1),
    st.integers(1, 9),
    st.integers(1, 5),
)
def test_any_fragment_sizes_reassemble_exactly(text: str, max_bytes: int, num_lines: int) -> None:
    cache = ResultCache()
    h = cache.store("t", text)
    reader = ToolResultRead(cache)
    got = "".join(read_rest(reader, {"hash": h}, max_bytes=max_bytes, num_lines=num_lines))
    assert got == text


def test_text_with_lone_surrogates_reassembles() -> None:
    text = "ok \udcff bytes \ud800\n" * 3000
    assert reassemble("bash_exec", text, {"bash_exec": TruncationConfig(max_bytes=100)}) == text


def test_fragments_stay_within_the_configured_limits() -> None:
    cache = ResultCache()
    text = long_lines(500)
    h = cache.store("t", text)
    cfg = {"tool_result_read": TruncationConfig(max_lines=5, max_bytes=300)}
    reader = ToolResultRead(cache, cfg)
    out = reader.read({"hash": h, "num_lines": 1000, "max_bytes": 10**6})
    fragment = out.text.partition("\n")[2]
    assert fragment.count("\n") <= 5
    assert len(fragment.encode()) <= 300
    assert "".join(read_rest(reader, {"hash": h}, num_lines=1000)) == text
    big = ToolResultRead(cache).read({"hash": h, "max_bytes": 10**9, "num_lines": 10**9})
    assert len(big.text.partition("\n")[2].encode()) <= MAX_FRAGMENT_BYTES


def test_a_fragment_header_says_where_it_is() -> None:
    cache = ResultCache()
    h = cache.store("t", "one\ntwo\nthree\n")
    reader = ToolResultRead(cache)
    out = reader.read(f'{{"hash": "{h}", "num_lines": 1}}')  # JSON text works too
    header, _, fragment = out.text.partition("\n")
    assert fragment == "one\n"
    assert header.startswith("[tool_result_read: bytes 0-4 of 14, lines 1-1 of 3;")
    assert f'{{"hash":"{h}","offset":4}}' in header
    out = reader.read({"hash": h, "offset": 4, "max_bytes": 2})
    header, _, fragment = out.text.partition("\n")
    assert fragment == "tw"
    assert "lines 2-2 of 3 (ends mid-line)" in header
    out = reader.read({"hash": h, "start_line": 3})
    header, _, fragment = out.text.partition("\n")
    assert fragment == "three\n"
    assert header.endswith("; end of result]")


def test_the_tool_definition() -> None:
    spec = ToolResultRead(ResultCache()).definition()
    assert spec.name == ToolResultRead.name == "tool_result_read"
    assert spec.parameters["required"] == ["hash"]
    assert set(spec.parameters["properties"]) == {
        "hash",
        "offset",
        "start_line",
        "num_lines",
        "max_bytes",
    }


def test_reading_an_unknown_expired_or_changed_result_is_an_error(tmp_path: Path) -> None:
    clock = Clock()
    cache = ResultCache(mcp_ttl=1, clock=clock)
    reader = ToolResultRead(cache)
    out = reader.read({"hash": "f" * 64})
    assert out.is_error
    assert not out.parse_error
    assert "no cached result" in out.text
    h = cache.store("fetch", "x", source="mcp-server")
    clock.now += 1
    out = reader.read({"hash": h})
    assert out.is_error
    assert "expired" in out.text
    path = tmp_path / "f"
    path.write_text("a")
    h = cache.store("read_file", "a", file_path=path)
    path.write_text("ab")
    out = reader.read({"hash": h})
    assert out.is_error
    assert "changed" in out.text


@pytest.mark.parametrize(
    "arguments",
    [
        "not json",
        {},
        {"hash": 3},
        {"hash": "h", "unknown": 1},
        {"hash": "h", "offset": -1},
        {"hash": "h", "start_line": 0},
        {"hash": "h", "num_lines": 0},
        {"hash": "h", "max_bytes": 0},
        {"hash": "h", "offset": 0, "start_line": 1},
    ],
)
def test_bad_arguments_are_parse_errors(arguments: Any) -> None:
    out = ToolResultRead(ResultCache()).read(arguments)
    assert out.is_error
    assert out.parse_error


def test_an_offset_inside_a_character_or_past_the_end_is_an_error() -> None:
    cache = ResultCache()
    h = cache.store("t", "🎉")
    reader = ToolResultRead(cache)
    out = reader.read({"hash": h, "offset": 2})
    assert out.is_error
    assert "inside a character" in out.text
    out = reader.read({"hash": h, "offset": 5})
    assert out.is_error
    assert "past the end" in out.text
    out = reader.read({"hash": h, "offset": "4"})  # lenient about a number as text
    assert not out.is_error
    assert out.text.endswith("end of result]\n")


def test_a_path_absent_when_stored_is_coherent_until_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "later.txt"
    cache = ResultCache()
    h = cache.store("read_file", "no such file", file_path=path)
    assert cache.check_coherence(h)
    path.write_text("now it exists")
    assert not cache.check_coherence(h)
