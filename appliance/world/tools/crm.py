"""Customer-relationship-manager tools (table `crm`): search, update, add, delete.

Text criteria are case-insensitive regex "contains" matches; date bounds are
inclusive text comparisons (a missing date never matches). A criterion on a
column with missing cells (customer_email or product_interest of a customer
added without them) raises, as pandas does. add_customer validates nothing but
the three required fields and relabels the rows 0..n (`concat(ignore_index=True)`).
"""
from __future__ import annotations

from appliance.world.matching import ErrorText, regex_filter
from appliance.world.tools.registry import text, tool

STATUSES = ("Qualified", "Won", "Lost", "Lead", "Proposal")
PRODUCTS = ("Software", "Hardware", "Services", "Consulting", "Training")
CRM_COLUMNS = (
    "customer_id",
    "assigned_to_email",
    "customer_name",
    "customer_email",
    "customer_phone",
    "last_contact_date",
    "product_interest",
    "status",
    "follow_up_by",
    "notes",
)
SEARCH_LIMIT = 5
_TEXT_CRITERIA = ("customer_name", "customer_email", "product_interest", "status", "assigned_to_email")
_DATE_BOUNDS = (
    ("last_contact_date_min", "last_contact_date", ">="),
    ("last_contact_date_max", "last_contact_date", "<="),
    ("follow_up_by_min", "follow_up_by", ">="),
    ("follow_up_by_max", "follow_up_by", "<="),
)


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(repr(v) for v in values)


def _within(cell, bound: str, op: str) -> bool:
    if not isinstance(cell, str):
        return False  # pandas compares a missing cell as False
    return cell >= bound if op == ">=" else cell <= bound


@tool(
    "customer_relationship_manager",
    "search_customers",
    description=(
        "Search customers. Text criteria match case-insensitively anywhere in the field; date bounds "
        "(YYYY-MM-DD, inclusive) filter last_contact_date and follow_up_by. All given criteria must "
        "match; give at least one. Returns at most 5 full customer records in table order."
    ),
    properties={
        "customer_name": text("Text in the customer's name."),
        "customer_email": text("Text in the customer's email."),
        "product_interest": text("Software, Hardware, Services, Consulting or Training."),
        "status": text("Qualified, Won, Lost, Lead or Proposal."),
        "assigned_to_email": text("Text in the account owner's email."),
        "last_contact_date_min": text("Earliest last contact date, YYYY-MM-DD."),
        "last_contact_date_max": text("Latest last contact date, YYYY-MM-DD."),
        "follow_up_by_min": text("Earliest follow-up date, YYYY-MM-DD."),
        "follow_up_by_max": text("Latest follow-up date, YYYY-MM-DD."),
    },
)
def search_customers(w, **criteria):
    if not any(criteria.values()):
        return ErrorText("No search parameters provided. Please provide at least one parameter.")
    table = w.crm
    keep = list(range(len(table)))
    for column in _TEXT_CRITERIA:
        term = criteria.get(column)
        if term:
            cells = table.column_values(column)
            mask = regex_filter(term, [cells[i] for i in keep])
            keep = [i for i, ok in zip(keep, mask) if ok]
    for argument, column, op in _DATE_BOUNDS:
        bound = criteria.get(argument)
        if bound:
            cells = table.column_values(column)
            keep = [i for i in keep if _within(cells[i], bound, op)]
    return table.records(keep[:SEARCH_LIMIT])


@tool(
    "customer_relationship_manager",
    "update_customer",
    description=(
        "Change one field of a customer record. status must be one of Qualified, Won, Lost, Lead, "
        "Proposal and product_interest one of Software, Hardware, Services, Consulting, Training "
        "(exact case). Dates are YYYY-MM-DD."
    ),
    properties={
        "customer_id": text("The customer's 8-digit ID, e.g. 00000189."),
        "field": text("The field to change.", CRM_COLUMNS),
        "new_value": text("The new value."),
    },
    required=("customer_id", "field", "new_value"),
    changes_state=True,
)
def update_customer(w, customer_id=None, field=None, new_value=None):
    if not customer_id or not field or not new_value:
        return ErrorText("Customer ID, field, or new value not provided.")
    if field == "status" and new_value not in STATUSES:
        return ErrorText(f"Status not valid. Please choose from: {_quoted(STATUSES)}")
    if field == "product_interest" and new_value not in PRODUCTS:
        return ErrorText(f"Product interest not valid. Please choose from: {_quoted(PRODUCTS)}")
    if field in ("customer_email", "assigned_to_email"):
        new_value = new_value.lower()
    table = w.crm
    positions = table.positions_of(customer_id)
    if not positions:
        return ErrorText("Customer not found.")
    if field not in table.columns:
        return ErrorText(
            "Field not valid. Please choose from: 'customer_name', 'assigned_to_email', 'customer_email', "
            "'customer_phone', 'last_contact_date', 'product_interest', 'status', 'notes', 'follow_up_by'"
        )
    w.crm = table.updated(positions, field, new_value)
    return "Customer updated successfully."


@tool(
    "customer_relationship_manager",
    "add_customer",
    description=(
        "Add a customer record. Returns the new customer's ID. Required: customer_name, "
        "assigned_to_email (the account owner) and status (Qualified, Won, Lost, Lead or Proposal)."
    ),
    properties={
        "customer_name": text("The customer's full name."),
        "assigned_to_email": text("The account owner's email address."),
        "status": text("Qualified, Won, Lost, Lead or Proposal."),
        "customer_email": text("The customer's email address."),
        "customer_phone": text("The customer's phone number."),
        "last_contact_date": text("Last contact date, YYYY-MM-DD."),
        "product_interest": text("Software, Hardware, Services, Consulting or Training."),
        "notes": text("Free-text notes."),
        "follow_up_by": text("Follow-up date, YYYY-MM-DD."),
    },
    required=("customer_name", "assigned_to_email", "status"),
    changes_state=True,
)
def add_customer(
    w,
    customer_name=None,
    assigned_to_email=None,
    status=None,
    customer_email=None,
    customer_phone=None,
    last_contact_date=None,
    product_interest=None,
    notes="",
    follow_up_by=None,
):
    if not all((customer_name, assigned_to_email, status)):
        return ErrorText("Please provide all required fields: customer_name, assigned_to_email, status.")
    table = w.crm
    new_id = str(int(table.max_id()) + 1).zfill(8)
    row = {
        "customer_id": new_id,
        "customer_name": customer_name,
        "customer_email": customer_email.lower() if customer_email else customer_email,
        "customer_phone": customer_phone,
        "last_contact_date": last_contact_date,
        "product_interest": product_interest,
        "status": status,
        "assigned_to_email": assigned_to_email.lower(),
        "notes": notes,
        "follow_up_by": follow_up_by,
    }
    w.crm = table.append_concat(row, ignore_index=True)
    return new_id


@tool(
    "customer_relationship_manager",
    "delete_customer",
    description="Delete a customer record by its ID.",
    properties={"customer_id": text("The customer's 8-digit ID.")},
    required=("customer_id",),
    changes_state=True,
)
def delete_customer(w, customer_id=None):
    if not customer_id:
        return ErrorText("Customer ID not provided.")
    if not w.crm.has_id(customer_id):
        return ErrorText("Customer not found.")
    w.crm = w.crm.without_id(customer_id)
    return "Customer deleted successfully."
