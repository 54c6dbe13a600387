"""What GRPO's loss trains of each sample, set on the batch TRL scores before its loss.

Each function takes TRL's output dict of `_generate_and_score_completions` (rows of a group contiguous, before
TRL shuffles the batch; all but `drop_zero_variance_groups` read one process's batch as the whole) and changes
the advantages or TRL's loss-only `tool_mask`, a per-token factor the loss multiplies in (attention is
untouched). The loss's normaliser, `num_items_in_batch`, is reset only where a function says so; otherwise the
tokens a mask leaves out still count in it, so the step is the full gradient less what was left out.
`ApplianceGRPOMixin` (callbacks.py) calls them, each for its TrainConfig field.
"""
from __future__ import annotations

from typing import Any, Callable

from .copies import copied_tokens


def _loss_mask(output: dict[str, Any]) -> Any:
    """A copy of TRL's loss-only mask to change, all ones where TRL set none (the completion mask's shape)."""
    import torch

    loss_mask = output.get("tool_mask")
    return torch.ones_like(output["completion_mask"]) if loss_mask is None else loss_mask.clone()


def _completions(output: dict[str, Any]) -> list[list[int]]:
    """Each row's completion tokens, padding left off."""
    lengths = output["completion_mask"].sum(dim=1).tolist()
    return [row[:int(n)].tolist() for row, n in zip(output["completion_ids"], lengths)]


def drop_zero_variance_groups(output: dict[str, Any], group_size: int, gather: Callable = lambda t: t, *,
                              process_index: int = 0) -> float:
    """Mask groups whose advantages are all zero out of the loss and its normaliser; return the fraction dropped.

    Uses TRL's `tool_mask` (a loss-only mask) so attention is untouched. Rows of
    a group are contiguous before TRL shuffles the batch, which is where this runs.
    With several processes each holds its slice of the gathered batch (TRL's
    `process_slice`), and a group may span two slices, so groups are judged on
    the gathered advantages and each process keeps its own rows of the verdict.
    """
    import torch

    local = output["advantages"]
    everyone = gather(local)
    informative = everyone.view(-1, group_size).abs().amax(dim=1) > 1e-6
    start = process_index * local.numel()
    keep_rows = informative.repeat_interleave(group_size)[start:start + local.numel()]
    keep_rows = keep_rows.to(output["completion_mask"].dtype)
    output["tool_mask"] = _loss_mask(output) * keep_rows.unsqueeze(1)
    output["num_items_in_batch"] = gather((output["completion_mask"] * output["tool_mask"]).sum()).sum()
    return 1.0 - informative.float().mean().item()


def negatives_at_divergence(output: dict[str, Any], group_size: int) -> float:
    """Push a below-mean sample down only where it departs from its group's above-mean samples; return the share
    of below-mean samples' tokens left in the loss (TrainConfig.negatives_at_divergence).

    Session 40 measured the whole negative half cutting and miscopying arguments (docs/learning.md, H58 against
    H59): a failed sample's tokens are pushed down with it, its right copies of the request included. Here a
    below-mean sample keeps one token in the loss, the first where it differs from the above-mean sample of its
    group that it follows longest (the token its mistake starts with); a group with no above-mean sample gives
    no negative signal. Above-mean samples train as before, and the loss's normaliser is unchanged. Rows of a
    group are contiguous here, before TRL shuffles the batch (one process).
    """
    import torch
    from trl.data_utils import common_prefix_length

    advantages, completion_mask = output["advantages"], output["completion_mask"]
    loss_mask, tokens = _loss_mask(output), _completions(output)
    negative_tokens = kept = 0
    for start in range(0, advantages.numel(), group_size):
        rows = range(start, start + group_size)
        above = [r for r in rows if advantages[r] > 0]
        for r in (r for r in rows if advantages[r] < 0):
            negative_tokens += int((completion_mask[r] * loss_mask[r]).sum())
            keep = torch.zeros_like(loss_mask[r])
            if above:
                at = max(common_prefix_length(tokens[r], tokens[a]) for a in above)
                if at < len(tokens[r]):
                    keep[at] = 1
            loss_mask[r] = loss_mask[r] * keep
            kept += int((completion_mask[r] * loss_mask[r]).sum())
    output["tool_mask"] = loss_mask
    return kept / negative_tokens if negative_tokens else 0.0


