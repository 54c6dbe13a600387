"""The workplace world's tools: arguments, effects, return texts, error texts and quirks.

Expected values come from TOOLS_AND_SCORING.md (the WorkBench specification)
and the bundled CSVs.
"""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from appliance.task import ToolCall
from appliance.world import (
    NOW,
    READ_ONLY_TOOLS,
    STATE_CHANGING_TOOLS,
    FixtureError,
    World,
    base_tables,
    directory,
    parse_workbench_call,
    replay,
    tool_schemas,
    workbench_name,
)


def run(tool: str, /, **arguments):
    return World.fresh().call(ToolCall(tool, arguments))


def call(world: World, tool: str, /, **arguments):
    return world.call(ToolCall(tool, arguments))


# ---- data and public accessors ----------------------------------------------------------


def test_base_tables_have_the_documented_sizes_and_text_cells():
    tables = base_tables()
    sizes = {name: len(rows) for name, rows in tables.items()}
    assert sizes == {
        "emails": 500,
        "calendar_events": 300,
        "project_tasks": 300,
        "crm": 200,
        "analytics": 1000,
        "plots": 0,
    }
    assert tables["emails"][0]["email_id"] == "00000373"
    assert tables["analytics"][0]["visitor_id"] == "0860"  # leading zeros kept
    assert tables["analytics"][0]["user_engaged"] is False
    assert sum(r["customer_phone"] is None for r in tables["crm"]) == 100  # blank -> None


def test_base_tables_are_read_only():
    row = base_tables()["emails"][0]
    with pytest.raises(TypeError):
        row["subject"] = "changed"  # type: ignore[index]


def test_directory_and_now():
    assert len(directory()) == 20
    assert all(a.endswith("@atlas.com") for a in directory())
    assert NOW == "2023-11-30 00:00:00"


def test_tool_sets_partition_the_27_tools():
    names = {s["function"]["name"] for s in tool_schemas()}
    assert len(names) == 27
    assert len(STATE_CHANGING_TOOLS) == 14 and len(READ_ONLY_TOOLS) == 13
    assert STATE_CHANGING_TOOLS | READ_ONLY_TOOLS == names
    assert "email_delete_email" in STATE_CHANGING_TOOLS
    assert workbench_name("email_delete_email") == "email.delete_email"


def test_tool_schemas_are_valid_openai_functions():
    for schema in tool_schemas():
        function = schema["function"]
        assert schema["type"] == "function"
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", function["name"])
        assert function["description"]
        parameters = function["parameters"]
        jsonschema.Draft202012Validator.check_schema(parameters)
        assert set(parameters["required"]) <= set(parameters["properties"])


def test_schema_enums_match_what_the_tools_accept():
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas()}
    plot = schemas["analytics_create_plot"]["properties"]
    assert plot["plot_type"]["enum"] == ["bar", "line", "scatter", "histogram"]
    assert "visits_social_media" in plot["value_to_plot"]["enum"]
    assert schemas["project_management_create_task"]["properties"]["board"]["enum"] == [
        "Back end",
        "Front end",
        "Design",
    ]
    assert schemas["customer_relationship_manager_add_customer"]["required"] == [
        "customer_name",
        "assigned_to_email",
        "status",
    ]
    assert schemas["email_search_emails"]["required"] == []


# ---- argument handling ----------------------------------------------------------------


def test_unknown_tool_is_a_raised_error():
    result = run("email_explode")
    assert result.observation == "Error: unknown tool 'email_explode'."
    assert (result.ok, result.raised, result.changed) == (False, True, False)


def test_unexpected_argument_is_a_raised_error():
    result = run("email_delete_email", email_id="00000479", force="yes")
    assert result.raised and not result.ok
    assert "unexpected keyword argument 'force'" in result.observation


def test_nested_argument_values_are_rejected_not_crashing():
    result = run("email_delete_email", email_id={"id": "00000479"})
    assert result.raised and not result.ok and not result.changed
    result = run("email_delete_email", email_id=["00000479"])
    assert result.raised


def test_non_dict_arguments_are_rejected():
    result = World.fresh().call(ToolCall("email_delete_email", ["00000479"]))  # type: ignore[arg-type]
    assert result.raised and not result.ok


