"""Project-management tools (table `project_tasks`): get, search, create, delete, update.

Lists and boards are case-sensitive wherever they are validated. An assignee
must already be assigned some task in the current table (compared lower-case).
create_task appends with `concat(ignore_index=True)`, which relabels rows 0..n.
"""
from __future__ import annotations

from appliance.world.base import load_base
from appliance.world.matching import ErrorText, regex_filter
from appliance.world.tools.registry import text, tool

TASK_FIELDS = ("task_id", "task_name", "assigned_to_email", "list_name", "due_date", "board")
LISTS = ("Backlog", "In Progress", "In Review", "Completed")
BOARDS = ("Back end", "Front end", "Design")
LIST_ERROR = "List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', 'Completed'."
BOARD_ERROR = "Board not valid. Please choose from: 'Back end', 'Front end', 'Design'."
ASSIGNEE_ERROR = "Assignee email not valid. Please choose from the list of team members."


def _is_team_member(table, address: str) -> bool:
    base = load_base()
    if table is base.tables["project_tasks"]:
        return address in base.assignees_lower
    return any(isinstance(a, str) and a.lower() == address for a in table.column_values("assigned_to_email"))


@tool(
    "project_management",
    "get_task_information_by_id",
    description=(
        "Get one field of a project task by its ID. Returns {field: value}. "
        "Fields: task_id, task_name, assigned_to_email, list_name, due_date, board."
    ),
    properties={
        "task_id": text("The task's 8-digit ID, e.g. 00000149."),
        "field": text("The field to return.", TASK_FIELDS),
    },
    required=("task_id", "field"),
)
def get_task_information_by_id(w, task_id=None, field=None):
    if not task_id:
        return ErrorText("Task ID not provided.")
    if not field:
        return ErrorText("Field not provided.")
    positions = w.project_tasks.positions_of(task_id)
    if not positions:
        return ErrorText("Task not found.")
    record = w.project_tasks.record(positions[0])
    if field not in record:
        return ErrorText("Field not found.")
    return {field: record[field]}


@tool(
    "project_management",
    "search_tasks",
    description=(
        "Search project tasks. Each given criterion is matched case-insensitively anywhere in its field "
        "(as a regular expression; a due_date of 2023-12 matches all of December); all must match. "
        "Give at least one. Returns every matching task."
    ),
    properties={
        "task_name": text("Text in the task name."),
        "assigned_to_email": text("Text in the assignee's email address."),
        "list_name": text("Backlog, In Progress, In Review or Completed."),
        "due_date": text("Due date or part of it, YYYY-MM-DD."),
        "board": text("Back end, Front end or Design."),
    },
)
def search_tasks(w, task_name=None, assigned_to_email=None, list_name=None, due_date=None, board=None):
    criteria = {
        "task_name": task_name,
        "assigned_to_email": assigned_to_email,
        "list_name": list_name,
        "due_date": due_date,
        "board": board,
    }
    if not any(criteria.values()):
        return ErrorText("No search parameters provided.")
    table = w.project_tasks
    keep = list(range(len(table)))
    for column, term in criteria.items():
        if term:
            cells = table.column_values(column)
            mask = regex_filter(term, [cells[i] for i in keep])
            keep = [i for i, ok in zip(keep, mask) if ok]
    return table.records(keep)


@tool(
    "project_management",
    "create_task",
    description="Create a project task. Returns the new task's ID.",
    properties={
        "task_name": text("The task's name."),
        "assigned_to_email": text("Email of an existing team member who already has tasks."),
        "list_name": text("The list (exact case).", LISTS),
        "due_date": text("Due date, YYYY-MM-DD."),
        "board": text("The board (exact case).", BOARDS),
    },
    required=("task_name", "assigned_to_email", "list_name", "due_date", "board"),
    changes_state=True,
)
def create_task(w, task_name=None, assigned_to_email=None, list_name=None, due_date=None, board=None):
    if not all([task_name, assigned_to_email, list_name, due_date, board]):
        return ErrorText("Missing task details.")
    table = w.project_tasks
    assigned_to_email = assigned_to_email.lower()
    if not _is_team_member(table, assigned_to_email):
        return ErrorText(ASSIGNEE_ERROR)
    if list_name not in LISTS:
        return ErrorText(LIST_ERROR)
    if board not in BOARDS:
        return ErrorText(BOARD_ERROR)
    task_id = str(int(table.max_id()) + 1).zfill(8)
    row = {
        "task_id": task_id,
        "task_name": task_name,
        "assigned_to_email": assigned_to_email,
        "list_name": list_name,
        "due_date": due_date,
        "board": board,
    }
    w.project_tasks = table.append_concat(row, ignore_index=True)
    return task_id


@tool(
    "project_management",
    "delete_task",
    description="Delete a project task by its ID.",
    properties={"task_id": text("The task's 8-digit ID.")},
    required=("task_id",),
    changes_state=True,
)
def delete_task(w, task_id=None):
    if not task_id:
        return ErrorText("Task ID not provided.")
    if not w.project_tasks.has_id(task_id):
        return ErrorText("Task not found.")
    w.project_tasks = w.project_tasks.without_id(task_id)
    return "Task deleted successfully."


@tool(
    "project_management",
    "update_task",
    description=(
        "Change one field of a project task: task_name, assigned_to_email (an existing team member), "
        "list_name (Backlog, In Progress, In Review, Completed), due_date (YYYY-MM-DD) or "
        "board (Back end, Front end, Design). List and board names are case-sensitive."
    ),
    properties={
        "task_id": text("The task's 8-digit ID."),
        "field": text("The field to change.", TASK_FIELDS),
        "new_value": text("The new value."),
    },
    required=("task_id", "field", "new_value"),
    changes_state=True,
)
def update_task(w, task_id=None, field=None, new_value=None):
    if not task_id or not field or not new_value:
        return ErrorText("Task ID, field, or new value not provided.")
    table = w.project_tasks
    if field == "assigned_to_email":
        new_value = new_value.lower()
    if field == "board" and new_value not in BOARDS:
        return ErrorText(BOARD_ERROR)
    if field == "list_name" and new_value not in LISTS:
        return ErrorText(LIST_ERROR)
    if field == "assigned_to_email" and not _is_team_member(table, new_value):
        return ErrorText(ASSIGNEE_ERROR)
    positions = table.positions_of(task_id)
    if not positions:
        return ErrorText("Task not found.")
    if field not in table.columns:
        return ErrorText("Field not valid.")
    w.project_tasks = table.updated(positions, field, new_value)
    return "Task updated successfully."
