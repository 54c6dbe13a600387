"""What generated requests talk about: people, emails, events, tasks and customers of the
WorkBench world, plus the words for dates, times and durations resolved against its "now".

Everything is read from the world's starting tables, so an id or address in a
generated task is real and its expected call replays. Phrase helpers return
(words for the request, canonical value for the call), the pair a template needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache
from random import Random
from typing import Any, Mapping, Sequence

TODAY = date(2023, 11, 30)  # WorkBench's now: Thursday 2023-11-30 00:00:00
NOW_TEXT = "2023-11-30 00:00:00"
LAST_DATA_DAY = date(2023, 11, 29)  # analytics ranges "up to now" end here
FIRST_DATA_DAY = date(2023, 9, 1)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
LISTS = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
DURATION_WORDS = {
    "30": ("30-minute", "half-hour", "thirty-minute"),
    "60": ("one-hour", "60-minute", "hour-long"),
    "90": ("90-minute", "hour-and-a-half", "1.5-hour"),
    "120": ("two-hour", "2-hour", "120-minute"),
}
METRICS = {
    "total_visits": ("total visits", "the number of visits", "visit counts"),
    "session_duration_seconds": ("average session duration", "session length", "time on site per session"),
    "user_engaged": ("engaged users", "user engagement", "the engaged-user count"),
    "visits_direct": ("direct traffic", "visits from direct traffic"),
    "visits_referral": ("referral traffic", "visits from referrals"),
    "visits_search_engine": ("search engine traffic", "visits from search engines"),
    "visits_social_media": ("social media traffic", "visits from social media"),
}
PLOT_WORDS = {
    "bar": ("bar chart", "bar graph"),
    "line": ("line chart", "line graph"),
    "scatter": ("scatter plot", "scatter chart"),
    "histogram": ("histogram",),
}


@dataclass(frozen=True)
class Entities:
    """Read-only rows of the world's starting state, grouped for sampling."""

    addresses: tuple[str, ...]
    emails: tuple[Mapping[str, Any], ...]
    events: tuple[Mapping[str, Any], ...]
    tasks: tuple[Mapping[str, Any], ...]
    customers: tuple[Mapping[str, Any], ...]

    @property
    def assignees(self) -> tuple[str, ...]:
        """Project-task assignees: the only addresses create_task and update_task accept."""
        return tuple(sorted({row["assigned_to_email"] for row in self.tasks}))

    @property
    def account_owners(self) -> tuple[str, ...]:
        return tuple(sorted({row["assigned_to_email"] for row in self.customers}))

    def emails_from(self, address: str) -> list[Mapping[str, Any]]:
        """Emails from one sender, newest first (WorkBench's search order)."""
        rows = [r for r in self.emails if r["sender/recipient"] == address]
        return sorted(rows, key=lambda r: r["sent_datetime"], reverse=True)

    def events_with(self, address: str, after: str = NOW_TEXT) -> list[Mapping[str, Any]]:
        """Events with one participant starting after `after`, earliest first."""
        rows = [r for r in self.events if r["participant_email"] == address and r["event_start"] > after]
        return sorted(rows, key=lambda r: r["event_start"])

    def events_on(self, day: date) -> list[Mapping[str, Any]]:
        rows = [r for r in self.events if r["event_start"].startswith(day.isoformat())]
        return sorted(rows, key=lambda r: r["event_start"])

    def tasks_of(self, address: str) -> list[Mapping[str, Any]]:
        return [r for r in self.tasks if r["assigned_to_email"] == address]


@lru_cache(maxsize=1)
def load_entities() -> Entities:
    from appliance.world import base_tables, directory

    tables = base_tables()
    return Entities(
        addresses=tuple(directory()),
        emails=tuple(tables["emails"]),
        events=tuple(tables["calendar_events"]),
        tasks=tuple(tables["project_tasks"]),
        customers=tuple(tables["crm"]),
    )


def first_name(address: str) -> str:
    return address.split(".", 1)[0].split("@", 1)[0]


def full_name(address: str) -> str:
    return " ".join(part.capitalize() for part in address.split("@", 1)[0].split("."))


# --- dates, times, durations: (words, canonical value) ---------------------


def future_day(rng: Random, lo: int = 1, hi: int = 30) -> date:
    """A day after today; one in four falls in the coming week, where relative words apply."""
    if rng.random() < 0.25:
        return TODAY + timedelta(days=rng.randint(lo, min(hi, lo + 6)))
    return TODAY + timedelta(days=rng.randint(lo, hi))


def day_words(rng: Random, day: date, relative: bool = True) -> str:
    """Words for a future day: absolute in several styles, or relative to Thursday 2023-11-30."""
    offset = (day - TODAY).days
    styles = [
        f"{MONTHS[day.month - 1]} {day.day}",
        f"{day.day} {MONTHS[day.month - 1]}",
        day.isoformat(),
        f"{WEEKDAYS[day.weekday()]}, {MONTHS[day.month - 1]} {day.day}",
    ]
    if relative and offset == 1:
        styles += ["tomorrow", "tomorrow"]
    if relative and 1 <= offset <= 6:
        styles.append(f"this {WEEKDAYS[day.weekday()]}")
    if relative and 2 <= offset <= 9:
        styles.append(f"in {offset} days")
    return rng.choice(styles)


def time_slot(rng: Random, duration: str) -> tuple[str, str]:
    """A start time inside 9am-6pm that leaves room for `duration` minutes."""
    latest = 18 * 60 - int(duration)
    minutes = rng.randrange(9 * 60, latest + 1, 30)
    hour, minute = divmod(minutes, 60)
    twelve = hour - 12 if hour > 12 else hour
    suffix = "pm" if hour >= 12 else "am"
    words = rng.choice([
        f"{twelve}{suffix}" if minute == 0 else f"{twelve}:{minute:02d}{suffix}",
        f"{hour:02d}:{minute:02d}",
        f"{twelve}:{minute:02d} {suffix}",
    ])
    return words, f"{hour:02d}:{minute:02d}:00"


def duration_words(rng: Random, unlike: str | None = None) -> tuple[str, str]:
    """Words for a meeting length and its minutes; never `unlike` (the next length instead, with no extra draw, and
    every length has as many words, so the seeded stream goes on as before)."""
    minutes = other_than(rng.choice(tuple(DURATION_WORDS)), tuple(DURATION_WORDS), unlike)
    return rng.choice(DURATION_WORDS[minutes]), minutes


def other_than(value: Any, options: Sequence[Any], current: Any) -> Any:
    """`value`, or the option after it when a record already holds it: an update request must change something
    (the state cannot judge a call that changes nothing). No extra draw, so the rest of a seeded stream is kept."""
    if value != current:
        return value
    return options[(list(options).index(value) + 1) % len(options)]


def later_than(day: date, current: str | None) -> date:
    """`day`, or the day after it when a record already holds it (as `other_than`, for dates; a moved day can
    change how many ways `day_words` has to say it, and so the draws after it: regenerate and compare)."""
    return day + timedelta(days=1) if day.isoformat() == current else day


def past_day(rng: Random, lo: date = FIRST_DATA_DAY, hi: date = LAST_DATA_DAY) -> date:
    return lo + timedelta(days=rng.randint(0, (hi - lo).days))


def date_words(rng: Random, day: date) -> str:
    return rng.choice([f"{MONTHS[day.month - 1]} {day.day}", day.isoformat(), f"{day.day} {MONTHS[day.month - 1]}"])
