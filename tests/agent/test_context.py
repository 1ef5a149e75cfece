"""The context window: rendering, fill, token correction, compaction, vulnerable outputs."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox.agent._context import (
    MESSAGE_OVERHEAD,
    ContextWindow,
    PruneObservations,
    check_pairing,
    input_hint,
    message_tokens,
    render_steps,
)
from sandbox.agent._types import (
    CompactionStrategy,
    ContextManager,
    FillStatus,
    Message,
    Step,
    TokenCounter,
    ToolCall,
    VulnerableOutput,
)

pytestmark = pytest.mark.anyio


def call(name: str, cid: str, **arguments: str) -> ToolCall:
    args = ", ".join(f'"{k}": "{v}"' for k, v in arguments.items())
    return ToolCall(id=cid, name=name, arguments="{" + args + "}")


def tool_step(n: int, obs: str, *, group: int = 0, cache_hash: str = "", path: str = "") -> Step:
    return Step(
        number=n,
        thought=f"thinking {n}",
        reasoning=f"why {n}",
        action=call("read_file", f"c{n}", path=path or f"f{n}.py"),
        observation=obs,
        response_group=group,
        cache_hash=cache_hash,
    )


def roles(messages: Sequence[Message]) -> list[str]:
    return [m.role for m in messages]


def window(
    max_tokens: int = 100_000,
    *,
    counter: TokenCounter | None = None,
    strategy: CompactionStrategy | None = None,
) -> ContextWindow:
    return ContextWindow(
        "sys", "the task", max_tokens, output_limit=0, counter=counter, strategy=strategy
    )


def test_it_is_a_context_manager_and_its_strategy_a_compaction_strategy() -> None:
    assert isinstance(window(), ContextManager)
    assert isinstance(PruneObservations(), CompactionStrategy)


# -- rendering --


def test_the_prompt_starts_with_system_and_task() -> None:
    assert window().build_prompt() == [
        Message(role="system", content="sys"),
        Message(role="user", content="the task"),
    ]
    assert ContextWindow("", "t", 1000).build_prompt() == [Message(role="user", content="t")]


def test_a_standalone_step_is_an_assistant_call_and_its_tool_message() -> None:
    w = window()
    w.add_step(tool_step(1, "contents"))
    _, _, assistant, tool = w.build_prompt()
    assert assistant == Message(
        role="assistant",
        content="thinking 1",
        tool_calls=(call("read_file", "c1", path="f1.py"),),
        reasoning="why 1",
    )
    assert tool == Message(role="tool", content="contents", tool_call_id="c1")


def test_a_step_without_action_is_its_thought_and_a_nudge_follows_the_step() -> None:
    w = window()
    w.add_step(Step(number=1, thought="just text", user_nudge="call finish"))
    w.add_step(msgspec.structs.replace(tool_step(2, "out"), user_nudge="n"))
    w.add_step(Step(number=3, user_nudge="a live message"))
    msgs = w.build_prompt()[2:]
    assert roles(msgs) == ["assistant", "user", "assistant", "tool", "user", "user"]
    assert msgs[0] == Message(role="assistant", content="just text")
    assert msgs[1].content == "call finish"
    assert msgs[4].content == "n"
    assert msgs[5].content == "a live message"


def test_a_response_group_is_one_assistant_message_with_every_call() -> None:
    steps = [
        Step(number=1, thought="two reads", action=call("read_file", "a"), observation="A",
             response_group=5, user_nudge="first nudge"),
        Step(number=2, thought="two reads", action=call("ripgrep", "b"), observation="B",
             response_group=5),
        Step(number=2, user_nudge="a breaker nudge added mid-group"),
        Step(number=3, thought="two reads", action=call("glob", "c"), observation="C",
             response_group=5),
        Step(number=4, thought="next", action=call("glob", "d"), observation="D",
             response_group=6),
    ]  # fmt: skip
    msgs = render_steps(steps)
    assert roles(msgs) == ["assistant", "tool", "tool", "tool", "user", "user", "assistant", "tool"]
    first = msgs[0]
    assert first.content == "two reads"  # the response's text once, not once per call
    assert [c.id for c in first.tool_calls] == ["a", "b", "c"]
    assert [(m.tool_call_id, m.content) for m in msgs[1:4]] == [("a", "A"), ("b", "B"), ("c", "C")]
    assert [m.content for m in msgs[4:6]] == ["first nudge", "a breaker nudge added mid-group"]
    check_pairing(msgs)


def test_missing_or_repeated_call_ids_are_made_unique() -> None:
    steps = [
        Step(number=1, action=ToolCall(id="", name="a"), observation="x", response_group=1),
        Step(number=2, action=ToolCall(id="same", name="b"), observation="y", response_group=1),
        Step(number=3, action=ToolCall(id="same", name="c"), observation="", response_group=1),
    ]
    msgs = render_steps(steps)
    check_pairing(msgs)
    ids = [c.id for c in msgs[0].tool_calls]
    assert len(set(ids)) == 3
    assert ids[1] == "same"
    assert msgs[3].content == "(no output)"


def test_check_pairing_finds_each_violation() -> None:
    calls = (ToolCall(id="a", name="t"), ToolCall(id="b", name="t"))
    ok = [Message(role="assistant", tool_calls=calls)] + [
        Message(role="tool", tool_call_id=i) for i in ("b", "a")
    ]
    check_pairing(ok)
    with pytest.raises(ValueError, match="no tool message"):
        check_pairing(ok[:2])
    with pytest.raises(ValueError, match="no tool message"):
        check_pairing([*ok[:2], Message(role="user", content="x"), ok[2]])
    with pytest.raises(ValueError, match="unknown call"):
        check_pairing([Message(role="tool", tool_call_id="a")])
    with pytest.raises(ValueError, match="repeated"):
        check_pairing([Message(role="assistant", tool_calls=(calls[0], calls[0]))])


def test_a_step_changed_after_it_was_added_renders_changed() -> None:
    w = window()
    step = tool_step(1, "out")
    w.add_step(step)
    step.observation += "\n[verify_on_edit] passed"
    assert w.build_prompt()[-1].content == "out\n[verify_on_edit] passed"


def test_seed_steps_replaces_the_history() -> None:
    w = window()
    w.add_step(tool_step(1, "old"))
    seeded = [tool_step(1, "a"), tool_step(2, "b")]
    w.seed_steps(seeded)
    assert w.steps == tuple(seeded)
    assert [m.content for m in w.build_prompt() if m.role == "tool"] == ["a", "b"]


def test_input_hints_name_what_a_call_touched() -> None:
    assert input_hint('{"path": "src/a.py", "limit": 3}') == "src/a.py"
    assert input_hint('{"limit": 3, "pattern": "def \\\\w+"}') == "def \\w+"
    assert input_hint('{"code": "print(1)"}') == "print(1)"
    assert input_hint('{"n": 1}') == ""
    assert input_hint("not json") == "not json"
    assert len(input_hint('{"path": "' + "x" * 500 + '"}')) == 60


# -- fill and counting --


@pytest.mark.parametrize(
    ("used", "status"),
    [
        (699, FillStatus.OK),
        (700, FillStatus.COMPACT),
        (849, FillStatus.COMPACT),
        (850, FillStatus.WARNING),
        (950, FillStatus.EMERGENCY),
        (999, FillStatus.EMERGENCY),
        (1000, FillStatus.REJECT),
        (1500, FillStatus.REJECT),
    ],
)
def test_fill_status_at_each_threshold(used: int, status: FillStatus) -> None:
    w = window(max_tokens=1000)
    w.build_prompt()
    w.correct_token_count(used)  # the provider's count becomes the estimate
    check = w.check_fill()
    assert check.status is status
    assert (check.used, check.max) == (used, 1000)
    assert check.percent == pytest.approx(used / 10)
    assert w.fill_percent() == pytest.approx(used / 10)
    assert w.available_tokens() == max(0, 1000 - used)


def test_the_answers_room_is_kept_out_of_the_capacity() -> None:
    assert ContextWindow("s", "t", 10_000, output_limit=2_000).check_fill().max == 8_000
    small = ContextWindow("s", "t", 1_000)  # a 4096-token answer cannot fit: keep half
    assert small.check_fill().max == 500
    assert small.output_limit() == 4096


def test_bad_sizes_and_thresholds_are_refused() -> None:
    with pytest.raises(ValueError):
        ContextWindow("s", "t", 0)
    with pytest.raises(ValueError):
        ContextWindow("s", "t", 1000, compact_at=0.9, warning_at=0.8)
    with pytest.raises(ValueError):
        ContextWindow("s", "t", 1000, compact_target=0.8)


def test_the_estimate_counts_every_message() -> None:
    class Chars:
        def count(self, text: str) -> int:
            return len(text)

    w = window(counter=Chars())
    step = tool_step(1, "12345")
    w.add_step(step)
    expected = sum(message_tokens(m, Chars()) for m in w.build_prompt())
    assert w.check_fill().used == expected
    assert message_tokens(Message(role="user", content="abc"), Chars()) == MESSAGE_OVERHEAD + 3


def test_a_correction_is_followed_by_later_estimates() -> None:
    w = window()
    raw = w.check_fill().used
    w.build_prompt()
    w.correct_token_count(raw + 1000)  # e.g. the tool schemas we do not count
    assert w.check_fill().used == raw + 1000
    w.add_step(tool_step(1, "x" * 400))
    grown = w.check_fill().used
    assert grown > raw + 1000 + 100  # grows by our count of the step, from the anchor
    w.correct_token_count(0)  # no count: ignored
    assert w.check_fill().used == grown


def test_two_corrections_fit_the_tokenizers_rate() -> None:
    w = window()
    for n in (1, 2):
        w.add_step(tool_step(n, "y" * 4000))
        raw = sum(message_tokens(m) for m in w.build_prompt())
        w.correct_token_count(2 * raw)  # the provider counts twice what we do
    before = w.check_fill().used
    w.add_step(tool_step(3, "z" * 4000))
    step_raw = sum(message_tokens(m) for m in render_steps([w.steps[-1]]))
    assert w.check_fill().used - before == pytest.approx(2 * step_raw, abs=1)


def test_the_correction_is_for_the_prompt_last_built() -> None:
    w = window()
    w.build_prompt()
    at_build = w.check_fill().used
    w.add_step(tool_step(1, "x" * 4000))  # added after the prompt was sent
    w.correct_token_count(at_build)
    assert w.check_fill().used > at_build  # the new step still counts


# -- compaction --


def big_history(n: int, size: int = 2000) -> list[Step]:
    return [tool_step(i, f"{i}:" + "o" * size, cache_hash=f"hash{i}") for i in range(1, n + 1)]


def pruned(content: str) -> bool:
    return content.startswith("[pruned: ")


async def test_compaction_prunes_old_results_and_keeps_the_last_six() -> None:
    w = window(max_tokens=12_000)
    for s in big_history(20):
        w.add_step(s)
    assert w.check_fill().status is not FillStatus.OK
    result = await w.compact()
    assert result.before_percent > 70
    assert result.after_percent < 50
    assert result.after_percent == pytest.approx(w.fill_percent())
    msgs = w.build_prompt()
    check_pairing(msgs)
    tools = [m for m in msgs if m.role == "tool"]
    assert len(tools) == 20
    assert all(pruned(m.content) for m in tools[:14])
    assert [m.content for m in tools[14:]] == [s.observation for s in w.steps[14:]]
    assert tools[0].content == (
        "[pruned: read_file result, 2002 chars; cache hash hash1 — read it with tool_result_read]"
    )
    assistants = [m for m in msgs if m.role == "assistant"]
    assert all(not m.reasoning for m in assistants[:14])
    assert all(m.reasoning for m in assistants[14:])


async def test_steps_added_after_a_compaction_render_after_it() -> None:
    w = window(max_tokens=12_000)
    for s in big_history(20):
        w.add_step(s)
    await w.compact()
    w.add_step(tool_step(21, "fresh"))
    msgs = w.build_prompt()
    check_pairing(msgs)
    assert msgs[-1] == Message(role="tool", content="fresh", tool_call_id="c21")


async def test_compaction_never_splits_a_response() -> None:
    steps = big_history(4) + [
        tool_step(n, "g" * 3000, group=9, cache_hash=f"h{n}") for n in range(5, 10)
    ]
    # The last six steps start inside the group of five: the whole group is kept.
    msgs = PruneObservations().prune(steps, 10**9)
    check_pairing(msgs)
    tools = [m for m in msgs if m.role == "tool"]
    assert [pruned(m.content) for m in tools] == [True] * 3 + [False] * 6


async def test_a_tight_budget_summarizes_the_oldest_steps() -> None:
    steps = big_history(30)
    steps[3].is_error = True
    steps[4] = Step(number=5, user_nudge="please also check the tests")
    strategy = PruneObservations(keep_last=3)
    budget = 2000
    msgs = await strategy.compact(steps, budget)
    check_pairing(msgs)
    assert sum(message_tokens(m) for m in msgs) <= budget
    summary = msgs[0]
    assert summary.role == "user"
    assert summary.content.startswith("[Context compacted: steps 1-")
    assert "read_file (" in summary.content
    assert "1 failed" in summary.content
    assert "please also check the tests" in summary.content
    tools = [m for m in msgs if m.role == "tool"]
    assert [m.content for m in tools[-3:]] == [s.observation for s in steps[-3:]]


async def test_the_last_response_survives_any_budget() -> None:
    steps = big_history(10)
    msgs = PruneObservations().prune(steps, 0)
    check_pairing(msgs)
    assert msgs[0].content.startswith("[Context compacted:")
    assert msgs[-1] == Message(role="tool", content=steps[-1].observation, tool_call_id="c10")


async def test_small_results_are_not_pruned() -> None:
    steps = [tool_step(i, "tiny") for i in range(1, 20)]
    msgs = PruneObservations().prune(steps, 10**9)
    assert all(m.content == "tiny" for m in msgs if m.role == "tool")


async def test_an_uncached_result_is_stubbed_as_such() -> None:
    steps = big_history(8)
    steps[0].cache_hash = ""
    msgs = PruneObservations().prune(steps, 10**9)
    assert msgs[1].content == (
        "[pruned: read_file result, 2002 chars; not cached — run the tool again if you need it]"
    )


step_strategy = st.builds(
    Step,
    number=st.integers(0, 50),
    thought=st.sampled_from(["", "t", "thinking " * 20]),
    action=st.none() | st.builds(ToolCall, id=st.sampled_from(["", "a", "b"]), name=st.just("x")),
    observation=st.sampled_from(["", "o", "o" * 1000]),
    user_nudge=st.sampled_from(["", "nudge"]),
    response_group=st.integers(0, 3),
)


@given(st.lists(step_strategy, max_size=25), st.integers(0, 3000), st.integers(0, 8))
def test_any_history_compacts_to_valid_pairing(steps: list[Step], budget: int, keep: int) -> None:
    check_pairing(render_steps(steps))
    check_pairing(PruneObservations(keep_last=keep).prune(steps, budget))


async def test_a_strategy_that_breaks_pairing_is_refused() -> None:
    class Broken:
        async def compact(self, steps: Sequence[Step], budget_tokens: int) -> list[Message]:
            return [Message(role="assistant", tool_calls=(ToolCall(id="x", name="t"),))]

    w = window()
    w.add_step(tool_step(1, "out"))
    before = w.build_prompt()
    w.set_strategy(Broken())
    with pytest.raises(ValueError):
        await w.compact()
    assert w.build_prompt() == before


async def test_set_strategy_is_used_with_a_budget_for_the_steps() -> None:
    seen: list[int] = []

    class Forget:
        async def compact(self, steps: Sequence[Step], budget_tokens: int) -> list[Message]:
            seen.append(budget_tokens)
            return [Message(role="user", content="forgotten")]

    w = window(max_tokens=10_000)
    for s in big_history(5):
        w.add_step(s)
    w.set_strategy(Forget())
    result = await w.compact()
    head = sum(message_tokens(m) for m in w.build_prompt()[:2])
    assert seen == [5_000 - head]  # half the window, less the system message and task
    assert w.build_prompt()[2:] == [Message(role="user", content="forgotten")]
    assert result.after_percent < result.before_percent


async def test_compacting_nothing_changes_nothing() -> None:
    w = window()
    result = await w.compact()
    assert result.before_percent == result.after_percent


# -- vulnerable outputs --


async def test_vulnerable_outputs_are_the_old_large_results_oldest_first() -> None:
    w = window()
    steps = big_history(9)
    steps[1].observation = "small"
    for s in steps:
        w.add_step(s)
    assert w.vulnerable_outputs() == [
        VulnerableOutput(tool_name="read_file", input_hint="f1.py"),
        VulnerableOutput(tool_name="read_file", input_hint="f3.py"),
    ]
    await w.compact()
    assert w.vulnerable_outputs() == []  # pruned already
    for s in big_history(12)[9:]:
        w.add_step(s)
    # Steps 4-6 were kept whole by the compaction; the new steps push them out.
    assert [v.input_hint for v in w.vulnerable_outputs()] == ["f4.py", "f5.py", "f6.py"]


async def test_vulnerable_outputs_follow_the_strategys_keep_last() -> None:
    w = window(strategy=PruneObservations(keep_last=2))
    for s in big_history(4):
        w.add_step(s)
    assert [v.input_hint for v in w.vulnerable_outputs()] == ["f1.py", "f2.py"]
