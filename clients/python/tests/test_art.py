"""The ART adapter on ART-shaped stand-ins (ART is not a dependency): the shapes mirror ART's
`Trajectory` (messages_and_choices, reward, metrics, metadata, logs, log()) and
`TrajectoryGroup` (constructed from its trajectories), and OpenAI's `Choice`."""

import asyncio

import pytest

from gavel_client import JudgeUnavailable
from gavel_client.art import ruler_score_group, score_group, score_group_sync


class Message:
    def __init__(self, content):
        self.role, self.content = "assistant", content

    def model_dump(self, mode="python", exclude_none=False):
        return {"role": self.role, "content": self.content}


class Choice:
    """OpenAI's chat completion Choice: the sampled message is inside."""

    def __init__(self, content):
        self.index, self.finish_reason, self.message = 0, "stop", Message(content)

    def model_dump(self, mode="python", exclude_none=False):
        return {"index": self.index, "finish_reason": self.finish_reason, "message": self.message.model_dump()}


class Trajectory:
    def __init__(self, messages_and_choices, reward=0.0, metrics=None, metadata=None):
        self.messages_and_choices = messages_and_choices
        self.reward = reward
        self.metrics = dict(metrics or {})
        self.metadata = dict(metadata or {})
        self.logs = []

    def log(self, line):
        self.logs.append(line)

    def model_copy(self):
        c = Trajectory(self.messages_and_choices, self.reward, self.metrics, self.metadata)
        c.logs = self.logs
        return c


class TrajectoryGroup:
    def __init__(self, trajectories, *, metadata=None, exceptions=None):
        self.trajectories = list(trajectories)
        self.metadata = dict(metadata or {})
        self.exceptions = list(exceptions or [])


def group(tag, scores, reward=0.0):
    return TrajectoryGroup(
        [
            Trajectory(
                [{"role": "system", "content": "Solve it."}, {"role": "user", "content": f"[{tag}] 1030*4?"}, Choice(f"try {i} SCORE={s}\nANSWER: 41{i}0")],
                reward=reward,
                metrics={"turns": 1},
            )
            for i, s in enumerate(scores)
        ],
        metadata={"scenario": tag},
        exceptions=["one rollout failed"],
    )


def test_sets_reward_keeps_the_original_and_leaves_the_input_alone(gavel_url, tag):
    g = group(tag, [0.9, 0.2, 0.5], reward=1.0)
    out = asyncio.run(score_group(g, url=gavel_url))
    assert isinstance(out, TrajectoryGroup) and out is not g
    assert [t.reward for t in out.trajectories] == [0.9, 0.2, 0.5]
    for t in out.trajectories:
        assert t.metrics["independent_reward"] == 1.0
        assert t.metrics["turns"] == 1
        assert t.metrics["judge_score"] == t.reward
        assert t.logs and t.logs[0].startswith("gavel explanation: mock read")
    assert out.metadata == {"scenario": tag} and out.exceptions == ["one rollout failed"]
    # The group passed in is unchanged.
    assert [t.reward for t in g.trajectories] == [1.0, 1.0, 1.0]
    assert all(t.metrics == {"turns": 1} and t.logs == [] for t in g.trajectories)
    assert ruler_score_group is score_group


def test_sync_twin_with_verifiers_reports_components(gavel_url, tag):
    out = score_group_sync(
        group(tag, [0.4, 0.6]),
        url=gavel_url,
        verifiers=[{"type": "answer_line", "kind": "integer", "expected": 4110}],
    )
    assert [t.metrics["gavel_answer_line"] for t in out.trajectories] == [0.0, 1.0]
    assert [t.reward for t in out.trajectories] == pytest.approx([0.2, 0.8])


def test_a_judge_failure_raises_or_drops_the_group(gavel_url, broken_judge, tag):
    with pytest.raises(JudgeUnavailable):
        asyncio.run(score_group(group(tag, [0.1, 0.2]), broken_judge, url=gavel_url))
    assert asyncio.run(score_group(group(tag, [0.1, 0.2]), broken_judge, url=gavel_url, swallow_exceptions=True)) is None
