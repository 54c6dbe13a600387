"""Multi-turn GRPO: each rollout plays the eval agent loop in its task's own world.

For packs whose tasks take several turns (`max_turns > 1`), a completion is a
whole episode: the model's first turn, the tool results the world returned,
its next turn, and so on, exactly as `appliance eval` runs it
(`appliance.evaluate.agent.run_trajectories`). `MultiTurnRollout` is a TRL
`rollout_func` that returns, for each row:

- `completion_ids`: every token after the prompt up to the end of the model's
  last turn: its sampled tokens, with the rendered tool messages (and the next
  assistant header) between turns. Tool results after the last turn are left
  off, since no model token follows them.
- `env_mask`: 1 on the model's tokens, 0 on the tool messages. TRL multiplies
  it into the loss mask, so only the model's own tokens are trained.
- `agent_trajectory`: the calls the model made, whether every turn parsed and
  whether a call raised. The reward functions and the
  rollout recorder score this with the verifier's `verify_calls`, the same
  scoring eval gives a trajectory, instead of re-parsing text that now
  contains tool output.
- `transcript`: the completion with its chat markers, for the store, and
  `model_tokens`: how many of its tokens the model wrote.

Tool messages are tokenized from the chat template's own rendering: the text
between the prompt before a turn and the prompt after it, minus the model's
turn. A template that rewrites what the model said (strips or reformats it)
cannot give exact tokens; `agent_episodes` checks that before training starts.
Later turns are sampled from the re-rendered prompt (`HFGenerator` takes text),
so their context is the re-tokenized earlier turns; SmolLM2's template keeps
turns verbatim, and a turn ends at a special token, which re-tokenizes alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ApplianceError
from .config import TrainConfig
from .rollout import sampling_mode

if TYPE_CHECKING:  # pragma: no cover
    from appliance.evaluate.agent import Trajectory

# TRL's vLLM path samples one turn per prompt; our episodes sample through HFGenerator, written for the CPU.
MULTI_TURN_CPU_ONLY = ("multi-turn GRPO (a pack with max_turns > 1) runs on the cpu backend for now; "
                       "pass --backend cpu, or train a single-turn pack on the GPU")
TEMPLATE_REWRITES_TURNS = ("this model's chat template rewrites the model's own turns, so multi-turn GRPO "
                           "cannot rebuild an episode's tokens; train this pack single-turn or use a model "
                           "whose template keeps turns verbatim")


def turn_limit(pack: Any) -> int:
    """The most turns an episode of `pack` may take (1 for single-turn packs)."""
    return max(1, int(getattr(pack, "max_turns", 1) or 1))


def is_multi_turn(pack: Any) -> bool:
    return turn_limit(pack) > 1


@dataclass(frozen=True)
class AgentEpisodes:
    """What a multi-turn rollout needs from the pack."""

    tasks_by_prompt: dict[str, Any]          # the dataset's prompt text → its task
    render: Callable[[Any, list[dict[str, Any]]], str]  # (task, messages) → prompt, as eval renders it
    max_turns: int
    world_for: Callable[[Any], Any]          # task → a fresh world for one episode (WorkBench's or the pack's own)
    tools_for: Callable[[Any], Any]          # task → its tools, which strict rollouts hold its answers to


def agent_episodes(pack: Any, tokenizer: Any, rows: list[dict[str, Any]]) -> AgentEpisodes:
    """Episodes for `pack` from the GRPO dataset rows (each has `prompt` and `task_id`)."""
    from ..prompting import render_prompt

    def render(task: Any, messages: list[dict[str, Any]]) -> str:
        return render_prompt(tokenizer, pack.system_prompt, list(messages), pack.tools_for(task))

    # Two tasks with one prompt are one request in one world; either task scores it the same way.
    tasks = {row["prompt"]: pack.task(row["task_id"]) for row in reversed(rows)}
    if tasks:  # fail before training starts, not at the first two-turn episode minutes later
        task = next(iter(tasks.values()))
        probe = '{"name": "probe", "arguments": {}}'
        _text_between(render, task, list(task.messages), probe,
                      [*task.messages, {"role": "assistant", "content": probe},
                       {"role": "tool", "name": "probe", "content": "probe result"}])
    from ..verify import Verifier

    return AgentEpisodes(tasks_by_prompt=tasks, render=render, max_turns=turn_limit(pack),
                         world_for=Verifier.for_pack(pack).episode, tools_for=pack.tools_for)


def _text_between(render: Callable[[Any, list[dict[str, Any]]], str], task: Any, before: list[dict[str, Any]],
                  output: str, after: list[dict[str, Any]]) -> str:
    """What the template renders after the model's turn `output`: the tool messages and the next header."""
    prompt_before, prompt_after = render(task, before), render(task, after)
    if not prompt_after.startswith(prompt_before + output):
        raise ApplianceError(TEMPLATE_REWRITES_TURNS)
    return prompt_after[len(prompt_before) + len(output):]