def negatives_without_copies(output: dict[str, Any], decode: Callable[[list[int]], str],
                             requests: list[str]) -> float:
    """Take the tokens a below-mean sample copies from its request out of GRPO's loss; return the share of
    below-mean samples' tokens left in it. `requests[i]` is row i's request; the loss's normaliser is unchanged.
    """
    import torch

    advantages, completion_mask = output["advantages"], output["completion_mask"]
    loss_mask, tokens = _loss_mask(output), _completions(output)
    negative_tokens = kept = 0
    for row in (r for r in range(advantages.numel()) if advantages[r] < 0):
        negative_tokens += int((completion_mask[row] * loss_mask[row]).sum())
        copies = torch.tensor(copied_tokens(decode, tokens[row], requests[row]), dtype=torch.bool)
        loss_mask[row, :len(tokens[row])][copies] = 0
        kept += int((completion_mask[row] * loss_mask[row]).sum())
    output["tool_mask"] = loss_mask
    return kept / negative_tokens if negative_tokens else 0.0


def leave_decisions_out(output: dict[str, Any], declined_rows: list[bool], rewards: list[float], group_size: int,
                        scale_rewards: str) -> float:
    """Take the act-or-decline choice out of GRPO's loss (TrainConfig.keep_decisions); return the share of declines.

    Session 23 measured GRPO moving one choice all requests share: the expected answer became less likely on
    every task that needs no call, those it trained on included, and more likely on nearly every task that
    needs one (docs/learning.md). Here that choice is not trained at all:
    a decline's tokens and every answer's first token (`{"` of a call against `No` of a decline, the token
    where they part) leave the loss through TRL's loss-only `tool_mask`, and each group's advantages are
    recomputed among its attempted calls only (centred on their mean, divided as `scale_rewards` says, as TRL
    does), so a wrong call is never rewarded for beating a decline. A group with fewer than two attempted
    calls teaches nothing. Rows of a group are contiguous here, before TRL shuffles the batch (one process).
    The loss's normaliser is reset to the tokens left in, as the zero-variance filter does.
    """
    import torch

    advantages = output["advantages"]
    reward = torch.nan_to_num(torch.tensor(rewards, dtype=torch.float32)).view(-1, group_size)
    acts = ~torch.tensor(declined_rows, dtype=torch.bool).view(-1, group_size)
    n_acts = acts.sum(dim=1, keepdim=True)
    centred = (reward - (reward * acts).sum(dim=1, keepdim=True) / n_acts.clamp(min=1)) * acts
    if scale_rewards == "group":  # TRL: the unbiased std of the group (here: of its calls) + 1e-4
        centred = centred / ((centred.square().sum(dim=1, keepdim=True) / (n_acts - 1).clamp(min=1)).sqrt() + 1e-4)
    elif scale_rewards == "batch":
        called = reward[acts]
        centred = centred / ((called.std() if called.numel() > 1 else torch.tensor(0.0)) + 1e-4)
    centred = torch.where(n_acts >= 2, centred, torch.zeros_like(centred))
    output["advantages"] = centred.reshape(-1).to(advantages.dtype).to(advantages.device)
    completion_mask = output["completion_mask"]
    loss_mask = _loss_mask(output)
    loss_mask = loss_mask * acts.reshape(-1, 1).to(loss_mask.device, loss_mask.dtype)
    loss_mask[:, 0] = 0
    output["tool_mask"] = loss_mask
    output["num_items_in_batch"] = (completion_mask * loss_mask).sum()
    return float((~acts).float().mean())


def shared_prefixes_once(output: dict[str, Any]) -> float:
    """Weight each token of an above-mean sample by 1/k, k the above-mean samples of the step whose completions
    share it and everything before it; return the mean weight over those still in the loss
    (TrainConfig.shared_prefixes_once).

    Session 40 measured GRPO's positive half collapsing onto what its reinforcements share once its step could
    move held-out answers (docs/learning.md, H60, H61): 11 of the 16 samples its first steps trained were one
    decline string, and with declines out of the loss every call became one call's opening. Here a string the
    step's above-mean samples share (a decline, `{"name": "`, a tool's name) is reinforced as much as one
    sample's, however many samples share it, while the tokens where a sample is its own (mostly its arguments)
    keep their full weight. Below-mean samples are left as they are; the loss's normaliser is unchanged.
    """
    advantages = output["advantages"]
    loss_mask = _loss_mask(output).float()
    above = [r for r in range(advantages.numel()) if advantages[r] > 0]
    tokens = {r: tuple(completion) for r, completion in enumerate(_completions(output)) if r in above}
    sharing: dict[tuple[int, ...], int] = {}
    for r in above:
        for end in range(1, len(tokens[r]) + 1):
            sharing[tokens[r][:end]] = sharing.get(tokens[r][:end], 0) + 1
    weights = []
    for r in above:
        for position in range(len(tokens[r])):
            if loss_mask[r, position] == 0:  # already out of the loss (keep_decisions' first token)
                continue
            weight = 1.0 / sharing[tokens[r][:position + 1]]
            loss_mask[r, position] = loss_mask[r, position] * weight
            weights.append(weight)
    output["tool_mask"] = loss_mask
    return sum(weights) / len(weights) if weights else 0.0
