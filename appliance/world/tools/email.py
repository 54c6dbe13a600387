"""Email tools (table `emails`): get, search, send, delete, forward, reply.

Quirks kept from WorkBench:
* A sent email gets an unpadded ID (text maximum + 1, so the first is "500"),
  `inbox/outbox` = "outbox", the lower-cased recipient, and `sent_datetime` =
  the fixed now stored as a date-time object (not text), so scoring ignores it.
* The new row is written at row label `len(table)` (pandas `df.loc[len(df)] = ...`).
  After a delete that label usually belongs to a remaining email, which is
  overwritten instead of a row being appended.
* search_emails sorts by `sent_datetime`; once a sent email (date-time object)
  and an original email (text) are both among the matches, the sort raises,
  as pandas does.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from appliance.world.matching import ErrorText, parse_timestamp
from appliance.world.tools.registry import text, tool

SENT_AT = datetime(2023, 11, 30, 0, 0, 0)  # WorkBench's fixed now, as a date-time object
EMAIL_FIELDS = ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body")
SEARCH_LIMIT = 5


@tool(
    "email",
    "get_email_information_by_id",
    description=(
        "Get one field of an email by its ID. Returns {field: value}. "
        "Fields: email_id, inbox/outbox, sender/recipient, subject, sent_datetime, body."
    ),
    properties={
        "email_id": text("The email's ID, exactly as listed, e.g. 00000373."),
        "field": text("The field to return.", EMAIL_FIELDS),
    },
    required=("email_id", "field"),
)
def get_email_information_by_id(w, email_id=None, field=None):
    if not email_id:
        return ErrorText("Email ID not provided.")
    if not field:
        return ErrorText("Field not provided.")
    positions = w.emails.positions_of(email_id)
    if not positions:
        return ErrorText("Email not found.")
    record = w.emails.record(positions[0])
    if field not in record:
        return ErrorText("Field not found.")
    return {field: record[field]}


def _row_matches(row: tuple, words: list[str]) -> bool:
    if not words:
        return True
    combined = f"{row[3]} {row[5]} {row[2]}".lower()  # subject, body, sender/recipient
    return all(word in combined for word in words)


@tool(
    "email",
    "search_emails",
    description=(
        "Search emails. Every word of the query must appear (case-insensitive) in the subject, body "
        "or sender/recipient. Results are newest first; at most 5 full emails are returned."
    ),
    properties={
        "query": text("Words to look for; empty matches every email."),
        "date_min": text("Earliest sent date to include, YYYY-MM-DD (inclusive)."),
        "date_max": text("Latest sent date to include, YYYY-MM-DD (inclusive)."),
    },
)
def search_emails(w, query="", date_min=None, date_max=None):
    words = query.lower().split()
    table = w.emails
    found = table.records(i for i, row in enumerate(table.rows) if _row_matches(row, words))
    found.sort(key=lambda r: r["sent_datetime"], reverse=True)
    if date_min:
        found = [r for r in found if parse_timestamp(r["sent_datetime"]).date() >= parse_timestamp(date_min).date()]
    if date_max:
        found = [r for r in found if parse_timestamp(r["sent_datetime"]).date() <= parse_timestamp(date_max).date()]
    return found[:SEARCH_LIMIT] if found else "No emails found."


def _send(w, recipient, subject, body) -> ErrorText | str:
    if not recipient or not subject or not body:
        return ErrorText("Recipient, subject, or body not provided.")
    if "@" not in recipient or "." not in recipient:
        return ErrorText("Invalid recipient email address.")
    table = w.emails
    new_id = str(int(table.max_id()) + 1)
    row = (new_id, "outbox", recipient.lower(), subject, SENT_AT, body)
    w.emails = table.set_row_at_label(len(table), row)
    return "Email sent successfully."


@tool(
    "email",
    "send_email",
    description="Send a new email. Returns a confirmation.",
    properties={
        "recipient": text("The recipient's email address."),
        "subject": text("The subject line."),
        "body": text("The message text."),
    },
    required=("recipient", "subject", "body"),
    changes_state=True,
)
def send_email(w, recipient=None, subject=None, body=None):
    return _send(w, recipient, subject, body)


@tool(
    "email",
    "delete_email",
    description="Delete an email by its ID.",
    properties={"email_id": text("The email's ID, e.g. 00000373.")},
    required=("email_id",),
    changes_state=True,
)
def delete_email(w, email_id=None):
    if not email_id:
        return ErrorText("Email ID not provided.")
    if not w.emails.has_id(email_id):
        return ErrorText("Email not found.")
    w.emails = w.emails.without_id(email_id)
    return "Email deleted successfully."


@tool(
    "email",
    "forward_email",
    description="Forward an email to a recipient. The forward's subject is 'FW: ' plus the original subject.",
    properties={
        "email_id": text("The ID of the email to forward."),
        "recipient": text("The recipient's email address."),
    },
    required=("email_id", "recipient"),
    changes_state=True,
)
def forward_email(w, email_id=None, recipient=None):
    if not email_id or not recipient:
        return ErrorText("Email ID or recipient not provided.")
    if not w.emails.has_id(email_id):
        return ErrorText("Email not found.")
    if "@" not in recipient or "." not in recipient:
        return ErrorText("Invalid recipient email address.")
    original = w.emails.record(w.emails.positions_of(email_id)[0])
    result = _send(w, recipient.lower(), f"FW: {original['subject']}", original["body"])
    return "Email forwarded successfully." if result == "Email sent successfully." else result


@tool(
    "email",
    "reply_email",
    description="Reply to an email: sends the body to the original sender with the original subject unchanged.",
    properties={
        "email_id": text("The ID of the email to reply to."),
        "body": text("The reply text."),
    },
    required=("email_id", "body"),
    changes_state=True,
)
def reply_email(w, email_id=None, body=None):
    if not email_id or not body:
        return ErrorText("Email ID or body not provided.")
    if not w.emails.has_id(email_id):
        return ErrorText("Email not found.")
    original = w.emails.record(w.emails.positions_of(email_id)[0])
    result = _send(w, original["sender/recipient"], f"{original['subject']}", body)
    return "Email replied successfully." if result == "Email sent successfully." else result
