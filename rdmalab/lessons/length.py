"""How long each lesson takes, by the instructor guide's estimate (notebooks/README.md). A lesson's time is

- its prose, read at WORDS_PER_MIN (the markdown cells' words);
- its code, CELL_S a code cell plus LINE_S a line (lines that are neither blank nor a comment);
- its outputs, as a full run shows them: ROW_S a table row, CHART_S a chart, LINE_OUT_S a printed line,
  WIDGET_S a widget (a quiz, a "Show solution" button; a widget that shows
  images, as the dashboard does, counts as its charts). Lessons are committed without outputs,
  so these are counted from a run: each lesson run once under papermill with QUICK=False (`--measure`),
  the counts recorded in the guide's table ("outputs": "14 rows, 3 charts, 22 lines, 2 widgets");
- its checked challenges (each `exercises.attempt(NAME, ...)`), by what the learner writes: TASK_MIN to read
  the task, run the check and read its feedback, plus WRITE_LINE_S for each line of the reference solution
  (what the learner must write: blank lines, comments and its docstring left out), and one retry at
  RETRY_SHARE of that (the feedback read, the code changed, run again: cheaper, since the feedback names
  what was wrong). A one-line answer costs about 3 minutes; 09's ring, about 11;
- its predictions (each `exercises.compare(...)`), PREDICT_MIN each: a number written down before the
  measurement, then the two read side by side and talked over;
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
TASK_MIN, WRITE_LINE_S, RETRY_SHARE, PREDICT_MIN, LIMIT_MIN = 2, 15, 0.5, 1.5, 30
OUTPUT_KINDS = ("rows", "charts", "lines", "widgets")
OUTPUT_S = {"rows": ROW_S, "charts": CHART_S, "lines": LINE_OUT_S, "widgets": WIDGET_S}
TEXT_WIDTH = 100   # characters a printed line holds in the lessons' output (HTML text is counted in such lines)


def estimate(path, outputs=None, written=None):
    """{"reading", "code", "outputs", "exercises", "predictions"} in minutes for one notebook, "challenges" (how
    many checked exercises it has) and "total" (minutes) without its run time. `outputs` ({"rows", "charts",
    "lines", "widgets"}, counted from a run) defaults to nothing; `written(name)`, the lines a learner writes
    for exercise `name`, to lines_written."""
    with open(path) as f:
        cells = json.load(f)["cells"]
    given = {code for cell in cells if cell["cell_type"] == "code" for line in "".join(cell["source"]).splitlines()
             for code in (line.strip(), line.split("  #")[0].strip())}   # a skeleton's line, with or without its comment
    written = written or (lambda name: lines_written(name, given))
    words = seconds = exercises = challenges = predictions = 0
    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            words += len(text.split())
        elif cell["cell_type"] == "code":
            code = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
            seconds += CELL_S + LINE_S * len(code)
            for name in re.findall(r"exercises\.attempt\(\s*[\"']([^\"']+)[\"']", text):
                challenges += 1
                exercises += challenge_minutes(written(name))
            predictions += text.count("exercises.compare(")
    out = {"reading": words / WORDS_PER_MIN, "code": seconds / 60, "outputs": reading_outputs(outputs or {}),
           "exercises": exercises, "predictions": predictions * PREDICT_MIN}
    out["total"] = sum(out.values())
    out["challenges"] = challenges
    return out


def challenge_minutes(lines):
    """Minutes a checked challenge takes whose answer is `lines` lines: one attempt and one retry."""
    attempt = TASK_MIN + lines * WRITE_LINE_S / 60
    return attempt * (1 + RETRY_SHARE)


def lines_written(name, given=()):
    """The lines a learner writes for exercise `name`: its reference solution as the lesson shows it
    (exercises.solution_source), without the `def` lines, docstrings, comments and blank lines, and
    without the lines the lesson already gives (`given`: its code lines, stripped; a skeleton's
    `p, r = comm.size, comm.rank` is read, not written)."""
    import ast
    from rdmalab.lessons import exercises
    if name not in exercises.REGISTRY:
        raise KeyError(f"a lesson calls exercises.attempt({name!r}), and no module in rdmalab/lessons/checks registers "
                       "it: register it there (@exercise and @reference), or correct the name")
    source = exercises.solution_source(name)
    skipped = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skipped.add(node.lineno)
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                    and isinstance(node.body[0].value.value, str):
                skipped.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    return sum(1 for number, line in enumerate(source.splitlines(), 1)
               if number not in skipped and line.strip() and not line.strip().startswith("#")
               and line.split("  #")[0].strip() not in given and line.strip() not in given)


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


def lengths(directory=NOTEBOOKS, written=None):
    """[(notebook file name, estimate with "run", and "total" including it)] for every lesson in `directory`."""
    readme = os.path.join(directory, "README.md")
    runs, outputs = run_times(readme), output_counts(readme)
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.ipynb"))):
        if slug_of(path) not in runs:
            raise ValueError(f"{readme} records no run for {os.path.basename(path)}: run `python -m "
                             f"rdmalab.lessons.length --measure {slug_of(path)}` and keep its row")
        e = estimate(path, outputs[slug_of(path)], written)
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


def record(found, directory=NOTEBOOKS, written=None):
    """Write {slug: (seconds, counts)} into the guide's table (the run, outputs and time columns of those rows)
    and each lesson's time into its opening cell (state_time)."""
    readme = os.path.join(directory, "README.md")
    lines, header, rows = _table(readme)
    run, outputs, total = _column(header, "run"), _column(header, "outputs"), _column(header, "time")
    for i, row in rows:
        slug = slug_of(row[0])
        if slug not in found:
            continue
        seconds, counts = found[slug]
        e = estimate(os.path.join(directory, f"{row[0]}.ipynb"), counts, written)
        row[run], row[outputs] = f"{seconds:.0f} s", outputs_text(counts)
        row[total] = f"{e['total'] + seconds / 60:.0f} min"
        lines[i] = "| " + " | ".join(row) + " |\n"
        state_time(os.path.join(directory, f"{row[0]}.ipynb"), round(e["total"] + seconds / 60))
    with open(readme, "w") as f:
        f.writelines(lines)


