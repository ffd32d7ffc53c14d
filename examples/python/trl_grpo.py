"""TRL's GRPOTrainer with gavel as the reward function.

`reward_func` groups each prompt's `num_generations` completions, has gavel judge every group
relative to itself (one HTTP call per batch), and adds an `answer_line` check against the
dataset's `answer` column. A group whose judge failed gets `None` rewards, which TRL treats as
"no reward" rather than a zero.

Needs `pip install trl datasets`, a GPU, and a running daemon:

    gavel serve --config gavel.toml &
    GAVEL_URL=http://127.0.0.1:8080 python examples/python/trl_grpo.py
"""

import os

from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer

from gavel_client.trl import reward_func

GAVEL_URL = os.environ.get("GAVEL_URL", "http://127.0.0.1:8080")
SYSTEM = "Solve the problem. End with a line `ANSWER: <number>`."


def to_example(row: dict) -> dict:
    """GSM8K row → conversational prompt plus the final answer (after `####`)."""
    return {
        "prompt": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": row["question"]},
        ],
        "answer": row["answer"].split("####")[-1].strip().replace(",", ""),
    }


def config() -> GRPOConfig:
    return GRPOConfig(
        output_dir="grpo-gavel",
        num_generations=8,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=4,
        max_completion_length=512,
        learning_rate=1e-6,
        logging_steps=1,
        report_to="none",
    )


def build_trainer(model: str = "Qwen/Qwen2.5-0.5B-Instruct", dataset=None) -> GRPOTrainer:
    if dataset is None:
        dataset = load_dataset("openai/gsm8k", "main", split="train").map(to_example)
    gavel = reward_func(
        GAVEL_URL,
        rubric="default",
        answer_column="answer",
        answer_kind="decimal",
        name="gavel",
    )
    return GRPOTrainer(model=model, reward_funcs=[gavel], args=config(), train_dataset=dataset)


if __name__ == "__main__":
    build_trainer().train()
