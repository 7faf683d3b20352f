"""Prints the statistics the property tests collected (``property_support``) at the end of a run."""

from __future__ import annotations

import pytest
from property_support import SUMMARY, TALLIES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLIES and not SUMMARY:
        return
    terminalreporter.section("property test statistics")
    for name, counter in sorted(TALLIES.items()):
        for key, value in sorted(counter.items()):
            terminalreporter.write_line(f"{name}: {key}: {value}")
    for line in SUMMARY:
        terminalreporter.write_line(line)