def test_scalar_arguments_are_converted_with_str():
    world = World.fresh()
    result = call(world, "calendar_create_event", event_name="x", participant_email="a@atlas.com",
                  event_start="2023-12-01 13:00:00", duration=30)
    assert result.ok
    assert world.rows("calendar_events")[-1]["duration"] == "30"
    world = World.fresh()
    call(world, "calendar_create_event", event_name="x", participant_email="a@atlas.com",
         event_start="2023-12-01 13:00:00", duration=30.0)
    assert world.rows("calendar_events")[-1]["duration"] == "30.0"


def test_null_argument_counts_as_omitted():
    assert run("email_delete_email", email_id=None).observation == "Email ID not provided."


# ---- error texts, tool by tool -----------------------------------------------------------

ERROR_CASES = [
    ("company_directory_find_email_address", {}, "Name not provided."),
    ("email_get_email_information_by_id", {"field": "subject"}, "Email ID not provided."),
    ("email_get_email_information_by_id", {"email_id": "00000373"}, "Field not provided."),
    ("email_get_email_information_by_id", {"email_id": "x", "field": "subject"}, "Email not found."),
    ("email_get_email_information_by_id", {"email_id": "00000373", "field": "sender"}, "Field not found."),
    ("email_get_email_information_by_id", {"email_id": "00000373", "field": "sent_date"}, "Field not found."),
    ("email_send_email", {"recipient": "a@atlas.com", "subject": "s"}, "Recipient, subject, or body not provided."),
    ("email_send_email", {"recipient": "a@atlas", "subject": "s", "body": "b"}, "Invalid recipient email address."),
    ("email_delete_email", {}, "Email ID not provided."),
    ("email_delete_email", {"email_id": "373"}, "Email not found."),
    ("email_forward_email", {"email_id": "00000373"}, "Email ID or recipient not provided."),
    ("email_forward_email", {"email_id": "x", "recipient": "bad"}, "Email not found."),
    ("email_forward_email", {"email_id": "00000373", "recipient": "bad"}, "Invalid recipient email address."),
    ("email_reply_email", {"email_id": "00000373"}, "Email ID or body not provided."),
    ("email_reply_email", {"email_id": "x", "body": "b"}, "Email not found."),
    ("calendar_get_event_information_by_id", {"field": "event_name"}, "Event ID not provided."),
    ("calendar_get_event_information_by_id", {"event_id": "00000013"}, "Field not provided."),
    ("calendar_get_event_information_by_id", {"event_id": "13", "field": "event_name"}, "Event not found."),
    ("calendar_get_event_information_by_id", {"event_id": "00000013", "field": "event_end"}, "Field not found."),
    ("calendar_create_event", {}, "Event name not provided."),
    ("calendar_create_event", {"event_name": "x"}, "Participant email not provided."),
    ("calendar_create_event", {"event_name": "x", "participant_email": "a@atlas.com"}, "Event start not provided."),
    ("calendar_create_event", {"event_name": "x", "participant_email": "a@atlas.com", "event_start": "2023-12-01"},
     "Event duration not provided."),
    ("calendar_delete_event", {}, "Event ID not provided."),
    ("calendar_delete_event", {"event_id": "x"}, "Event not found."),
    ("calendar_update_event", {"event_id": "00000013", "field": "duration"}, "Event ID, field, or new value not provided."),
    ("calendar_update_event", {"event_id": "x", "field": "duration", "new_value": "30"}, "Event not found."),
    ("analytics_get_visitor_information_by_id", {}, "Visitor ID not provided."),
    ("analytics_get_visitor_information_by_id", {"visitor_id": "860"}, "Visitor not found."),
    ("analytics_create_plot", {"time_max": "2023-11-29"}, "Start date not provided."),
    ("analytics_create_plot", {"time_min": "2023-11-01"}, "End date not provided."),
    ("analytics_create_plot", {"time_min": "a", "time_max": "b", "value_to_plot": "direct", "plot_type": "bar"},
     "Value to plot must be one of 'total_visits', 'session_duration_seconds', 'user_engaged', 'direct', "
     "'referral', 'search engine', 'social media'"),
    ("analytics_create_plot", {"time_min": "a", "time_max": "b", "value_to_plot": "total_visits", "plot_type": "pie"},
     "Plot type must be one of 'bar', 'line', 'scatter', or 'histogram'"),
    ("project_management_get_task_information_by_id", {"field": "board"}, "Task ID not provided."),
    ("project_management_get_task_information_by_id", {"task_id": "00000149"}, "Field not provided."),
    ("project_management_get_task_information_by_id", {"task_id": "149", "field": "board"}, "Task not found."),
    ("project_management_get_task_information_by_id", {"task_id": "00000149", "field": "assigned_to"}, "Field not found."),
    ("project_management_search_tasks", {}, "No search parameters provided."),
    ("project_management_create_task", {"task_name": "x"}, "Missing task details."),
    ("project_management_create_task",
     {"task_name": "x", "assigned_to_email": "sam@atlas.com", "list_name": "Backlog", "due_date": "d", "board": "Design"},
     "Assignee email not valid. Please choose from the list of team members."),
    ("project_management_create_task",
     {"task_name": "x", "assigned_to_email": "leila.azizi@atlas.com", "list_name": "backlog", "due_date": "d",
      "board": "Design"},
     "List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', 'Completed'."),
    ("project_management_create_task",
     {"task_name": "x", "assigned_to_email": "leila.azizi@atlas.com", "list_name": "Backlog", "due_date": "d",
      "board": "design"},
     "Board not valid. Please choose from: 'Back end', 'Front end', 'Design'."),
    ("project_management_delete_task", {}, "Task ID not provided."),
    ("project_management_delete_task", {"task_id": "x"}, "Task not found."),
    ("project_management_update_task", {"task_id": "00000149", "field": "board"}, "Task ID, field, or new value not provided."),
    ("project_management_update_task", {"task_id": "x", "field": "board", "new_value": "Design"}, "Task not found."),
    ("project_management_update_task", {"task_id": "x", "field": "board", "new_value": "design"},
     "Board not valid. Please choose from: 'Back end', 'Front end', 'Design'."),  # value checked before the ID
    ("project_management_update_task", {"task_id": "00000149", "field": "list_name", "new_value": "Done"},
     "List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', 'Completed'."),
    ("project_management_update_task", {"task_id": "00000149", "field": "assigned_to_email", "new_value": "sam@atlas.com"},
     "Assignee email not valid. Please choose from the list of team members."),
    ("project_management_update_task", {"task_id": "00000149", "field": "priority", "new_value": "high"}, "Field not valid."),
    ("customer_relationship_manager_search_customers", {},
     "No search parameters provided. Please provide at least one parameter."),
    ("customer_relationship_manager_update_customer", {"customer_id": "00000189"},
     "Customer ID, field, or new value not provided."),
    ("customer_relationship_manager_update_customer", {"customer_id": "00000189", "field": "status", "new_value": "won"},
     "Status not valid. Please choose from: 'Qualified', 'Won', 'Lost', 'Lead', 'Proposal'"),
    ("customer_relationship_manager_update_customer",
     {"customer_id": "00000189", "field": "product_interest", "new_value": "Cars"},
     "Product interest not valid. Please choose from: 'Software', 'Hardware', 'Services', 'Consulting', 'Training'"),
    ("customer_relationship_manager_update_customer", {"customer_id": "x", "field": "notes", "new_value": "n"},
     "Customer not found."),
    ("customer_relationship_manager_update_customer", {"customer_id": "00000189", "field": "age", "new_value": "3"},
     "Field not valid. Please choose from: 'customer_name', 'assigned_to_email', 'customer_email', 'customer_phone', "
     "'last_contact_date', 'product_interest', 'status', 'notes', 'follow_up_by'"),
    ("customer_relationship_manager_add_customer", {"customer_name": "x", "status": "Lead"},
     "Please provide all required fields: customer_name, assigned_to_email, status."),
    ("customer_relationship_manager_delete_customer", {}, "Customer ID not provided."),
    ("customer_relationship_manager_delete_customer", {"customer_id": "x"}, "Customer not found."),
]


