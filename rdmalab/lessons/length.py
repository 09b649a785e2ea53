"""How long each lesson takes, by the instructor guide's estimate (notebooks/README.md). A lesson's time is

- its prose, read at WORDS_PER_MIN (the markdown cells' words);
- its code, CELL_S a code cell plus LINE_S a line (lines that are neither blank nor a comment);
- its outputs, as a full run shows them: ROW_S a table row, CHART_S a chart, LINE_OUT_S a printed line,
  WIDGET_S a widget (a quiz, a "Show solution" button; a widget that shows
  images, as the dashboard does, counts as its charts). Lessons are committed without outputs,
  so these are counted from a run: each lesson run once under papermill with QUICK=False (`--measure`),
  the counts recorded in the guide's table ("outputs": "14 rows, 3 charts, 22 lines, 2 widgets");
- its exercise, EXERCISE_MIN for the first attempt and RETRY_MIN for one retry (the check's feedback read,
  the code changed, run again: half an attempt, since the feedback names what was wrong);
- its run: what its cells take outside QUICK mode, timed in the same run (the guide's "run" column).

Every lesson must fit LIMIT_MIN minutes (tests/test_lengths.py): a lesson over it is split, not cut.

    python -m rdmalab.lessons.length [NOTEBOOKS_DIR]      # a table: each part of the estimate, and the total
    python -m rdmalab.lessons.length --measure [SLUG ...] # run these lessons (default: all), in the series' order,
                                                          # under papermill with QUICK=False, and record their run
                                                          # time, outputs and estimate in the guide's table

--measure runs the lessons in one learner folder of its own (RDMALAB_LEARNER_DIR), so a lesson that reads
what earlier ones recorded (the-answer) shows its full outputs only when they are measured with it:
`--measure socket-path one-sided allreduce on-the-wire when-it-breaks the-answer`.
"""
import glob
import html
import json
import math
import os
import re
import sys
import tempfile
import time

from rdmalab.lessons.series import LESSONS, NOTEBOOKS, notebook, slug_of

WORDS_PER_MIN, CELL_S, LINE_S = 120, 20, 5
ROW_S, CHART_S, LINE_OUT_S, WIDGET_S = 6, 30, 3, 15
EXERCISE_MIN, RETRY_MIN, LIMIT_MIN = 6, 3, 30
OUTPUT_KINDS = ("rows", "charts", "lines", "widgets")
OUTPUT_S = {"rows": ROW_S, "charts": CHART_S, "lines": LINE_OUT_S, "widgets": WIDGET_S}
TEXT_WIDTH = 100   # characters a printed line holds in the lessons' output (HTML text is counted in such lines)


def estimate(path, outputs=None):
    """{"reading", "code", "outputs", "exercises"} in minutes for one notebook, and "total" without its run
    time. `outputs` ({"rows", "charts", "lines", "widgets"}, counted from a run) defaults to nothing."""
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
    out = {"reading": words / WORDS_PER_MIN, "code": seconds / 60, "outputs": reading_outputs(outputs or {}),
           "exercises": exercises * (EXERCISE_MIN + RETRY_MIN)}
    out["total"] = sum(out.values())
    return out


def reading_outputs(counts):
    """Minutes to read outputs counted as {"rows", "charts", "lines", "widgets"}."""
    return sum(OUTPUT_S[kind] * counts.get(kind, 0) for kind in OUTPUT_KINDS) / 60


def count_outputs(nb):
    """What an executed notebook (a dict, as nbformat's JSON) shows: {"rows": table rows, "charts": images
    (an HTML output's <img> too), "lines": printed lines (stdout, plain text, and the text of HTML outputs
    that hold no table, at TEXT_WIDTH characters a line), "widgets": widget views}. Table rows are the <tr>
    that hold a <td> (a header row is read with its table); an output offered as HTML and as text counts once."""
    counts = dict.fromkeys(OUTPUT_KINDS, 0)
    state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    models = state.get("state", {})
    for cell in nb["cells"]:
        for out in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            if out["output_type"] == "stream":
                counts["lines"] += _lines("".join(out["text"]))
                continue
            if out["output_type"] == "error":
                counts["lines"] += len(out.get("traceback", []))
                continue
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                images = _images(models, data["application/vnd.jupyter.widget-view+json"].get("model_id"))
                counts["charts" if images else "widgets"] += images or 1   # a dashboard is read as its charts
            elif any(kind.startswith("image/") for kind in data):
                counts["charts"] += 1
            elif "text/html" in data:
                page = "".join(data["text/html"])
                rows = len(re.findall(r"<tr\b(?:(?!</tr>).)*<td\b", page, re.S | re.I))
                counts["rows"] += rows
                counts["charts"] += len(re.findall(r"<img\b", page, re.I))
                text = html.unescape(re.sub(r"<table\b.*?</table>", " ", page, flags=re.S | re.I))
                text = re.sub(r"<(br|p|li|h\d|div|tr)\b[^>]*>", "\n", text, flags=re.I)
                counts["lines"] += _lines(re.sub(r"<[^>]+>", "", text))
            elif "text/markdown" in data or "text/plain" in data:
                counts["lines"] += _lines("".join(data.get("text/markdown", data.get("text/plain", ""))))
    return counts


