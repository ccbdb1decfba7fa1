"""The lines ``explain`` ends with when a NaN came from parameters never initialised.

The watch of uninitialised memory (torch/rank/init_watch.py) reports, at the failing rank's first
forward, the parameters holding bytes nothing wrote since they were allocated (by ``to_empty``, an
``empty`` op), where that memory came from and the last write to a parameter that ran; and maps the
first non-finite collective input back to parameters (FSDP2's flat all_gather input). Shared by the
CLI, the shell and the TUI's explain pane (through ``site_lines``).
"""

from __future__ import annotations

from typing import Any

PARAMETERS_SHOWN_MAX = 16
SEGMENTS_SHOWN_MAX = 16


def uninitialised_lines(memory: dict[str, Any]) -> list[str]:
    """The report's lines: none when every parameter was written before the first forward and no
    collective input maps to one (``--json`` still has the report: ``uninitialised_count`` 0)."""
    report = memory.get("report") or {}
    lines: list[str] = []
    if report.get("broken"):
        lines.append(f"  uninitialised memory: not followed to the end ({report['broken']})")
    listed = list(report.get("uninitialised") or [])
    count = int(report.get("uninitialised_count", len(listed)))
    if listed:
        lines.append(
            f"  uninitialised: {count} of {report.get('parameters', '?')} parameters were never written "
            f"after their memory was allocated{_where(report, listed)}:"
        )
        lines += [f"    {_parameter(item, report)}" for item in listed[:PARAMETERS_SHOWN_MAX]]
        if count > PARAMETERS_SHOWN_MAX:
            lines.append(f"    ... and {count - PARAMETERS_SHOWN_MAX} more (--json lists {len(listed)})")
        last = report.get("last_init")
        if last:
            lines.append(
                f"  last init call that ran: {last['op']} on {last['parameter']} at {last['site'] or '?'}"
            )
        else:
            lines.append(
                "  last init call that ran: none (no parameter was written before the first forward)"
            )
    collective = memory.get("collective")
    if collective and collective.get("segments"):
        lines += _collective_lines(collective)
    return lines


def _where(report: dict[str, Any], listed: list[dict[str, Any]]) -> str:
    sites: list[dict[str, Any]] = []
    for item in listed:
        if isinstance(item.get("origin"), dict) and item["origin"] not in sites:
            sites.append(item["origin"])
    if not sites:
        return ""
    described = "; ".join(
        f"by {site['how']}() at {site['site'] or '?'}"
        if site["how"] == "to_empty"
        else f"by {site['op']} at {site['site'] or '?'}"
        for site in sites[:3]
    )
    return f" ({described})"


def _parameter(item: dict[str, Any], report: dict[str, Any]) -> str:
    shape = f"{item['dtype']}{item['shape']}"
    if item.get("local_shape") and item["local_shape"] != item["shape"]:
        shape += f" (this rank's shard {item['local_shape']})"
    text = f"{item['name']}  {shape}: {item['uninitialised']} of {item['elements']} elements never written"
    if report.get("deterministic_fill"):
        agrees = "agrees" if item.get("nan") else "shows none: a finite value is no proof of a write"
        text += f"; {item.get('nan', 0)} NaN (deterministic mode's fill {agrees})"
    return text


def _collective_lines(collective: dict[str, Any]) -> list[str]:
    how = "FSDP2's flat all_gather input" if collective.get("how") == "fsdp2" else "its memory"
    lines = [
        f"  {collective.get('op')} #{collective.get('seq')} of group {collective.get('group')}, input "
        f"{collective.get('tensor')} {collective.get('shape')}, by parameter ({how}):"
    ]
    for segment in collective["segments"][:SEGMENTS_SHOWN_MAX]:
        start = int(segment.get("start", 0))
        end = start + int(segment.get("elements", 0))
        lines.append(f"    [{start}:{end}) {segment['name']}: {segment.get('nonfinite', 0)} non-finite")
    if len(collective["segments"]) > SEGMENTS_SHOWN_MAX:
        lines.append(f"    ... and {len(collective['segments']) - SEGMENTS_SHOWN_MAX} more (--json has them)")
    return lines