def state_time(path, minutes):
    """Write `minutes` into the lesson's opening cell, where it says "(29 minutes)": the time a learner is
    told is the guide's."""
    with open(path) as f:
        nb = json.load(f)
    opening = nb["cells"][0]
    text = "".join(opening["source"])
    told = re.sub(r"\(\d+ minutes\)", f"({minutes} minutes)", text, count=1)
    if told != text:
        opening["source"] = told.splitlines(keepends=True)
        with open(path, "w") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")


def main(argv=sys.argv[1:]):
    if argv[:1] == ["--measure"]:
        measure(argv[1:])
        argv = []
    rows = lengths(*argv[:1])
    print(f"{'lesson':<32} {'reading':>8} {'code':>6} {'outputs':>8} {'challenges':>11} {'predictions':>12} "
          f"{'run':>6} {'total':>6}  (minutes)")
    for name, e in rows:
        flag = "" if e["total"] <= LIMIT_MIN else f"  over {LIMIT_MIN} by {e['total'] - LIMIT_MIN:.1f}"
        print(f"{name:<32} {e['reading']:8.1f} {e['code']:6.1f} {e['outputs']:8.1f} "
              f"{e['exercises']:7.1f} ({e['challenges']}) {e['predictions']:12.1f} {e['run']:6.1f} {e['total']:6.1f}{flag}")
    print(f"{'all':<32} {'':>8} {'':>6} {'':>8} {'':>11} {'':>12} {'':>6} {sum(e['total'] for _, e in rows):6.1f}")
    return 0 if all(e["total"] <= LIMIT_MIN for _, e in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