def _images(models, model_id, seen=None):
    """How many images (ipywidgets' Image) a widget shows, its children's included (papermill keeps the
    widgets' state in the notebook's metadata)."""
    seen = set() if seen is None else seen
    if model_id in seen or model_id not in models:
        return 0
    seen.add(model_id)
    model = models[model_id]
    state = model.get("state", {})
    children = [c.removeprefix("IPY_MODEL_") for c in state.get("children", []) if isinstance(c, str)]
    return (model.get("model_name") == "ImageModel") + sum(_images(models, c, seen) for c in children)


def _lines(text):
    return sum(max(1, math.ceil(len(line) / TEXT_WIDTH)) for line in text.splitlines() if line.strip())


def _table(readme):
    """(lines of the guide, header cells, [(line index, cells)] of the lessons' rows: "| NN-slug | ...")."""
    with open(readme) as f:
        lines = f.read().splitlines(keepends=True)
    split = lambda line: [cell.strip() for cell in line.strip().strip("|").split("|")]   # noqa: E731
    header = next(split(line) for line in lines if line.startswith("|") and split(line)[0] == "lesson")
    rows = [(i, split(line)) for i, line in enumerate(lines)
            if line.startswith("|") and re.fullmatch(r"\d+-[a-z-]+", split(line)[0])]
    return lines, header, rows


def _column(header, name):
    return next(i for i, cell in enumerate(header) if cell.startswith(name))


def run_times(readme=None):
    """{slug: seconds} from the guide's table, whose rows begin "| NN-slug |" and whose column headed
    "run" holds the measured run time outside QUICK, as "35 s"."""
    readme = readme or os.path.join(NOTEBOOKS, "README.md")
    _, header, rows = _table(readme)
    column = _column(header, "run")
    times = {}
    for _, row in rows:
        seconds = re.fullmatch(r"(\d+(?:\.\d+)?) s", row[column])
        if not seconds:
            raise ValueError(f"{readme}: lesson {row[0]}'s run time is {row[column]!r}: write the measured "
                             "seconds, as '35 s' (python -m rdmalab.lessons.length --measure does)")
        times[slug_of(row[0])] = float(seconds[1])
    return times


OUTPUTS_TEXT = re.compile(r"(\d+) rows?, (\d+) charts?, (\d+) lines?, (\d+) widgets?")


def output_counts(readme=None):
    """{slug: {"rows", "charts", "lines", "widgets"}} from the guide's column headed "outputs", as
    "14 rows, 3 charts, 22 lines, 2 widgets"."""
    readme = readme or os.path.join(NOTEBOOKS, "README.md")
    _, header, rows = _table(readme)
    column = _column(header, "outputs")
    counts = {}
    for _, row in rows:
        found = OUTPUTS_TEXT.fullmatch(row[column])
        if not found:
            raise ValueError(f"{readme}: lesson {row[0]}'s outputs are {row[column]!r}: write what a full run "
                             "shows, as '14 rows, 3 charts, 22 lines, 2 widgets' (python -m rdmalab.lessons.length "
                             "--measure counts them)")
        counts[slug_of(row[0])] = dict(zip(OUTPUT_KINDS, map(int, found.groups())))
    return counts


def outputs_text(counts):
    return ", ".join(f"{counts[k]} {k if counts[k] != 1 else k[:-1]}" for k in OUTPUT_KINDS)


def lengths(directory=NOTEBOOKS):
    """[(notebook file name, estimate with "run", and "total" including it)] for every lesson in `directory`."""
    readme = os.path.join(directory, "README.md")
    runs, outputs = run_times(readme), output_counts(readme)
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.ipynb"))):
        if slug_of(path) not in runs:
            raise ValueError(f"{readme} records no run for {os.path.basename(path)}: run `python -m "
                             f"rdmalab.lessons.length --measure {slug_of(path)}` and keep its row")
        e = estimate(path, outputs[slug_of(path)])
        e["run"] = runs[slug_of(path)] / 60
        e["total"] += e["run"]
        out.append((os.path.basename(path), e))
    return out


