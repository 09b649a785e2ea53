"""What every benchmark does at the end: print its JSON (and write it to --out), then one line per
target saying whether it was met."""
import json
import sys


def emit(report, out=None):
    text = json.dumps(report, indent=1)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)
    for name, met in report["targets"].items():
        print(f"{'met   ' if met else 'MISSED'} {name}", file=sys.stderr)
    return 0
