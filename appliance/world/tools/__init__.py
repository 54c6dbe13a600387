"""The 27 WorkBench tools, one module per toolkit; importing this package registers them all."""
from appliance.world.tools import analytics, calendar, crm, directory, email, project_management  # noqa: F401
from appliance.world.tools.registry import TOOLS, ToolSpec

__all__ = ["TOOLS", "ToolSpec"]
