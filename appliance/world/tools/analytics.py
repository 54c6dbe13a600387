"""Analytics tools: visitor lookup, per-day counts, and create_plot (the only state change).

The visits table never changes, so the per-day counts read aggregates computed
once at load (`Base.days`). Time bounds are compared as text with the
YYYY-MM-DD visit date, inclusive, exactly as WorkBench does. Every count tool
returns a per-day mapping, never a single total.
"""
from __future__ import annotations

from appliance.world.base import load_base
from appliance.world.matching import ErrorText
from appliance.world.tools.registry import text, tool

PLOT_VALUES = (
    "total_visits",
    "session_duration_seconds",
    "user_engaged",
    "visits_direct",
    "visits_referral",
    "visits_search_engine",
    "visits_social_media",
)
PLOT_TYPES = ("bar", "line", "scatter", "histogram")
_DATE = "Date YYYY-MM-DD (compared as text, inclusive)."


def _days(time_min, time_max):
    for date, stats in load_base().days:
        if time_min and date < time_min:
            continue
        if time_max and date > time_max:
            continue
        yield date, stats


@tool(
    "analytics",
    "get_visitor_information_by_id",
    description="Get every recorded visit of one visitor (date, page views, session seconds, source, engaged).",
    properties={"visitor_id": text("The visitor's 4-digit ID, e.g. 0860.")},
    required=("visitor_id",),
)
def get_visitor_information_by_id(w, visitor_id=None):
    if not visitor_id:
        return ErrorText("Visitor ID not provided.")
    visits = load_base().visits
    found = visits.records(visits.positions_of_column("visitor_id", visitor_id))
    return found if found else ErrorText("Visitor not found.")


@tool(
    "analytics",
    "create_plot",
    description=(
        "Create a plot of website analytics between two dates. Returns the plot's file path "
        "plots/<time_min>_<time_max>_<value_to_plot>_<plot_type>.png."
    ),
    properties={
        "time_min": text("Start date, YYYY-MM-DD."),
        "time_max": text("End date, YYYY-MM-DD."),
        "value_to_plot": text("The metric to plot.", PLOT_VALUES),
        "plot_type": text("The kind of chart.", PLOT_TYPES),
    },
    required=("time_min", "time_max", "value_to_plot", "plot_type"),
    changes_state=True,
)
def create_plot(w, time_min=None, time_max=None, value_to_plot=None, plot_type=None):
    if not time_min:
        return ErrorText("Start date not provided.")
    if not time_max:
        return ErrorText("End date not provided.")
    if value_to_plot not in PLOT_VALUES:
        # WorkBench's own (misleading) message: the last four names are not the accepted values.
        return ErrorText(
            "Value to plot must be one of 'total_visits', 'session_duration_seconds', 'user_engaged', "
            "'direct', 'referral', 'search engine', 'social media'"
        )
    if plot_type not in PLOT_TYPES:
        return ErrorText("Plot type must be one of 'bar', 'line', 'scatter', or 'histogram'")
    file_path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
    w.plots = w.plots.set_row_at_label(len(w.plots), (file_path,))
    return file_path


@tool(
    "analytics",
    "total_visits_count",
    description="Number of visits on each day in the range, as {date: count} (days without visits are absent).",
    properties={"time_min": text("First " + _DATE), "time_max": text("Last " + _DATE)},
)
def total_visits_count(w, time_min=None, time_max=None):
    return {date: s.visits for date, s in _days(time_min, time_max)}


@tool(
    "analytics",
    "engaged_users_count",
    description="Number of engaged visits on each day in the range, as {date: count}.",
    properties={"time_min": text("First " + _DATE), "time_max": text("Last " + _DATE)},
)
def engaged_users_count(w, time_min=None, time_max=None):
    return {date: s.engaged for date, s in _days(time_min, time_max)}


@tool(
    "analytics",
    "traffic_source_count",
    description=(
        "Number of visits from one traffic source on each day in the range, as {date: count}. "
        "Sources: direct, referral, search engine, social media (exact). Without a source, counts all visits."
    ),
    properties={
        "time_min": text("First " + _DATE),
        "time_max": text("Last " + _DATE),
        "traffic_source": text("direct, referral, search engine or social media."),
    },
)
def traffic_source_count(w, time_min=None, time_max=None, traffic_source=None):
    if traffic_source:
        return {date: s.by_source.get(traffic_source, 0) for date, s in _days(time_min, time_max)}
    return {date: s.visits for date, s in _days(time_min, time_max)}


@tool(
    "analytics",
    "get_average_session_duration",
    description="Mean session duration in seconds on each day in the range, as {date: seconds}.",
    properties={"time_min": text("First " + _DATE), "time_max": text("Last " + _DATE)},
)
def get_average_session_duration(w, time_min=None, time_max=None):
    return {date: s.mean_session_seconds for date, s in _days(time_min, time_max)}
