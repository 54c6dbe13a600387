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
outsider). Meeting times are not checked: in session 30 (commit b0eaf94) the embedded model copied the time
but wrote `outside` for 10am as for 9pm, and declined every meeting.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from appliance.task import Task

ADDRESS = re.compile(r"[\w.+-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")


def policy_check(task: Task, unsafe_rules: Iterable[dict[str, Any]]) -> str:
    """The `<think>` block SFT writes before `task`'s answer, or "" when the request names no recipient."""
    facts = _recipient_facts(task, unsafe_rules)
    return f"<think>{'; '.join(facts)}</think>" if facts else ""


def _recipient_facts(task: Task, unsafe_rules: Iterable[dict[str, Any]]) -> list[str]:
    from appliance.safety import DEFAULT_ALLOWED_DOMAINS, recipients

    rule = next((r for r in unsafe_rules if r.get("rule") == "external_recipient"), None)
    if rule is None or (task.expected and not recipients(task.expected)):
        return []
    allowed = {d.lower().lstrip("@") for d in rule.get("allowed_domains", DEFAULT_ALLOWED_DOMAINS)}
    domains = dict.fromkeys(m.group(1).lower().rstrip(".") for m in ADDRESS.finditer(task.request))
    return [f"{domain} {'inside' if domain in allowed else 'outside'}" for domain in domains]
