"""Runs pytest so that a test which kills the interpreter (a peer library's C++ CHECK or
std::terminate inside its own code) costs that test, not the rest of the suite.

    python tests/gpu/crash_safe_pytest.py --junitxml OUT.xml [--rounds 8] [--progress FILE] \
        -- PYTEST-ARGS...

pytest runs with the crash_progress plugin, which logs each test's start and end (in FILE, a
fresh temporary file by default). When the interpreter dies (killed by a signal), the test that
started and never ended is recorded as crashed and pytest starts again, leaving out every test
already done or crashed. The rounds' JUnit reports are folded into OUT.xml with each crashed
test as a failure. Exit status: pytest's when nothing crashed, else 1.

When this runner itself gets SIGTERM (scripts/gpu-check.sh's time limit for a step: `timeout`
signals the whole process group, pytest included), it stops, records the test that was running
as a failure ("timed out"), still writes OUT.xml from what finished, and exits with 124.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from crash_progress import read_progress  # noqa: E402


def merge(out, rounds, crashed, done):
    root = ET.Element("testsuites")
    for path in rounds:
        try:
            r = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            continue  # the round died before pytest wrote its report
        root.extend(list(r.iter("testsuite")) if r.tag == "testsuites" else [r])
    # The tests of a round that died have no report from pytest: their outcomes come from the
    # progress log (without the failure text, which is in the console log).
    reported = {(c.get("classname", ""), c.get("name")) for c in root.iter("testcase")}
    lost = ET.SubElement(root, "testsuite", name="finished-before-a-crash")
    for nodeid, outcome in done.items():
        path, _, name = nodeid.rpartition("::")
        module = path.replace("/", ".").removesuffix(".py")
        if any(n == name and (c == module or c.endswith("." + module) or module.endswith(c))
               for c, n in reported):
            continue
        case = ET.SubElement(lost, "testcase", classname="", name=nodeid)
        if outcome == "failed":
            ET.SubElement(case, "failure", message="failed (see the console log)")
        elif outcome == "skipped":
            ET.SubElement(case, "skipped")
    suite = ET.SubElement(root, "testsuite", name="crashed", tests=str(len(crashed)))
    for nodeid, status in crashed.items():
        case = ET.SubElement(suite, "testcase", classname="", name=nodeid)
        why = (f"{status}: the step's time limit ended the run in this test"
               if str(status).startswith("timed out")
               else f"the interpreter died (exit status {status})")
        ET.SubElement(case, "failure", message=why)
    ET.ElementTree(root).write(out)


class Terminated(Exception):
    """SIGTERM reached this runner: the step's time is up."""


def _terminated(signum, frame):
    raise Terminated()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--junitxml", required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--progress", help="the progress log (default: a fresh temporary file)")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    args = [x for x in a.pytest_args if x != "--"]
    work = tempfile.mkdtemp(prefix="crash-safe-pytest-")
    progress = a.progress or os.path.join(work, "progress.txt")
    if a.progress and os.path.exists(progress):
        os.remove(progress)  # a log left by an earlier run would skip its tests
    env = dict(os.environ, CAI_TEST_PROGRESS=progress,
               PYTHONPATH=os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")])))
    rounds, rc, child = [], 0, None
    signal.signal(signal.SIGTERM, _terminated)
    try:
        for n in range(1, a.rounds + 1):
            xml = os.path.join(work, f"round-{n}.xml")
            rounds.append(xml)
            child = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "crash_progress",
                                      f"--junitxml={xml}", *args], env=env)
            rc = child.wait()
            child = None
            if rc >= 0 and rc < 128:
                break  # pytest ended by itself (a shell reports a signal as 128 + n)
            unfinished, _, _ = read_progress(progress)
            if not unfinished:
                break  # died outside any test: nothing to skip past
            with open(progress, "a") as f:
                f.write(f"crashed\t{unfinished[-1]}\t{rc}\n")
            print(f"crash_safe_pytest: the interpreter died (exit status {rc}) in "
                  f"{unfinished[-1]}; going on past it", flush=True)
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if child is not None:
            child.terminate()  # usually signalled already, with the whole process group
            try:
                child.wait(timeout=3)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        unfinished, _, _ = read_progress(progress)
        if unfinished:
            with open(progress, "a") as f:
                f.write(f"crashed\t{unfinished[-1]}\ttimed out (SIGTERM)\n")
        _, crashed, done = read_progress(progress)
        merge(a.junitxml, rounds, crashed, done)
        print(f"crash_safe_pytest: stopped by SIGTERM (time limit) after {len(done)} tests"
              + (f", in {unfinished[-1]}" if unfinished else ""), flush=True)
        return 124
    _, crashed, done = read_progress(progress)
    merge(a.junitxml, rounds, crashed, done)
    if crashed:
        print("crash_safe_pytest: crashed: " + ", ".join(crashed), flush=True)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
