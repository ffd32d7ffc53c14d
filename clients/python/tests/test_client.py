import asyncio

import pytest

import gavel_client
from gavel_client import (
    AsyncClient,
    Client,
    GavelConnectionError,
    InvalidRequest,
    JudgeError,
    JudgeUnavailable,
    ScoreResult,
)
from conftest import marked, traj


def test_score_group_returns_rewards_advantages_explanations_usage(gavel_url, tag):
    r = gavel_client.score_group(marked(tag, [0.9, 0.1, 0.6, 0.4]), rubric="default", url=gavel_url)
    assert isinstance(r, ScoreResult)
    assert r.rewards == [0.9, 0.1, 0.6, 0.4]
    assert len(r.advantages) == 4
    assert r.advantages[0] > r.advantages[2] > r.advantages[3] > r.advantages[1]
    assert abs(sum(r.advantages)) < 1e-9
    assert all(e.startswith("mock read") for e in r.explanations)
    assert [s.judge_score for s in r.scores] == [0.9, 0.1, 0.6, 0.4]
    assert r.usage.judge_calls == 1 and r.usage.cache_hits == 0
    assert r.usage.prompt_tokens == 100
    assert r.rubric.name == "default" and r.rubric.version.startswith("sha256:")
    assert r.judges[0]["name"] == "mock"
    # The same group again is answered from the verdict cache.
    again = Client(gavel_url).score_group(marked(tag, [0.9, 0.1, 0.6, 0.4]))
    assert again.rewards == r.rewards and again.usage.cache_hits == 1 and again.usage.judge_calls == 0


def test_async_twin_and_concurrent_groups(gavel_url, tag):
    async def run():
        one = await gavel_client.ascore_group(marked(tag, [0.3, 0.8]), url=gavel_url)
        async with AsyncClient(gavel_url) as c:
            many = await asyncio.gather(
                *(c.score_group(marked(f"{tag}-{k}", [0.1 * k, 0.5])) for k in range(1, 4))
            )
        return one, many

    one, many = asyncio.run(run())
    assert one.rewards == [0.3, 0.8]
    assert [m.rewards[0] for m in many] == pytest.approx([0.1, 0.2, 0.3])


def test_verifiers_and_policy_reach_the_daemon(gavel_url, tag):
    group = [traj(f"[{tag}] 1030*4?", "SCORE=0.2\nANSWER: 4120"), traj(f"[{tag}] 1030*4?", "SCORE=0.9\nANSWER: 4121")]
    r = gavel_client.score_group(
        group,
        verifiers=[{"type": "answer_line", "kind": "integer", "expected": 4120}],
        policy={"type": "weighted", "weights": {"judge": 1.0, "answer_line": 1.0}},
        url=gavel_url,
    )
    assert [s.components["answer_line"] for s in r.scores] == [1.0, 0.0]
    assert r.rewards == pytest.approx([0.6, 0.45])
    assert r.scores[1].reasons["answer_line"].startswith("wrong")


def test_errors_are_typed(gavel_url, broken_judge, tag):
    with pytest.raises(InvalidRequest) as e:
        gavel_client.score_group(marked(tag, [0.5]), rubric="no_such_rubric", url=gavel_url)
    assert e.value.status == 400 and "no_such_rubric" in e.value.message
    assert e.value.param == "rubric"
    with pytest.raises(InvalidRequest) as e:
        gavel_client.score_group([{"messages": [{"role": "robot", "content": "x"}]}], url=gavel_url)
    assert "trajectories[0].messages[0].role" in e.value.message
    assert e.value.param == "trajectories[0].messages[0].role"
    with pytest.raises(JudgeUnavailable) as e:
        gavel_client.score_group(marked(tag, [0.5, 0.6]), judge=broken_judge, url=gavel_url)
    assert isinstance(e.value, JudgeError) and e.value.status == 502
    # Asked for, a judge failure is "no reward", never a number.
    r = gavel_client.score_group(marked(tag, [0.5, 0.6]), judge=broken_judge, on_judge_error="null", url=gavel_url)
    assert r.rewards == [None, None] and r.advantages == [0.0, 0.0]
    assert r.error["type"] == "judge_unavailable"
    with pytest.raises(GavelConnectionError):
        Client("http://127.0.0.1:9", max_retries=0, connect_retry_s=0).health()


def test_art_shaped_trajectories_are_accepted_directly(gavel_url, tag):
    from test_art import Choice, Trajectory

    ts = [
        Trajectory([{"role": "user", "content": f"[{tag}] q"}, Choice(f"SCORE={s} answer {i}")], reward=1.0)
        for i, s in enumerate([0.25, 0.75])
    ]
    r = gavel_client.score_group(ts, url=gavel_url)
    assert r.rewards == [0.25, 0.75]
    assert [s.components["independent_reward"] for s in r.scores] == [1.0, 1.0]


def test_openrlhf_get_reward_as_openrlhf_sends_it(gavel_url, tag):
    prompt = f"<|im_start|>user\n[{tag}] What is 7*6?<|im_end|>\n<|im_start|>assistant\n"
    body = Client(gavel_url).get_reward(
        [prompt + "SCORE=0.8 ANSWER: 42<|im_end|>", prompt + "SCORE=0.3 ANSWER: 41<|im_end|>"],
        [prompt, prompt],
        ["42", "42"],
    )
    assert body["rewards"] == [0.8, 0.3]
    assert body["scores"] == body["rewards"]
    assert body["extra_logs"]["group_size"] == [2, 2]
