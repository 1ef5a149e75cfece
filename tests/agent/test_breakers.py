"""Each circuit breaker alone: what it counts, what starts its count again, and what it
says at its thresholds (the loop's use of them is in test_loop.py)."""

from __future__ import annotations

from sandbox.agent import Breakers, Grant, ToolCall
from sandbox.agent._breakers import (
    Abort,
    BadArguments,
    CallBreakers,
    Counter,
    Fruitless,
    MaxTokens,
    Nudge,
    Repeat,
    Seen,
    SimilarResults,
    Trip,
)


def seen(tool: str = "t", arguments: str = "{}", size: int = 100) -> Seen:
    return Seen.of(ToolCall(id="c", name=tool, arguments=arguments), size)


def kinds(trips: list[Trip | None]) -> list[str]:
    """Each check's verdict in a word: ``abort``, ``nudge`` or ``-`` for none."""
    names = {Abort: "abort", Nudge: "nudge", type(None): "-"}
    return [names[type(t)] for t in trips]


# -- the counter --


def test_a_counter_nudges_then_aborts_at_its_thresholds() -> None:
    counter = Counter("c", nudge=2, abort=4)
    assert [counter.hit() for _ in range(5)] == [None, "nudge", "nudge", "abort", "abort"]
    counter.reset()
    assert counter.hit() is None


def test_a_zero_threshold_is_off() -> None:
    assert [Counter("c", 0, 2).hit() for _ in range(1)] == [None]
    never = Counter("c", 0, 0)
    assert {never.hit() for _ in range(10)} == {None}


def test_a_person_allowing_once_starts_the_count_again_and_always_turns_it_off() -> None:
    counter = Counter("c", 0, 2)
    counter.hit()
    assert counter.hit() == "abort"
    counter.allow(Grant.ONCE)
    assert (counter.count, counter.hit()) == (0, None)
    assert counter.hit() == "abort"
    counter.allow(Grant.ALWAYS)
    assert [counter.hit() for _ in range(5)] == [None] * 5
    assert counter.count == 5, "it counts on while off"


# -- the breakers --


def test_seen_calls_are_the_same_whatever_the_order_or_spacing_of_their_arguments() -> None:
    assert seen(arguments='{"a": 1, "b": 2}').key == seen(arguments='{"b":2,"a":1}').key
    assert seen(arguments='{"a": 1}').key != seen("other", '{"a": 1}').key
    assert seen(arguments="{broken").key == seen(arguments="{broken").key
    assert seen(arguments="{broken").key != seen(arguments="{broken ").key


def test_repeat_counts_identical_calls_and_starts_again_on_another() -> None:
    repeat = Repeat(nudge=3, abort=5)
    same = seen(arguments='{"q": 1}')
    trips = [repeat.check(same) for _ in range(5)]
    assert kinds(trips) == ["-", "-", "nudge", "nudge", "abort"]
    assert isinstance(trips[2], Nudge)
    assert "same call 3 times" in trips[2].text
    assert isinstance(trips[4], Abort)
    assert trips[4].counter.name == "repeat"
    assert trips[4].detail == "t called 5 times alike"
    assert repeat.check(seen(arguments='{"q": 2}')) is None
    assert repeat.counter.count == 1


def test_fruitless_counts_short_results_and_starts_again_on_a_long_one() -> None:
    fruitless = Fruitless(nudge=2, abort=3, max_len=48)
    assert kinds([fruitless.check(seen(size=48)) for _ in range(2)]) == ["-", "nudge"]
    assert fruitless.check(seen(size=49)) is None
    assert fruitless.counter.count == 0
    trips = [fruitless.check(seen(size=0)) for _ in range(3)]
    assert kinds(trips) == ["-", "nudge", "abort"]
    assert isinstance(trips[1], Nudge)
    assert "last 2 calls returned almost nothing" in trips[1].text
    assert isinstance(trips[2], Abort)
    assert trips[2].counter.name == "fruitless"


def test_similar_results_count_one_tool_with_other_arguments_from_the_series_first() -> None:
    similar = SimilarResults(nudge=3, abort=4, delta=10)
    calls = [seen("s", f'{{"q": {i}}}', 100 + i) for i in range(4)]
    trips = [similar.check(c) for c in calls]
    assert kinds(trips) == ["-", "-", "nudge", "abort"]
    assert isinstance(trips[2], Nudge)
    assert "called s 3 times" in trips[2].text
    assert isinstance(trips[3], Abort)
    assert trips[3].counter.name == "same_tool"


def test_similar_results_start_again_on_another_tool_the_same_call_or_another_size() -> None:
    for breaking in (seen("other", '{"q": 9}'), seen("s", '{"q": 1}'), seen("s", '{"q": 9}', 111)):
        similar = SimilarResults(nudge=3, abort=0, delta=10)
        similar.check(seen("s", '{"q": 0}'))
        similar.check(seen("s", '{"q": 1}'))
        assert similar.counter.count == 2
        similar.check(breaking)
        assert similar.counter.count == 1, breaking


def test_max_tokens_counts_cut_responses_and_starts_again_on_a_whole_one() -> None:
    cut = MaxTokens(abort=2)
    assert cut.check(cut=True) is None
    assert cut.check(cut=False) is None
    assert cut.check(cut=True) is None
    abort = cut.check(cut=True)
    assert abort is not None
    assert (abort.counter.name, abort.detail) == (
        "truncation",
        "responses keep being cut at max tokens",
    )


def test_bad_arguments_count_per_tool_and_start_again_when_they_parse() -> None:
    bad = BadArguments(abort=2)
    assert bad.check("a", parsed=False) is None
    assert bad.check("b", parsed=False) is None, "another tool has its own count"
    abort = bad.check("a", parsed=False)
    assert abort is not None
    assert (abort.counter.name, abort.detail) == (
        "parse_error:a",
        "the arguments of a keep failing to parse",
    )
    assert bad.check("b", parsed=True) is None
    assert bad.check("b", parsed=False) is None


def test_the_call_breakers_each_count_every_call_in_order() -> None:
    breakers = CallBreakers(
        Breakers(repeat_nudge=2, repeat_abort=0, fruitless_nudge=2, same_tool_nudge=0)
    )
    first = breakers.check(seen(size=1))
    second = breakers.check(seen(size=1))
    assert first == []
    assert [type(t) for t in second] == [Nudge, Nudge]
    assert isinstance(second[0], Nudge)
    assert "same call" in second[0].text
    assert isinstance(second[1], Nudge)
    assert "almost nothing" in second[1].text
    assert breakers.similar.counter.count == 1, "the same call again is no series"