def measure(slugs=None, directory=NOTEBOOKS, say=print):
    """Run lessons `slugs` (default: all), in the series' order, under papermill with QUICK=False, in a learner
    folder of their own; record each one's run time (kernel start included) and outputs in the guide's
    table, with its estimate in the "time" column. Returns {slug: (seconds, counts)}."""
    found = {}
    with tempfile.TemporaryDirectory(prefix="rdmalab-measure-") as scratch:
        for slug, seconds in run_full(scratch, slugs, directory).items():
            with open(os.path.join(scratch, notebook(slug))) as f:
                found[slug] = (seconds, count_outputs(json.load(f)))
            say(f"{notebook(slug)}: {seconds:.0f} s, {outputs_text(found[slug][1])}")
    record(found, directory)
    return found


def run_full(out, slugs=None, directory=NOTEBOOKS, say=lambda line: None):
    """Run lessons `slugs` (default: all) in the series' order under papermill with QUICK=False, as one learner
    would (one learner folder of their own, in `out`, so a lesson finds what earlier ones saved), writing each
    executed lesson to `out`. Returns {slug: seconds, kernel start included}. (measure; the book, book/build.py)"""
    import papermill
    order = [slug for slug, _ in LESSONS]
    unknown = [slug for slug in slugs or () if slug not in order]
    if unknown:
        raise ValueError(f"no lesson {', '.join(unknown)}: the lessons are {', '.join(order)}")
    slugs = order if not slugs else sorted(slugs, key=order.index)
    times = {}
    learner = os.environ.get("RDMALAB_LEARNER_DIR")
    os.environ["RDMALAB_LEARNER_DIR"] = os.path.join(os.path.abspath(out), ".learner")   # the kernels inherit it (they run in notebooks/)
    try:
        for slug in slugs:
            say(f"running {notebook(slug)} (QUICK = False)")
            started = time.monotonic()
            papermill.execute_notebook(os.path.join(directory, notebook(slug)), os.path.join(out, notebook(slug)),
                                       parameters={"QUICK": False}, kernel_name="python3", cwd=directory,
                                       progress_bar=False, execution_timeout=900, start_timeout=120)
            times[slug] = time.monotonic() - started
    finally:
        if learner is None:
            del os.environ["RDMALAB_LEARNER_DIR"]
        else:
            os.environ["RDMALAB_LEARNER_DIR"] = learner
    return times


def record(found, directory=NOTEBOOKS):
    """Write {slug: (seconds, counts)} into the guide's table: the run, outputs and time columns of those rows."""
    readme = os.path.join(directory, "README.md")
    lines, header, rows = _table(readme)
    run, outputs, total = _column(header, "run"), _column(header, "outputs"), _column(header, "time")
    for i, row in rows:
        slug = slug_of(row[0])
        if slug not in found:
            continue
        seconds, counts = found[slug]
        e = estimate(os.path.join(directory, f"{row[0]}.ipynb"), counts)
        row[run], row[outputs] = f"{seconds:.0f} s", outputs_text(counts)
        row[total] = f"{e['total'] + seconds / 60:.0f} min"
        lines[i] = "| " + " | ".join(row) + " |\n"
    with open(readme, "w") as f:
        f.writelines(lines)


def main(argv=sys.argv[1:]):
    if argv[:1] == ["--measure"]:
        measure(argv[1:])
        argv = []
    rows = lengths(*argv[:1])
    print(f"{'lesson':<32} {'reading':>8} {'code':>6} {'outputs':>8} {'exercise':>9} {'run':>6} {'total':>6}  (minutes)")
    for name, e in rows:
        flag = "" if e["total"] <= LIMIT_MIN else f"  over {LIMIT_MIN} by {e['total'] - LIMIT_MIN:.1f}"
        print(f"{name:<32} {e['reading']:8.1f} {e['code']:6.1f} {e['outputs']:8.1f} {e['exercises']:9.0f} "
              f"{e['run']:6.1f} {e['total']:6.1f}{flag}")
    print(f"{'all':<32} {'':>8} {'':>6} {'':>8} {'':>9} {'':>6} {sum(e['total'] for _, e in rows):6.1f}")
    return 0 if all(e["total"] <= LIMIT_MIN for _, e in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
