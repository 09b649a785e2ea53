"""A helper for tests/test_children.py. `quits.py wait`: reads stdin and never answers (a side at work);
`quits.py REASON`: fails as it starts, saying REASON on stderr, as a side given a bad setting does."""
import sys

if sys.argv[1] == "wait":
    sys.stdin.read()
else:
    print("an earlier line", file=sys.stderr)
    sys.exit(sys.argv[1])