@pytest.mark.parametrize("name,arguments,expected", ERROR_CASES)
def test_error_texts(name, arguments, expected):
    world = World.fresh()
    result = world.call(ToolCall(name, arguments))
    assert result.observation == expected
    assert (result.ok, result.raised, result.changed) == (False, False, False)
    assert not world.changed()


def test_every_tool_has_an_error_case_or_cannot_fail():
    covered = {name for name, _, _ in ERROR_CASES}
    never_fail = {
        "email_search_emails",
        "calendar_search_events",
        "analytics_total_visits_count",
        "analytics_engaged_users_count",
        "analytics_traffic_source_count",
        "analytics_get_average_session_duration",
    }
    assert covered | never_fail == STATE_CHANGING_TOOLS | READ_ONLY_TOOLS


# ---- successful effects and return values -------------------------------------------------


def test_get_information_returns_one_field_mapping():
    result = run("email_get_email_information_by_id", email_id="00000373", field="sender/recipient")
    assert json.loads(result.observation) == {"sender/recipient": "santiago.martinez@atlas.com"}
    result = run("calendar_get_event_information_by_id", event_id="00000013", field="duration")
    assert json.loads(result.observation) == {"duration": "90"}


def test_send_email_appends_unpadded_ids_from_500():
    world = World.fresh()
    assert call(world, "email_send_email", recipient="Leila.Azizi@atlas.com", subject="Hi", body="b").observation == (
        "Email sent successfully."
    )
    call(world, "email_send_email", recipient="raj.patel@atlas.com", subject="Hi", body="b")
    rows = world.rows("emails")
    assert [r["email_id"] for r in rows[-2:]] == ["500", "501"]
    assert rows[-2]["inbox/outbox"] == "outbox"
    assert rows[-2]["sender/recipient"] == "leila.azizi@atlas.com"  # lower-cased
    sent = call(world, "email_get_email_information_by_id", email_id="500", field="sent_datetime")
    assert json.loads(sent.observation) == {"sent_datetime": NOW}


