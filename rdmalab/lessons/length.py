"""How long each lesson takes, by the instructor guide's estimate (notebooks/README.md): reading at 120
words a minute (the markdown cells' words), a code cell 20 s plus 5 s a line (lines that are neither
blank nor a comment), 6 minutes an exercise (each exercises.attempt call), plus what the lesson's cells
take to run outside QUICK mode, as the guide's table records it (each lesson run once under papermill
with QUICK=False, and timed). Every lesson must fit LIMIT_MIN minutes: tests/test_lengths.py.

    python -m rdmalab.lessons.length [NOTEBOOKS_DIR]     # a table: reading, code, exercises, run, total
"""
import glob
import json
import os
import re
import sys

from rdmalab.lessons.series import NOTEBOOKS, slug_of

WORDS_PER_MIN, CELL_S, LINE_S, EXERCISE_MIN, LIMIT_MIN = 120, 20, 5, 6, 25


def estimate(path):
    """{"reading", "code", "exercises"} in minutes for one notebook, and "total" without its run time."""
    with open(path) as f:
        cells = json.load(f)["cells"]
    words = seconds = exercises = 0
    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            words += len(text.split())
        elif cell["cell_type"] == "code":
            code = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
            seconds += CELL_S + LINE_S * len(code)
            exercises += text.count("exercises.attempt(")
    out = {"reading": words / WORDS_PER_MIN, "code": seconds / 60, "exercises": exercises * EXERCISE_MIN}
    out["total"] = sum(out.values())
    return out


def run_times(readme=None):
    """{slug: seconds} from the guide's table, whose rows begin "| NN-slug |" and whose column headed
    "run" holds the measured run time outside QUICK, as "35 s"."""
    readme = readme or os.path.join(NOTEBOOKS, "README.md")
    with open(readme) as f:
        rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in f if line.startswith("|")]
    header = next(row for row in rows if row and row[0] == "lesson")
    column = next(i for i, name in enumerate(header) if name.startswith("run"))
    times = {}
    for row in rows:
        if re.fullmatch(r"\d+-[a-z-]+", row[0]):
            seconds = re.fullmatch(r"(\d+(?:\.\d+)?) s", row[column])
            if not seconds:
                raise ValueError(f"{readme}: lesson {row[0]}'s run time is {row[column]!r}: write the measured "
                                 "seconds, as '35 s'")
            times[slug_of(row[0])] = float(seconds[1])
    return times


def lengths(directory=NOTEBOOKS):
    """[(notebook file name, estimate with "run" and "total" including it)] for every lesson in `directory`."""
    runs = run_times(os.path.join(directory, "README.md"))
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.ipynb"))):
        if slug_of(path) not in runs:
            raise ValueError(f"{directory}/README.md records no run time for {os.path.basename(path)}: run it once "
                             "under papermill with QUICK=False, time it, and add it to the table")
        e = estimate(path)
        e["run"] = runs[slug_of(path)] / 60
        e["total"] += e["run"]
        out.append((os.path.basename(path), e))
    return out


def main(argv=sys.argv[1:]):
    rows = lengths(*argv[:1])
    print(f"{'lesson':<32} {'reading':>8} {'code':>6} {'exercise':>9} {'run':>6} {'total':>6}  (minutes)")
    for name, e in rows:
        flag = "" if e["total"] <= LIMIT_MIN else f"  over {LIMIT_MIN}"
        print(f"{name:<32} {e['reading']:8.1f} {e['code']:6.1f} {e['exercises']:9.0f} {e['run']:6.1f} "
              f"{e['total']:6.1f}{flag}")
    print(f"{'all':<32} {'':>8} {'':>6} {'':>9} {'':>6} {sum(e['total'] for _, e in rows):6.1f}")
    return 0 if all(e["total"] <= LIMIT_MIN for _, e in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
