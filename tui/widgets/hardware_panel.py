"""Hardware at a glance: GPU and VRAM (from `appliance doctor --json`), CPU and RAM (from /proc)."""
from __future__ import annotations

from typing import Any

from rich.table import Table
from textual.widgets import Static


def gpu_line(report: dict[str, Any]) -> str:
    """'NVIDIA H200 · 3.1/139.0 GiB' or why there is no GPU."""
    gpu = report.get("gpu")
    if not gpu:
        return "asking the engine…" if not report else "unknown"
    used, total = report.get("vram_used_gib"), report.get("vram_total_gib")
    if isinstance(used, (int, float)) and isinstance(total, (int, float)):
        return f"{gpu} · VRAM {used:.1f}/{total:.1f} GiB"
    return str(gpu)


def ram_line(stats: dict[str, Any]) -> str:
    if "ram_total_gib" not in stats:
        return "unknown"
    return f"{stats['ram_used_gib']:.1f}/{stats['ram_total_gib']:.1f} GiB"


class HardwarePanel(Static):
    """Set `report` (doctor) and `stats` (host) to redraw."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report: dict[str, Any] = {}
        self.stats: dict[str, Any] = {}

    def show(self, report: dict[str, Any] | None = None, stats: dict[str, Any] | None = None) -> None:
        if report is not None:
            self.report = report
        if stats is not None:
            self.stats = stats
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold")
        table.add_column()
        table.add_row("GPU", gpu_line(self.report))
        cpu = self.stats.get("cpu", "…")
        table.add_row("CPU", f"{cpu} ×{self.stats.get('cpus', '?')}")
        table.add_row("RAM", ram_line(self.stats))
        for warning in self.report.get("version_warnings") or []:
            if warning != "none":
                table.add_row("[yellow]versions[/]", str(warning))
        if "error" in self.report:
            table.add_row("engine", f"[red]{self.report['error']}[/]")
        self.update(table)
