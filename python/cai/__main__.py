"""python -m cai demo: the producer/consumer examples of the CAI v3 document."""

import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m cai demo\n\nRuns the two examples of the CUDA Array Interface v3 "
              "document on the best available backend (CUDA, else the CPU simulator).")
        return 0 if argv else 2
    if argv[0] == "demo":
        from ._demo import run

        return run()
    print(f"python -m cai: unknown command {argv[0]!r}; expected 'demo'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
