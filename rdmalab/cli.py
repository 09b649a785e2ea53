"""The `rdmalab` command: `rdmalab doctor [--json]`."""
import argparse
import sys

from .errors import ProviderError


def parser():
    top = argparse.ArgumentParser(prog="rdmalab", description="Hands-on RDMA for distributed AI training.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doc = commands.add_parser("doctor", help="what this machine offers for RDMA, and the next step")
    doc.add_argument("--json", action="store_true", help="print the findings as JSON")
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        if args.command == "doctor":
            from .diagnose import main as run
        return run(args)
    except ProviderError as error:
        print(f"rdmalab: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
