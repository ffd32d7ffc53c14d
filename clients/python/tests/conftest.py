"""Shared fixtures. The suite runs against a real `gavel serve` whose judges are the mock judge
of gavel's Rust tests: `cargo test --test python_client` starts both and sets GAVEL_URL (and
GAVEL_TEST_BROKEN_JUDGE, a judge that answers 500 to everything). The mock scores each
trajectory with the number after `SCORE=` in its text."""

import os
import uuid

import pytest


@pytest.fixture
def gavel_url():
    url = os.environ.get("GAVEL_URL")
    if not url:
        pytest.skip("GAVEL_URL is unset: run through `cargo test --test python_client`")
    return url


@pytest.fixture
def broken_judge(gavel_url):
    name = os.environ.get("GAVEL_TEST_BROKEN_JUDGE")
    if not name:
        pytest.skip("GAVEL_TEST_BROKEN_JUDGE is unset")
    return name


@pytest.fixture
def tag():
    """A unique word, so no two tests share a cached verdict."""
    return uuid.uuid4().hex[:12]


def traj(question, answer):
    return {
        "messages": [
            {"role": "system", "content": "Answer arithmetic questions. End with ANSWER: <n>."},
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
    }


def marked(tag, scores):
    """A group whose trajectory i the mock scores scores[i]."""
    return [traj(f"[{tag}] What is 1030 * 4?", f"try {i}: SCORE={s} ANSWER: 41{i}0") for i, s in enumerate(scores)]
