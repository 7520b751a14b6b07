"""pytest plugin of tests/gpu/crash_safe_pytest.py: with CAI_TEST_PROGRESS naming a file, writes
each test's start and end to it (tab-separated: node ids may hold spaces) and leaves out the
tests it lists as done or crashed, so that a run restarted after the interpreter died goes on
past the test that killed it."""

import os

_PROGRESS = os.environ.get("CAI_TEST_PROGRESS")


def read_progress(path):
    """(node ids started and not ended, in order; {crashed node id: exit status};
    {done node id: outcome})."""
    started, crashed, done = {}, {}, {}
    if not os.path.exists(path):
        return [], crashed, done
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 2:
                continue
            kind, nodeid = parts[0], parts[1]
            if kind == "start":
                started[nodeid] = True
            elif kind == "done":
                started.pop(nodeid, None)
                done[nodeid] = parts[2] if len(parts) > 2 else "passed"
            elif kind == "crashed":
                started.pop(nodeid, None)
                crashed[nodeid] = parts[2] if len(parts) > 2 else "?"
    return list(started), crashed, done


def _write(kind, nodeid):
    # No fsync: what a dying process wrote is in the page cache and survives it.
    with open(_PROGRESS, "a") as f:
        f.write(f"{kind}\t{nodeid}\n")


def pytest_collection_modifyitems(config, items):
    if not _PROGRESS:
        return
    _, crashed, done = read_progress(_PROGRESS)
    seen = set(done) | set(crashed)
    if seen:
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid in seen])
        items[:] = [i for i in items if i.nodeid not in seen]


_outcome = {}  # node id -> the worst outcome of its phases so far


def pytest_runtest_logstart(nodeid, location):
    if _PROGRESS:
        _write("start", nodeid)


def pytest_runtest_logreport(report):
    if _PROGRESS and report.outcome != "passed":
        if _outcome.get(report.nodeid) != "failed":
            _outcome[report.nodeid] = report.outcome


def pytest_runtest_logfinish(nodeid, location):
    if _PROGRESS:
        _write("done", f"{nodeid}\t{_outcome.pop(nodeid, 'passed')}")
