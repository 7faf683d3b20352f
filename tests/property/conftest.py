"""Prints the statistics the property tests collected (``property_support``) at the end of a run;
the ``no_local_constants`` fixture, for tests whose fixed example sequence must not depend on what
ran before them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import Constants
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


@pytest.fixture(scope="module")
def no_local_constants() -> Iterator[None]:
    """Hypothesis draws some integers (about 1 in 20) from the constants of the project's modules
    imported so far (``hypothesis.internal.conjecture.providers``, 6.13x on): a derandomized test's
    examples then depend on which tests ran before it in the session (a file run alone imports fewer
    modules than the whole suite). Without that pool (and the cache derived from it, emptied before
    and after), the same seed gives the same examples in any order."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(providers, "_get_local_constants", Constants)
        providers.CONSTANTS_CACHE.cache.clear()
        yield
    providers.CONSTANTS_CACHE.cache.clear()
