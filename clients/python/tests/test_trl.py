"""The TRL reward function, called the way GRPOTrainer calls it."""

import inspect

from gavel_client.trl import reward_func, to_messages


def test_groups_by_prompt_and_returns_rewards_in_order(gavel_url, tag):
    f = reward_func(gavel_url, name="gavel_judge")
    assert f.__name__ == "gavel_judge"
    assert "prompts" in inspect.signature(f).parameters
    p1, p2 = f"[{tag}] What is 1030*4?", f"[{tag}] What is 7*6?"
    prompts = [p1, p2, p1, p2]
    completions = ["SCORE=0.9 ANSWER: 4120", "SCORE=0.1 ANSWER: 41", "SCORE=0.4 ANSWER: 4000", "SCORE=0.7 ANSWER: 42"]
    out = f(prompts=prompts, completions=completions, completion_ids=[[1]] * 4, trainer_state=None)
    assert out == [0.9, 0.1, 0.4, 0.7]


def test_answer_column_feeds_each_groups_answer_line(gavel_url, tag):
    f = reward_func(
        gavel_url,
        answer_column="answer",
        answer_kind="integer",
        policy={"type": "weighted", "weights": {"answer_line": 1.0}},
    )
    p1, p2 = f"[{tag}] 1030*4?", f"[{tag}] 7*6?"
    out = f(
        prompts=[p1, p1, p2, p2],
        completions=["ANSWER: 4120", "ANSWER: 42", "ANSWER: 4120", "ANSWER: 42"],
        answer=["4120", "4120", "42", "42"],
    )
    # Right only when each completion is checked against its own prompt's answer.
    assert out == [1.0, 0.0, 0.0, 1.0]


def test_conversational_prompts_and_completions(gavel_url, tag):
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"[{tag}] hi"}]
    f = reward_func(gavel_url)
    out = f(prompts=[prompt, prompt], completions=[[{"role": "assistant", "content": "SCORE=0.35 hello"}], [{"content": "SCORE=0.65 hey"}]])
    assert out == [0.35, 0.65]
    assert to_messages(prompt, [{"content": "x"}])[-1] == {"role": "assistant", "content": "x"}


def test_a_judge_failure_is_none_never_a_number(gavel_url, broken_judge, tag):
    f = reward_func(gavel_url, judge=broken_judge)
    out = f(prompts=[f"[{tag}] q", f"[{tag}] q", f"[{tag}] r"], completions=["a", "b", "c"])
    assert out == [None, None, None]