def test_send_after_delete_overwrites_the_last_email():
    world = World.fresh()
    last = world.rows("emails")[-1]["email_id"]
    call(world, "email_delete_email", email_id="00000479")
    result = call(world, "email_send_email", recipient="raj.patel@atlas.com", subject="Hi", body="b")
    assert result.ok and result.changed
    ids = [r["email_id"] for r in world.rows("emails")]
    assert len(ids) == 499  # overwritten, not appended
    assert last not in ids and ids[-1] == "500"


def test_forward_and_reply_subjects():
    world = World.fresh()
    original = world.rows("emails")[0]
    assert call(world, "email_forward_email", email_id="00000373", recipient="Raj.Patel@atlas.com").observation == (
        "Email forwarded successfully."
    )
    assert call(world, "email_reply_email", email_id="00000373", body="Thanks").observation == (
        "Email replied successfully."
    )
    forward, reply = world.rows("emails")[-2:]
    assert (forward["subject"], forward["body"], forward["sender/recipient"]) == (
        "FW: " + original["subject"],
        original["body"],
        "raj.patel@atlas.com",
    )
    assert (reply["subject"], reply["body"], reply["sender/recipient"]) == (
        original["subject"],
        "Thanks",
        original["sender/recipient"],
    )


def test_search_emails_is_newest_first_capped_at_five_and_bounded_by_date():
    results = json.loads(run("email_search_emails", query="update").observation)
    assert len(results) == 5
    dates = [r["sent_datetime"] for r in results]
    assert dates == sorted(dates, reverse=True)
    bounded = json.loads(run("email_search_emails", query="", date_min="2023-10-01", date_max="2023-10-01").observation)
    assert all(r["sent_datetime"].startswith("2023-10-01") for r in bounded)
    assert run("email_search_emails", query="zzzunknownzzz").observation == "No emails found."


def test_search_emails_with_unparseable_date_raises():
    result = run("email_search_emails", query="update", date_min="next tuesday")
    assert result.raised and not result.ok and result.observation.startswith("Error:")


def test_search_emails_after_a_send_raises_when_both_kinds_of_date_match():
    # pandas cannot sort a date-time object against text dates (WorkBench quirk).
    world = World.fresh()
    call(world, "email_send_email", recipient="raj.patel@atlas.com", subject="Budget", body="b")
    assert call(world, "email_search_emails", query="budget").raised
    assert call(world, "email_search_emails", query="zzz").observation == "No emails found."


def test_search_events_regex_contains_first_five_by_start():
    results = json.loads(run("calendar_search_events", query="SYNC").observation)
    assert len(results) == 5
    assert all("sync" in (r["event_name"] + r["participant_email"]).lower() for r in results)
    starts = [r["event_start"] for r in results]
    assert starts == sorted(starts)
    windowed = json.loads(
        run("calendar_search_events", time_min="2023-12-01 00:00:00", time_max="2023-12-01 23:59:59").observation
    )
    assert windowed and all(r["event_start"].startswith("2023-12-01") for r in windowed)
    assert run("calendar_search_events", query="s.nc up").ok  # '.' is a regex wildcard
    assert run("calendar_search_events", query="(").raised  # invalid regex raises


