"""Policy checks: the facts a policy rule reads, stated in a `<think>` block before the answer SFT teaches.

Why (docs/learning.md, session 30): the embedded model decides act-or-decline by the kind of request, not by
the detail a rule reads. After SFT it declined every meeting request, allowed or not, and carried out every
forward, to atlas.com or to gmail.com, on its own training tasks as on held-out ones. With `--policy-checks`
SFT's target for a request that names a recipient or a meeting time first copies that detail and says what
the rule makes of it:

    <think>gmail.com outside</think>No action is needed.
    <think>atlas.com inside; 2pm inside</think>{"name": "calendar_create_event", ...}

so the decision follows a verdict a few tokens back instead of the whole request. The parser drops a leading
`<think>` block (appliance.parsing), so the answer is scored as any other.

What is checked, and only where the pack declares the rule:
* a recipient domain, for the `external_recipient` rule: every address in a request whose expected calls send
  to someone (appliance.safety's recipients) or that expects no call (a refusal names the outsider);
* a meeting's start time, in packs of the WorkBench world (its system prompt: meetings between 9am and 6pm):
  every clock time in a calendar request.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from appliance.task import Task

ADDRESS = re.compile(r"[\w.+-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")
# 9pm, 9:30am, 9:30 pm (12-hour) or 21:00 (24-hour); ids and ISO dates have no colon or am/pm.
CLOCK = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s?([ap]m)\b|\b(\d{2}):(\d{2})\b", re.IGNORECASE)
# WorkBench's meeting hours (its system prompt: "Meetings may not start before 9am or finish after 6pm").
WORKBENCH_HOURS = (9 * 60, 18 * 60)


def policy_check(task: Task, unsafe_rules: Iterable[dict[str, Any]], world: str) -> str:
    """The `<think>` block SFT writes before `task`'s answer, or "" when no rule's detail is in the request."""
    facts = [*_recipient_facts(task, unsafe_rules), *_meeting_time_facts(task, world)]
    return f"<think>{'; '.join(facts)}</think>" if facts else ""


def _recipient_facts(task: Task, unsafe_rules: Iterable[dict[str, Any]]) -> list[str]:
    from appliance.safety import DEFAULT_ALLOWED_DOMAINS, recipients

    rule = next((r for r in unsafe_rules if r.get("rule") == "external_recipient"), None)
    if rule is None or (task.expected and not recipients(task.expected)):
        return []
    allowed = {d.lower().lstrip("@") for d in rule.get("allowed_domains", DEFAULT_ALLOWED_DOMAINS)}
    domains = dict.fromkeys(m.group(1).lower().rstrip(".") for m in ADDRESS.finditer(task.request))
    return [f"{domain} {'inside' if domain in allowed else 'outside'}" for domain in domains]


def _meeting_time_facts(task: Task, world: str) -> list[str]:
    if world != "workbench" or task.tags.get("domain") != "calendar":
        return []
    start, end = WORKBENCH_HOURS
    facts = []
    for match in CLOCK.finditer(task.request):
        minutes = _minutes(match)
        if minutes is not None:
            facts.append(f"{match.group(0)} {'inside' if start <= minutes < end else 'outside'}")
    return facts


def _minutes(match: re.Match[str]) -> int | None:
    hour_12, minute_12, half, hour_24, minute_24 = match.groups()
    if hour_24 is not None:
        hour, minute = int(hour_24), int(minute_24)
    else:
        hour, minute = int(hour_12) % 12 + (12 if half.lower() == "pm" else 0), int(minute_12 or 0)
    return hour * 60 + minute if hour < 24 and minute < 60 else None
