"""``python -m artifacts NAME [--lock]``: fetch a pinned list of jars into the project's cache."""

from __future__ import annotations

import argparse
import sys

from artifacts.maven import FetchError, fetch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m artifacts", description=__doc__)
    parser.add_argument("name", help="a list of this package, e.g. kafka")
    parser.add_argument("--lock", action="store_true", help="write the lock from what Maven resolves")
    args = parser.parse_args(argv)
    try:
        lib = fetch(args.name, lock=args.lock)
    except FetchError as exc:
        print(f"artifacts: {exc}", file=sys.stderr)
        return 1
    print(f"artifacts: {args.name}: {len(list(lib.glob('*.jar')))} jars in {lib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
