"""Calendar tools (table `calendar_events`): get, search, create, delete, update.

Quirks kept from WorkBench:
* create_event stores every value as given (no format, hours or overlap checks),
  lower-cases the participant, and appends with pandas `concat` without
  `ignore_index`, so the new row's label is 0.
* update_event does not validate `field`: an unknown field adds a column to the
  whole table (a scored state change) and still reports success.
* search_events bounds both `time_min` and `time_max` on the event *start*.
"""
from __future__ import annotations

from appliance.world.matching import ErrorText, parse_timestamp, regex_filter
from appliance.world.tools.registry import text, tool

EVENT_FIELDS = ("event_id", "event_name", "participant_email", "event_start", "duration")
SEARCH_LIMIT = 5


@tool(
    "calendar",
    "get_event_information_by_id",
    description=(
        "Get one field of a calendar event by its ID. Returns {field: value}. "
        "Fields: event_id, event_name, participant_email, event_start, duration (minutes)."
    ),
    properties={
        "event_id": text("The event's 8-digit ID, e.g. 00000013."),
        "field": text("The field to return.", EVENT_FIELDS),
    },
    required=("event_id", "field"),
)
def get_event_information_by_id(w, event_id=None, field=None):
    if not event_id:
        return ErrorText("Event ID not provided.")
    if not field:
        return ErrorText("Field not provided.")
    positions = w.calendar_events.positions_of(event_id)
    if not positions:
        return ErrorText("Event not found.")
    record = w.calendar_events.record(positions[0])
    if field not in record:
        return ErrorText("Field not found.")
    return {field: record[field]}


@tool(
    "calendar",
    "search_events",
    description=(
        "Search calendar events. The query is matched case-insensitively (as a regular expression) "
        "against the event name or participant email. time_min and time_max bound the event start "
        "(inclusive, YYYY-MM-DD HH:MM:SS). Returns at most the 5 earliest matching events."
    ),
    properties={
        "query": text("Text to find in the event name or participant email; empty matches all."),
        "time_min": text("Earliest event start to include, YYYY-MM-DD HH:MM:SS."),
        "time_max": text("Latest event start to include, YYYY-MM-DD HH:MM:SS."),
    },
)
def search_events(w, query="", time_min=None, time_max=None):
    table = w.calendar_events
    by_name = regex_filter(query, table.column_values("event_name"))
    by_participant = regex_filter(query, table.column_values("participant_email"))
    events = table.records(i for i, (a, b) in enumerate(zip(by_name, by_participant)) if a or b)
    if time_min:
        events = [e for e in events if parse_timestamp(e["event_start"]) >= parse_timestamp(time_min)]
    if time_max:
        events = [e for e in events if parse_timestamp(e["event_start"]) <= parse_timestamp(time_max)]
    return events[:SEARCH_LIMIT] if events else "No events found."


@tool(
    "calendar",
    "create_event",
    description=(
        "Create a calendar event with one participant. Returns the new event's ID. "
        "Values are stored exactly as given, so use event_start as YYYY-MM-DD HH:MM:SS and "
        "duration as whole minutes (e.g. 30, 60)."
    ),
    properties={
        "event_name": text("The event's name."),
        "participant_email": text("The participant's email address."),
        "event_start": text("Start date-time, YYYY-MM-DD HH:MM:SS."),
        "duration": text("Length in minutes, e.g. 30."),
    },
    required=("event_name", "participant_email", "event_start", "duration"),
    changes_state=True,
)
def create_event(w, event_name=None, participant_email=None, event_start=None, duration=None):
    if not event_name:
        return ErrorText("Event name not provided.")
    if not participant_email:
        return ErrorText("Participant email not provided.")
    if not event_start:
        return ErrorText("Event start not provided.")
    if not duration:
        return ErrorText("Event duration not provided.")
    table = w.calendar_events
    event_id = str(int(table.max_id()) + 1).zfill(8)
    row = {
        "event_id": event_id,
        "event_name": event_name,
        "participant_email": participant_email.lower(),
        "event_start": event_start,
        "duration": duration,
    }
    w.calendar_events = table.append_concat(row, ignore_index=False)
    return event_id


@tool(
    "calendar",
    "delete_event",
    description="Delete a calendar event by its ID.",
    properties={"event_id": text("The event's 8-digit ID.")},
    required=("event_id",),
    changes_state=True,
)
def delete_event(w, event_id=None):
    if not event_id:
        return ErrorText("Event ID not provided.")
    if not w.calendar_events.has_id(event_id):
        return ErrorText("Event not found.")
    w.calendar_events = w.calendar_events.without_id(event_id)
    return "Event deleted successfully."


@tool(
    "calendar",
    "update_event",
    description=(
        "Change one field of a calendar event. Fields: event_name, participant_email, "
        "event_start (YYYY-MM-DD HH:MM:SS), duration (minutes). The value is stored as given."
    ),
    properties={
        "event_id": text("The event's 8-digit ID."),
        "field": text("The field to change: event_name, participant_email, event_start or duration."),
        "new_value": text("The new value."),
    },
    required=("event_id", "field", "new_value"),
    changes_state=True,
)
def update_event(w, event_id=None, field=None, new_value=None):
    if not event_id or not field or not new_value:
        return ErrorText("Event ID, field, or new value not provided.")
    table = w.calendar_events
    positions = table.positions_of(event_id)
    if not positions:
        return ErrorText("Event not found.")
    if field == "participant_email":
        new_value = new_value.lower()
    w.calendar_events = table.updated(positions, field, new_value)
    return "Event updated successfully."