def test_create_event_stores_values_as_given_with_new_id():
    world = World.fresh()
    result = call(world, "calendar_create_event", event_name="Catch up", participant_email="Leila.Azizi@atlas.com",
                  event_start="2023-12-01 13:00", duration="30")
    assert result.observation == "00000300" and result.changed
    row = world.rows("calendar_events")[-1]
    assert row == {
        "event_id": "00000300",
        "event_name": "Catch up",
        "participant_email": "leila.azizi@atlas.com",
        "event_start": "2023-12-01 13:00",
        "duration": "30",
    }


def test_update_event_unknown_field_adds_a_column_and_counts_as_change():
    world = World.fresh()
    result = call(world, "calendar_update_event", event_id="00000013", field="location", new_value="Room 1")
    assert result.observation == "Event updated successfully." and result.changed
    rows = world.rows("calendar_events")
    assert all("location" in r for r in rows)
    assert sum(r["location"] is not None for r in rows) == 1
    assert world.changed()


def test_update_event_lower_cases_participant():
    world = World.fresh()
    call(world, "calendar_update_event", event_id="00000013", field="participant_email", new_value="RAJ.PATEL@atlas.com")
    assert world.rows("calendar_events")[0]["participant_email"] == "raj.patel@atlas.com"


def test_directory_lookup_is_a_lowercased_contains_match():
    assert json.loads(run("company_directory_find_email_address", name="Nadia").observation) == [
        "nadia.moreau@atlas.com"
    ]
    assert json.loads(run("company_directory_find_email_address", name="sam").observation) == []
    assert len(json.loads(run("company_directory_find_email_address", name="a").observation)) > 10


def test_analytics_counts_are_per_day():
    total = json.loads(run("analytics_total_visits_count", time_min="2023-11-25", time_max="2023-11-29").observation)
    assert list(total) == ["2023-11-25", "2023-11-26", "2023-11-27", "2023-11-28", "2023-11-29"]
    engaged = json.loads(run("analytics_engaged_users_count", time_min="2023-11-25", time_max="2023-11-29").observation)
    assert engaged.keys() == total.keys() and all(engaged[d] <= total[d] for d in total)
    by_source = {
        s: json.loads(run("analytics_traffic_source_count", time_min="2023-11-25", time_max="2023-11-29",
                          traffic_source=s).observation)
        for s in ("direct", "referral", "search engine", "social media")
    }
    assert all(sum(by_source[s][d] for s in by_source) == total[d] for d in total)
    unknown = json.loads(run("analytics_traffic_source_count", time_min="2023-11-25", time_max="2023-11-29",
                             traffic_source="Direct").observation)
    assert set(unknown.values()) == {0}
    no_source = json.loads(run("analytics_traffic_source_count", time_min="2023-11-25", time_max="2023-11-29").observation)
    assert no_source == total
    average = json.loads(run("analytics_get_average_session_duration", time_min="2023-11-29").observation)
    assert list(average) == ["2023-11-29"] and isinstance(average["2023-11-29"], float)
    assert json.loads(run("analytics_total_visits_count", time_min="2024-01-01").observation) == {}


def test_visitor_lookup_returns_every_visit():
    visits = json.loads(run("analytics_get_visitor_information_by_id", visitor_id="0860").observation)
    assert visits[0]["date_of_visit"] == "2023-10-22" and visits[0]["user_engaged"] is False


def test_create_plot_records_the_path():
    world = World.fresh()
    result = call(world, "analytics_create_plot", time_min="2023-11-01", time_max="2023-11-29",
                  value_to_plot="total_visits", plot_type="bar")
    assert result.observation == "plots/2023-11-01_2023-11-29_total_visits_bar.png" and result.changed
    assert world.rows("plots") == [{"file_path": "plots/2023-11-01_2023-11-29_total_visits_bar.png"}]


def test_search_tasks_all_matches_uncapped_and_case_insensitive():
    december = json.loads(run("project_management_search_tasks", due_date="2023-12").observation)
    assert len(december) > 5 and all(t["due_date"].startswith("2023-12") for t in december)
    backlog = json.loads(run("project_management_search_tasks", list_name="backlog", board="front").observation)
    assert backlog and all((t["list_name"], t["board"]) == ("Backlog", "Front end") for t in backlog)
    assert run("project_management_search_tasks", task_name="zzz").observation == "[]"


def test_create_and_update_task():
    world = World.fresh()
    result = call(world, "project_management_create_task", task_name="Write docs", board="Design",
                  assigned_to_email="Leila.Azizi@atlas.com", list_name="Backlog", due_date="2023-12-05")
    assert result.observation == "00000300"
    assert world.rows("project_tasks")[-1]["assigned_to_email"] == "leila.azizi@atlas.com"
    assert call(world, "project_management_update_task", task_id="00000300", field="list_name",
                new_value="In Review").observation == "Task updated successfully."
    assert call(world, "project_management_delete_task", task_id="00000300").observation == "Task deleted successfully."
    assert not world.changed()


