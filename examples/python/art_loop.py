"""An ART training loop rewarded by gavel instead of ART's built-in RULER.

One import changes (`from gavel_client.art import ruler_score_group`); the judge, rubric, cache
and verifiers now live in the gavel daemon, shared by every run. Each scenario's exact answer is
checked by an `answer_line` verifier next to the judge's relative score.

Needs ART (`pip install openpipe-art`), a GPU for the LocalBackend, and a running daemon:

    gavel serve --config gavel.toml &
    GAVEL_URL=http://127.0.0.1:8080 python examples/python/art_loop.py
"""

import asyncio
import os

import art
from art.local import LocalBackend

from gavel_client.art import ruler_score_group

GAVEL_URL = os.environ.get("GAVEL_URL", "http://127.0.0.1:8080")
GROUP_SIZE = 8
SYSTEM = "You are a careful calculator. Think briefly, then end with a line `ANSWER: <integer>`."
SCENARIOS = [
    {"id": "mul", "question": "What is 1030 * 4?", "answer": 4120},
    {"id": "sum", "question": "What is 2024 + 365 + 12?", "answer": 2401},
    {"id": "div", "question": "What is 9801 / 99?", "answer": 99},
]


async def rollout(model: art.TrainableModel, scenario: dict) -> art.Trajectory:
    """One episode: ask, sample an answer, keep the sampled Choice (ART trains on it)."""
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": scenario["question"]},
    ]
    client = model.openai_client()
    completion = await client.chat.completions.create(
        model=model.name, messages=messages, max_tokens=256, temperature=1.0
    )
    return art.Trajectory(
        messages_and_choices=[*messages, completion.choices[0]],
        reward=0.0,
        metadata={"scenario": scenario["id"], "expected": scenario["answer"]},
    )


async def judge_group(group: art.TrajectoryGroup):
    """`after_each` hook: one gavel call per group. A failed judge drops the group (None)
    rather than training on a made-up reward."""
    expected = group.trajectories[0].metadata["expected"]
    return await ruler_score_group(
        group,
        rubric="default",
        verifiers=[{"type": "answer_line", "kind": "integer", "expected": expected}],
        url=GAVEL_URL,
        swallow_exceptions=True,
    )


async def main(steps: int = 20, backend=None) -> art.TrainableModel:
    model = art.TrainableModel(
        name="calc-001", project="gavel-demo", base_model="Qwen/Qwen2.5-1.5B-Instruct"
    )
    await model.register(backend or LocalBackend())
    for _ in range(await model.get_step(), steps):
        groups = await art.gather_trajectory_groups(
            (
                art.TrajectoryGroup(rollout(model, s) for _ in range(GROUP_SIZE))
                for s in SCENARIOS
            ),
            after_each=judge_group,
        )
        await model.train(groups, config=art.TrainConfig(learning_rate=1e-5))
    return model


if __name__ == "__main__":
    asyncio.run(main())
