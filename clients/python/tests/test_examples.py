"""examples/python/* need ART or TRL and a GPU, so CI does not train. Here they run on
stand-ins for `art`, `trl` and `datasets` that accept only the arguments the real libraries
take, and their reward calls go to the real daemon."""

import asyncio
import importlib.util
import sys
import types
from pathlib import Path

import pytest

import test_art

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "python"


def load(name, monkeypatch, **stubs):
    for mod, stub in stubs.items():
        monkeypatch.setitem(sys.modules, mod.replace("__", "."), stub)
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def art_stub(trained):
    art = types.ModuleType("art")
    local = types.ModuleType("art.local")
    calls = []

    class Trajectory(test_art.Trajectory):
        def __init__(self, *, messages_and_choices, reward, metrics=None, metadata=None):
            super().__init__(messages_and_choices, reward, metrics, metadata)

    class TrajectoryGroup(test_art.TrajectoryGroup):
        def __init__(self, trajectories, *, metadata=None, exceptions=None):
            super().__init__(trajectories, metadata=metadata, exceptions=exceptions)

    class Completions:
        async def create(self, *, model, messages, max_tokens, temperature):
            i = len(calls)
            calls.append(messages)
            right = {"What is 1030 * 4?": 4120, "What is 2024 + 365 + 12?": 2401, "What is 9801 / 99?": 99}
            answer = right[messages[-1]["content"]] + (i % 2)  # every other answer is wrong
            text = f"{i}: SCORE={(i % 8 + 1) / 10}\nANSWER: {answer}"
            return types.SimpleNamespace(choices=[test_art.Choice(text)])

    class TrainableModel:
        def __init__(self, *, name, project, base_model):
            self.name = name

        async def register(self, backend):
            assert isinstance(backend, LocalBackend)

        async def get_step(self):
            return 0

        def openai_client(self):
            return types.SimpleNamespace(chat=types.SimpleNamespace(completions=Completions()))

        async def train(self, groups, *, config):
            assert isinstance(config, TrainConfig)
            trained.extend(groups)

    class TrainConfig:
        def __init__(self, *, learning_rate):
            self.learning_rate = learning_rate

    class LocalBackend:
        pass

    async def gather_trajectory_groups(groups, *, after_each=None):
        out = []
        for g in groups:
            done = TrajectoryGroup([await t for t in g.trajectories])
            g = await after_each(done) if after_each else done
            if g is not None:
                out.append(g)
        return out

    for obj in (Trajectory, TrajectoryGroup, TrainableModel, TrainConfig, gather_trajectory_groups):
        setattr(art, obj.__name__, obj)
    local.LocalBackend = LocalBackend
    art.local = local
    return art, local


def test_art_loop_trains_on_gavel_rewards(gavel_url, monkeypatch):
    monkeypatch.setenv("GAVEL_URL", gavel_url)
    trained = []
    art, local = art_stub(trained)
    example = load("art_loop", monkeypatch, art=art, art__local=local)
    asyncio.run(example.main(steps=1, backend=local.LocalBackend()))
    assert len(trained) == len(example.SCENARIOS)
    for g in trained:
        assert len(g.trajectories) == example.GROUP_SIZE
        for t in g.trajectories:
            assert t.metrics["independent_reward"] == 0.0
            i = int(t.messages_and_choices[-1].message.content.split(":")[0])
            assert t.metrics["gavel_answer_line"] == (1.0 if i % 2 == 0 else 0.0)
            assert t.reward == pytest.approx((t.metrics["judge_score"] + t.metrics["gavel_answer_line"]) / 2)


GRPO_CONFIG_FIELDS = {
    "output_dir", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
    "max_prompt_length", "max_completion_length", "learning_rate", "logging_steps", "num_train_epochs",
    "max_steps", "beta", "temperature", "scale_rewards", "loss_type", "bf16", "report_to", "use_vllm",
}


def trl_stubs():
    trl = types.ModuleType("trl")
    datasets = types.ModuleType("datasets")

    class GRPOConfig:
        def __init__(self, **kwargs):
            unknown = set(kwargs) - GRPO_CONFIG_FIELDS
            assert not unknown, f"not GRPOConfig fields: {unknown}"
            self.__dict__.update(kwargs)

    class GRPOTrainer:
        def __init__(self, model, reward_funcs, args=None, train_dataset=None, **rest):
            assert set(rest) <= {"eval_dataset", "processing_class", "peft_config", "callbacks"}
            assert isinstance(args, GRPOConfig)
            self.model, self.reward_funcs, self.args, self.train_dataset = model, reward_funcs, args, train_dataset

    def load_dataset(*args, **kwargs):
        raise AssertionError("the test passes its own dataset")

    trl.GRPOConfig, trl.GRPOTrainer, datasets.load_dataset = GRPOConfig, GRPOTrainer, load_dataset
    return trl, datasets


def test_trl_example_builds_a_trainer_whose_reward_function_scores_groups(gavel_url, monkeypatch, tag):
    monkeypatch.setenv("GAVEL_URL", gavel_url)
    trl, datasets = trl_stubs()
    example = load("trl_grpo", monkeypatch, trl=trl, datasets=datasets)
    row = example.to_example({"question": f"[{tag}] Natalia sold 48 clips, then half as many. Total?", "answer": "48/2 = 24\n#### 1,072"})
    assert row["answer"] == "1072" and row["prompt"][-1]["role"] == "user"
    trainer = example.build_trainer(dataset=[row])
    assert trainer.args.num_generations == trainer.args.per_device_train_batch_size
    (f,) = trainer.reward_funcs
    assert f.__name__ == "gavel"
    # As GRPOTrainer calls it: conversational prompts repeated num_generations times.
    completions = [[{"role": "assistant", "content": f"SCORE=0.{i + 1}\nANSWER: {1072 if i < 2 else 1000}"}] for i in range(4)]
    out = f(prompts=[row["prompt"]] * 4, completions=completions, answer=[row["answer"]] * 4, completion_ids=[[0]] * 4)
    assert out == pytest.approx([(0.1 + 1) / 2, (0.2 + 1) / 2, 0.3 / 2, 0.4 / 2])
