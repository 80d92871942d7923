"""The test process itself, as tests/conftest.py sets it up for every test."""

from __future__ import annotations

import gc


def test_the_garbage_collector_runs_during_tests_with_the_collected_suite_frozen():
    # conftest.py turns the collector off while the suite is collected: a
    # test must find it on again (or cycles would pile up for the whole run),
    # and the collected suite frozen out of its scans
    assert gc.isenabled()
    assert gc.get_freeze_count() > 10_000
