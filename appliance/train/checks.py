"""Policy checks: the recipient domain a policy rule reads, stated in a `<think>` block before SFT's answer.

Why (docs/learning.md, session 30): the embedded model decides act-or-decline by the kind of request, not by
the detail a rule reads. After SFT it declined every meeting request, allowed or not, and carried out every
forward, to atlas.com or to gmail.com, on its own training tasks as on held-out ones. With `--policy-checks`
SFT's target for a request that names a recipient first copies the recipient's domain and says what the
`external_recipient` rule makes of it:

    <think>gmail.com outside</think>No action is needed.
    <think>atlas.com inside</think>{"name": "email_forward_email", ...}

so the decision follows a verdict a few tokens back instead of the whole request. The parser drops a leading
`<think>` block (appliance.parsing), so the answer is scored as any other.

A request is checked when the pack declares the `external_recipient` rule and the request names an address
that its expected calls send to (appliance.safety's recipients), or it expects no call (a refusal names the
outsider).

With `--time-checks` (packs of the WorkBench world), every clock time in a calendar request is stated too, in
24-hour form, with what the world's meeting hours make of its start:

    <think>atlas.com inside; 21:00 outside</think>No action is needed.

In session 30 (commit b0eaf94, H22) the check copied the time as the request wrote it (`10am`, `19:30`, `12:30
pm`) and the embedded model wrote `outside` for 10am as for 9pm. The 24-hour form is the one every calendar
call's `event_start` already takes, so the verdict reads two digits in a fixed place (session 45, H81).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from appliance.task import Task

ADDRESS = re.compile(r"[\w.+-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")
# 9pm, 9:30am, 9:30 pm (12-hour) or 21:00 (24-hour); ids and ISO dates have no colon or am/pm.
CLOCK = re.compile(r"\b(\d{1,2})(?::(\d{2}))?\s?([ap]m)\b|\b(\d{2}):(\d{2})\b", re.IGNORECASE)
# WorkBench's meeting hours, in minutes after midnight (its system prompt: "Meetings may not start before 9am or
# finish after 6pm"). The verdict reads the start only: no generated task starts inside and finishes outside.
WORKBENCH_MEETING_HOURS = (9 * 60, 18 * 60)


def meeting_hours(pack: Any) -> tuple[int, int] | None:
    """The meeting hours a time check judges against: WorkBench's for packs of its world, else None."""
    return WORKBENCH_MEETING_HOURS if pack.world == "workbench" else None


def policy_check(task: Task, unsafe_rules: Iterable[dict[str, Any]],
                 hours: tuple[int, int] | None = None) -> str:
    """The `<think>` block SFT writes before `task`'s answer, or "" when the request names no recipient (and,
    given `hours`, no clock time in a calendar request)."""
    facts = [*_recipient_facts(task, unsafe_rules), *(_meeting_time_facts(task, hours) if hours else ())]
    return f"<think>{'; '.join(facts)}</think>" if facts else ""


def _recipient_facts(task: Task, unsafe_rules: Iterable[dict[str, Any]]) -> list[str]:
    from appliance.safety import DEFAULT_ALLOWED_DOMAINS, recipients

    rule = next((r for r in unsafe_rules if r.get("rule") == "external_recipient"), None)
    if rule is None or (task.expected and not recipients(task.expected)):
        return []
    allowed = {d.lower().lstrip("@") for d in rule.get("allowed_domains", DEFAULT_ALLOWED_DOMAINS)}
    domains = dict.fromkeys(m.group(1).lower().rstrip(".") for m in ADDRESS.finditer(task.request))
    return [f"{domain} {'inside' if domain in allowed else 'outside'}" for domain in domains]


def _meeting_time_facts(task: Task, hours: tuple[int, int]) -> list[str]:
    if task.tags.get("domain") != "calendar":
        return []
    facts = []
    for match in CLOCK.finditer(task.request):
        minutes = clock_minutes(match)
        if minutes is not None:
            facts.append(f"{clock_text(minutes)} {time_verdict(minutes, hours)}")
    return facts


def time_verdict(minutes: int, hours: tuple[int, int]) -> str:
    """`inside` when a meeting may start `minutes` after midnight, else `outside`."""
    return "inside" if hours[0] <= minutes < hours[1] else "outside"


def clock_text(minutes: int) -> str:
    """`minutes` after midnight as HH:MM, the form of event_start's time."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def clock_minutes(match: re.Match[str]) -> int | None:
    """Minutes after midnight of a CLOCK match (9:30pm, 21:30), or None for an impossible time."""
    hour_12, minute_12, half, hour_24, minute_24 = match.groups()
    if hour_24 is not None:
        hour, minute = int(hour_24), int(minute_24)
    else:
        hour, minute = int(hour_12) % 12 + (12 if half.lower() == "pm" else 0), int(minute_12 or 0)
    return hour * 60 + minute if hour < 24 and minute < 60 else None