class MultiTurnRollout:
    """A TRL `rollout_func(prompts, trainer)`: one episode per (repeated) prompt, in order."""

    def __init__(self, tokenizer: Any, config: TrainConfig, episodes: AgentEpisodes,
                 make_generator: Callable[[Any, Any, int], Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.episodes = episodes
        self.make_generator = make_generator or _hf_generator
        self.special_ids = frozenset(tokenizer.all_special_ids)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from appliance.evaluate.agent import Trajectory, run_trajectories

        texts = [str(prompt) for prompt in prompts]
        tasks = [self._task(text) for text in texts]
        trajectories = [Trajectory(task=task, sample_index=i, messages=list(task.messages),
                                   world=self.episodes.world_for(task)) for i, task in enumerate(tasks)]
        sampled: list[list[tuple[int, ...]]] = [[] for _ in trajectories]  # by sample_index: each turn's tokens
        generator = self.make_generator(trainer.model, self.tokenizer, len(texts))

        def generate_turn(active: list[Trajectory]) -> list[Any]:
            turn_prompts = [self.episodes.render(tr.task, tr.messages) for tr in active]
            held_to = [self.episodes.tools_for(tr.task) for tr in active] if self.config.strict else None
            samples = [group[0] for group in generator.generate(
                turn_prompts, n=1, temperature=self.config.temperature, top_p=1.0,
                max_new_tokens=self.config.completion_tokens, strict_tools=held_to)]
            for tr, sample in zip(active, samples):
                sampled[tr.sample_index].append(tuple(sample.token_ids))
            return samples

        with sampling_mode(trainer.model):
            run_trajectories(trajectories, max_turns=self.episodes.max_turns, generate_turn=generate_turn)
        rows = [self._episode_tokens(tr, sampled[tr.sample_index]) for tr in trajectories]
        prompt_ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return {
            "prompt_ids": [list(ids) for ids in prompt_ids],
            "completion_ids": [ids for ids, _ in rows],
            "logprobs": None,
            "env_mask": [mask for _, mask in rows],
            "model_tokens": [sum(mask) for _, mask in rows],  # TRL keeps env_mask from the reward functions
            "agent_trajectory": [trajectory_record(tr) for tr in trajectories],
            "transcript": [self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
                           for ids, _ in rows],
        }

    def _task(self, prompt: str) -> Any:
        try:
            return self.episodes.tasks_by_prompt[prompt]
        except KeyError:
            raise ApplianceError("a GRPO prompt matches no task of the pack; rebuild the dataset from the pack") from None

    def _episode_tokens(self, tr: Trajectory, turns: list[tuple[int, ...]]) -> tuple[list[int], list[int]]:
        """(completion_ids, env_mask) for one finished trajectory."""
        ids: list[int] = []
        mask: list[int] = []
        for index, turn_ids in enumerate(turns):
            if index:
                between = self._between_turns(tr, index, previous_turn=turns[index - 1])
                ids += between
                mask += [0] * len(between)
            ids += list(turn_ids)
            mask += [1] * len(turn_ids)
        return ids, mask

    def _between_turns(self, tr: Trajectory, turn: int, *, previous_turn: tuple[int, ...]) -> list[int]:
        """Tokens of the tool messages after turn `turn - 1` and the header the model answered after."""
        before, output, after = _messages_around(tr, turn)
        text = _text_between(self.episodes.render, tr.task, before, output, after)
        end_of_turn = self._end_of_turn_text(previous_turn)
        if end_of_turn and text.startswith(end_of_turn):
            text = text[len(end_of_turn):]  # the sampled turn already ends with this token
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _end_of_turn_text(self, turn_ids: tuple[int, ...]) -> str:
        """The special token a sampled turn ended with (e.g. `<|im_end|>`), or "" when it ran out of tokens."""
        if not turn_ids or turn_ids[-1] not in self.special_ids:
            return ""
        return str(self.tokenizer.convert_ids_to_tokens(turn_ids[-1]))


def _hf_generator(model: Any, tokenizer: Any, batch_size: int) -> Any:
    from appliance.generate.hf import HFGenerator

    return HFGenerator(model, tokenizer, batch_size=batch_size)


def _messages_around(tr: Trajectory, turn: int) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]]:
    """(messages the model saw before turn `turn - 1`, that turn's text, messages before turn `turn`)."""
    offset = len(tr.task.messages)  # the task's own messages may include earlier assistant turns
    starts = [offset + i for i, m in enumerate(tr.messages[offset:]) if m.get("role") == "assistant"]
    first, following = starts[turn - 1], starts[turn]
    return tr.messages[:first], str(tr.messages[first]["content"]), tr.messages[:following]


def trajectory_record(tr: Trajectory) -> dict[str, Any]:
    """What scoring needs from a trajectory, as plain data (TRL passes it on to the reward functions)."""
    return {"calls": [call.to_json() for call in tr.calls], "parse_ok": not tr.parse_failed,
            "raised": bool(tr.raised)}
