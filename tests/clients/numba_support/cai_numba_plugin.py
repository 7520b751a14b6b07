"""pytest plugin for numba-cuda's own tests over cai's simulated driver (scripts/client-tests.sh).

numba-cuda's test classes use a fixture, ``initialize_from_pytest_config``, that its repository's
conftest.py provides and its wheel does not ship; this plugin provides it (the one option it
reads, ``--dump-failed-filechecks``, stays off unless given). numba's IPC tests give a spawned
child 4 seconds to start, import numba and answer; on a shared CI machine that is not always
enough, so the plugin raises that one limit (CAI_NUMBA_IPC_TIMEOUT, default 120 s): a slow
child then still passes, a broken one still fails. It also marks the tests listed in
numba_expected_failures.txt as expected failures (strict: a listed test that passes fails the run,
so the list stays exact), each with the reason written beside it; a reason that starts with
"skip: " skips the test instead (a test made of subtests, which an expected failure cannot cover).
"""

from __future__ import annotations

from pathlib import Path

import os
import sys

import pytest

EXPECTED_FAILURES = Path(__file__).with_name("numba_expected_failures.txt")


def read_expected_failures(path: Path = EXPECTED_FAILURES) -> dict[str, str]:
    """Test id (as pytest prints it, relative to the numba/cuda/tests package) -> reason."""
    failures: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        test_id, sep, reason = line.partition(" -- ")
        if not sep or not reason.strip():
            raise ValueError(f"{path}:{number}: expected '<test id> -- <reason>', got {line!r}")
        failures[test_id.strip()] = reason.strip()
    return failures


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--dump-failed-filechecks",
        action="store_true",
        help="numba-cuda's option: write reproducers of failing FileCheck tests.",
    )


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request: pytest.FixtureRequest) -> None:
    request.cls._dump_failed_filechecks = request.config.getoption("dump_failed_filechecks")


def _short_id(nodeid: str) -> str:
    # ".../numba/cuda/tests/cudadrv/test_x.py::Class::test" -> "cudadrv/test_x.py::Class::test"
    marker = "numba/cuda/tests/"
    at = nodeid.find(marker)
    return nodeid[at + len(marker):] if at >= 0 else nodeid


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for name, module in list(sys.modules.items()):
        if name.endswith("cuda.tests.cudapy.test_ipc") and hasattr(module, "FUTURE_TIMEOUT"):
            module.FUTURE_TIMEOUT = float(os.environ.get("CAI_NUMBA_IPC_TIMEOUT", "120"))
    failures = read_expected_failures()
    seen = set()
    for item in items:
        reason = failures.get(_short_id(item.nodeid))
        if reason is not None:
            seen.add(_short_id(item.nodeid))
            if reason.startswith("skip: "):
                # Tests made of subtests: an expected failure cannot cover subtests.
                item.add_marker(pytest.mark.skip(reason=reason[len("skip: "):]))
            else:
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    config._cai_unmatched_failures = sorted(set(failures) - seen)  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    unmatched = getattr(config, "_cai_unmatched_failures", [])
    if unmatched:
        terminalreporter.write_line(
            f"numba_expected_failures.txt lists {len(unmatched)} test(s) not collected:"
        )
        for test_id in unmatched:
            terminalreporter.write_line(f"  {test_id}")
