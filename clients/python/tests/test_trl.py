"""The TRL reward function, called the way GRPOTrainer calls it."""

import inspect
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import gavel_client
from gavel_client import Client
from gavel_client.trl import reward_func, to_messages
from test_retries import Later, closed_port, stub  # noqa: F401 (stub is a fixture)

#: Where the gavel_client under test lives, for the tests that run their own interpreter.
SRC = Path(gavel_client.__file__).resolve().parents[1]


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
    with pytest.warns(gavel_client.GavelRewardWarning, match="judge_unavailable"):
        out = f(prompts=[f"[{tag}] q", f"[{tag}] q", f"[{tag}] r"], completions=["a", "b", "c"])
    assert out == [None, None, None]
    f.close()


# ---- what a None reward, TRL's loggers and the end of a run look like ----


def failure_message(gavel_url, broken_judge, tag):
    """The daemon's own words for the broken judge's failure."""
    with Client(gavel_url) as c:
        r = c.score_group([{"messages": [{"role": "user", "content": f"[{tag}] m"}, {"role": "assistant", "content": "x"}]}], judge=broken_judge, on_judge_error="null")
    return r.error["type"], r.error["message"]


def test_a_judge_failure_warns_once_naming_the_daemons_error(gavel_url, broken_judge, tag):
    kind, message = failure_message(gavel_url, broken_judge, tag)
    assert kind == "judge_unavailable" and message
    f = reward_func(gavel_url, judge=broken_judge)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            out = f(prompts=[f"[{tag}] q{step}"] * 2 + [f"[{tag}] r{step}"], completions=["a", "b", "c"])
            assert out == [None, None, None]
    ours = [w for w in caught if issubclass(w.category, gavel_client.GavelRewardWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    text = str(ours[0].message)
    assert f"{kind}: {message}" in text and "3 of 3 completions in 2 group(s)" in text
    assert ours[0].filename == __file__, "the warning points at the caller"
    f.close()


BATCH_OF_FAILURES = {
    "scale_rewards": "group",
    "usage": {"judge_calls": 3, "cache_hits": 1, "prompt_tokens": 300, "completion_tokens": 30, "failed_calls": 4},
    "results": [
        {"rewards": [None, None], "advantages": [0.0, 0.0], "scores": [], "error": {"type": "judge_timeout", "message": "deadline passed"}},
        {"rewards": [None, None], "advantages": [0.0, 0.0], "scores": [], "error": {"type": "judge_invalid_output", "message": "no verdict after a re-ask"}},
        {
            "rewards": [None, 0.5],
            "advantages": [0.0, 0.0],
            "scores": [
                {"trajectory_id": "1", "score": None, "explanation": "", "components": {"judge": None}},
                {"trajectory_id": "2", "score": 0.5, "explanation": "fine", "components": {"judge": 0.5}},
            ],
        },
    ],
}


@pytest.mark.parametrize("stub", [[]], indirect=True)
def test_each_cause_warns_once_and_reaches_trls_loggers(stub):
    stub.ok = BATCH_OF_FAILURES
    f = reward_func(stub.url, name="judge")
    metrics, extra = [], {}
    calls = dict(
        prompts=["p", "p", "q", "q", "r", "r"],
        completions=list("abcdef"),
        log_metric=lambda key, value: metrics.append((key, value)),
        log_extra=lambda column, values: extra.setdefault(column, []).append(list(values)),
        trainer_state=None,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert f(**calls) == [None, None, None, None, None, 0.5]
        first = [str(w.message) for w in caught if issubclass(w.category, gavel_client.GavelRewardWarning)]
        assert f(**calls) == [None, None, None, None, None, 0.5]
        both = [str(w.message) for w in caught if issubclass(w.category, gavel_client.GavelRewardWarning)]
    assert len(first) == 3 and both == first, both
    assert "judge_timeout: deadline passed" in first[0] and "2 of 6 completions in 1 group(s)" in first[0]
    assert "judge_invalid_output: no verdict after a re-ask" in first[1]
    assert "no_reward: no component of the reward applied" in first[2] and "1 of 6" in first[2]
    assert metrics[:7] == [
        ("judge/judge_calls", 3.0), ("judge/cache_hits", 1.0), ("judge/prompt_tokens", 300.0),
        ("judge/completion_tokens", 30.0), ("judge/failed_calls", 4.0), ("judge/failed_groups", 2.0),
        ("judge/no_reward", 5.0),
    ]
    assert metrics[7:] == metrics[:7]
    assert extra["judge/error"][0] == ["judge_timeout"] * 2 + ["judge_invalid_output"] * 2 + ["no_reward", ""]
    assert extra["judge/explanation"][0] == ["deadline passed"] * 2 + ["no verdict after a re-ask"] * 2 + ["no component of the reward applied", "fine"]
    f.close()


def test_reports_usage_and_explanations_through_trls_loggers(gavel_url, broken_judge, tag):
    def run(f, prompts, completions):
        metrics, extra = {}, {}
        out = f(
            prompts=prompts,
            completions=completions,
            completion_ids=[[0]] * len(prompts),
            trainer_state=None,
            log_metric=lambda key, value: metrics.__setitem__(key, value),
            log_extra=lambda column, values: extra.__setitem__(column, list(values)),
        )
        return out, metrics, extra

    p1, p2 = f"[{tag}] What is 1030*4?", f"[{tag}] What is 7*6?"
    prompts = [p1, p2, p1, p2]
    completions = ["SCORE=0.9 ANSWER: 4120", "SCORE=0.1 ANSWER: 41", "SCORE=0.4 ANSWER: 4000", "SCORE=0.7 ANSWER: 42"]
    with Client(gavel_url) as client:
        f = reward_func(client=client)
        out, metrics, extra = run(f, prompts, completions)
        assert out == [0.9, 0.1, 0.4, 0.7]
        assert metrics == {
            "gavel/judge_calls": 2.0, "gavel/cache_hits": 0.0, "gavel/prompt_tokens": 200.0,
            "gavel/completion_tokens": metrics["gavel/completion_tokens"], "gavel/failed_calls": 0.0, "gavel/failed_groups": 0.0, "gavel/no_reward": 0.0,
        }
        assert all(isinstance(v, float) for v in metrics.values())
        assert extra["gavel/error"] == [""] * 4
        assert len(extra["gavel/explanation"]) == 4 and all(e.startswith("mock read") for e in extra["gavel/explanation"])
        _, again, _ = run(f, prompts, completions)
        assert again["gavel/cache_hits"] == 2.0 and again["gavel/judge_calls"] == 0.0

        # A failing judge reports the same keys (TRL gathers them across processes), with why.
        kind, message = failure_message(gavel_url, broken_judge, tag)
        broken = reward_func(client=client, judge=broken_judge)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gavel_client.GavelRewardWarning)
            out, failed, extra = run(broken, [f"[{tag}] x"] * 2 + [f"[{tag}] y"], ["a", "b", "c"])
        assert out == [None, None, None]
        assert set(failed) == set(metrics)
        assert failed["gavel/failed_groups"] == 2.0 and failed["gavel/no_reward"] == 3.0
        assert extra["gavel/error"] == [kind] * 3 and extra["gavel/explanation"] == [message] * 3
        broken.close()  # a client passed in is the caller's: still usable
        assert client.health()


def test_log_callables_may_be_none_and_other_trl_keywords_are_accepted(gavel_url, tag):
    f = reward_func(gavel_url)
    out = f(prompts=[f"[{tag}] a"], completions=["SCORE=0.3"], log_metric=None, log_extra=None, trainer_state=None, environments=None, completion_ids=[[1]])
    assert out == [0.3]
    f.close()


def test_the_reward_function_waits_out_a_daemon_restart(monkeypatch):
    monkeypatch.delenv("GAVEL_CONNECT_RETRY_S", raising=False)
    port = closed_port()
    later = Later(port, 0.5, ok=BATCH_OF_FAILURES)
    try:
        f = reward_func(f"http://127.0.0.1:{port}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gavel_client.GavelRewardWarning)
            out = f(prompts=["p", "p", "q", "q", "r", "r"], completions=list("abcdef"))
        assert out[-1] == 0.5
        f.close()
    finally:
        later.close()


@pytest.mark.filterwarnings("error::ResourceWarning")
def test_close_closes_what_the_function_opened(gavel_url, tag):
    f = reward_func(gavel_url)
    assert f(prompts=[f"[{tag}] c"], completions=["SCORE=0.6"]) == [0.6]
    f.close()
    f.close()  # twice is fine
    with pytest.raises(RuntimeError):
        f.client.health()


def test_a_run_that_never_closes_ends_without_resource_warnings(gavel_url, tag):
    """A training script as users write it: the reward function is made, used, and left open
    when the interpreter exits. Python reports unclosed sockets only in dev mode, and only as
    "Exception ignored" on stderr, so the script runs in its own interpreter."""
    script = textwrap.dedent(
        f"""
        from gavel_client import Client
        from gavel_client.trl import reward_func
        f = reward_func({gavel_url!r})
        print(f(prompts=[{f"[{tag}] exit"!r}] * 2, completions=["SCORE=0.2", "SCORE=0.8"]))
        Client({gavel_url!r}).health()  # a client nobody closes
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", script],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.2, 0.8]"
    assert "ResourceWarning" not in out.stderr and "unclosed" not in out.stderr, out.stderr