def test_search_customers_first_five_and_date_bounds():
    lost = json.loads(run("customer_relationship_manager_search_customers", status="lost").observation)
    assert len(lost) == 5 and all(c["status"] == "Lost" for c in lost)
    recent = json.loads(run("customer_relationship_manager_search_customers",
                            last_contact_date_min="2023-11-30").observation)
    assert recent and all(c["last_contact_date"] >= "2023-11-30" for c in recent)
    assert run("customer_relationship_manager_search_customers", customer_name="zzz").observation == "[]"


def test_add_customer_defaults_and_missing_cells_break_later_searches():
    world = World.fresh()
    result = call(world, "customer_relationship_manager_add_customer", customer_name="Ada Byron",
                  assigned_to_email="Raj.Patel@atlas.com", status="Lead")
    assert result.observation == "00000200" and result.changed
    row = world.rows("crm")[-1]
    assert row["assigned_to_email"] == "raj.patel@atlas.com"
    assert row["notes"] == "" and row["customer_email"] is None and row["customer_phone"] is None
    # pandas cannot mask on a column with a missing cell once the new row is among the candidates.
    assert call(world, "customer_relationship_manager_search_customers", customer_name="Ada",
                customer_email="x").raised
    assert call(world, "customer_relationship_manager_search_customers", customer_name="Ada").ok


# ---- fixtures and replay ---------------------------------------------------------------


def test_fixture_setup_calls_define_the_fresh_base():
    fixture = {"setup_calls": [{"name": "email_delete_email", "arguments": {"email_id": "00000479"}}]}
    world = World.fresh(fixture)
    assert len(world.rows("emails")) == 499 and not world.changed()
    assert not World.fresh(fixture).same_state(World.fresh())
    call(world, "email_delete_email", email_id="00000373")
    assert world.changed()
    assert replay([], fixture).same_state(World.fresh(fixture))


def test_bad_fixtures_raise_fixture_error():
    with pytest.raises(FixtureError):
        World.fresh({"setup_calls": [{"name": "email_delete_email", "arguments": {"email_id": "nope"}}]})
    with pytest.raises(FixtureError):
        World.fresh({"calls": []})
    with pytest.raises(FixtureError):
        World.fresh({"setup_calls": [{"arguments": {}}]})


def test_replay_accepts_dicts_and_skips_nothing():
    world = replay([
        {"name": "email_delete_email", "arguments": {"email_id": "nope"}},
        {"name": "email_delete_email", "arguments": {"email_id": "00000479"}},
    ])
    assert len(world.rows("emails")) == 499


# ---- parsing WorkBench answer strings ----------------------------------------------------


def test_parse_workbench_call():
    call_ = parse_workbench_call('email.delete_email.func(email_id="00000479")')
    assert call_ == ToolCall("email_delete_email", {"email_id": "00000479"})
    multi = parse_workbench_call(
        'customer_relationship_manager.update_customer.func(customer_id="00000125", field="status", new_value="Won")'
    )
    assert multi.name == "customer_relationship_manager_update_customer"
    assert list(multi.arguments) == ["customer_id", "field", "new_value"]
    with_newline = parse_workbench_call('email.send_email.func(recipient="a@b.c", subject="s", body="x\ny")')
    assert with_newline.arguments["body"] == "x\ny"
    escaped = parse_workbench_call('email.send_email.func(recipient="a@b.c", subject="s", body="x\\ny")')
    assert escaped.arguments["body"] == "x\ny"


@pytest.mark.parametrize(
    "text",
    [
        'email.delete_email.func("00000479")',
        "email.delete_email.func(email_id=479)",
        'email.delete_email.func(email_id=x)',
        'email.delete_email.func(**{"email_id": "1"})',
        'delete_email(email_id="1")',
        '__import__("os").system("true")',
        "email.delete_email",
        'email.delete_email.func(email_id="1"',
        "",
    ],
)
def test_parse_workbench_call_rejects_anything_else(text):
    with pytest.raises(ValueError):
        parse_workbench_call(text)


def test_world_imports_only_the_standard_library():
    import subprocess
    import sys

    code = (
        "import sys, appliance.world; "
        "heavy = {'pandas', 'numpy', 'textual', 'torch', 'transformers'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
