"""The book: every lesson as it ran on soft0 (QUICK = False), beside the instructors' guide and the docs, as a
static site anyone can read before spending three and a half hours on the series (make book).

    python book/build.py [--out DIR] [--reuse]      (default DIR: out/book; the site: DIR/html/index.html)

1. Runs every lesson in order, as one learner would (rdmalab.lessons.length.run_full), into DIR/src/notebooks;
   --reuse keeps the lessons a previous build ran (to rebuild the pages only).
2. Labels each lesson's outputs with the device and the machine that produced them: a banner at the top,
   and a line under each cell's outputs.
3. Turns each widget into its static fallback: what it showed when the lesson ran (charts, tables, text,
   controls drawn disabled), from the widget state papermill saved, with a line saying it needs a kernel.
   A book has no kernel, and a widget's own view would stay blank.
4. Copies the guide (notebooks/README.md) and docs/ beside them in the repository's layout, so their
   relative links hold; a link to a file the book does not hold (source code) becomes its plain text.
5. Builds the HTML with Jupyter Book (pip: jupyter-book, the lab's `book` extra) into DIR/html.
"""
import argparse
import base64
import datetime
import html
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rdmalab.lessons import length, series   # noqa: E402

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
KERNEL_NOTE = ("An interactive widget, shown as it was when the lesson ran: run the lesson in JupyterLab "
               "(make lab, or the container image) to use it.")
BOXES = {"VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel", "AccordionModel", "TabModel", "StackModel"}


def machine():
    """The machine that ran the lessons, as one line: CPU model and count, OS, Python."""
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cpus = len(os.sched_getaffinity(0))
    return (f"{cpus} CPU{'s' if cpus > 1 else ''}{' (' + model + ')' if model else ''}, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")


def device():
    """The RDMA device the lessons ran on, as the doctor names it."""
    out = subprocess.run([sys.executable, "-m", "rdmalab", "doctor", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    report = json.loads(out.stdout)
    name = report["devices"][0]["name"] if report["devices"] else "no device"
    if report["provider"] == "soft":
        return f"{name}, rdmalab's emulated NIC ({report.get('soft_link', {}).get('link', 'shm')} link)"
    return f"{name} through pyverbs {report['pyverbs']}"


def git_commit():
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() or "unknown"


# ---------------------------------------------------------------------------------------------- widgets

def static_widget(models, model_id, seen=None):
    """HTML for widget `model_id` as it was when saved: boxes hold their children, images and HTML show
    what they showed, controls are drawn disabled with their values. Hidden widgets (a solution not yet
    revealed) stay hidden."""
    seen = set() if seen is None else seen
    model = models.get(model_id)
    if model is None or model_id in seen:
        return ""
    seen.add(model_id)
    name, state = model["model_name"], model.get("state", {})
    layout = models.get(str(state.get("layout", "")).removeprefix("IPY_MODEL_"), {}).get("state", {})
    if layout.get("display") == "none" or layout.get("visibility") == "hidden":
        return ""
    label = html.escape(str(state.get("description", "")))
    labelled = (lambda body: f"<span class='rdmalab-widget-label'>{label}</span> {body}" if label else body)
    if name in BOXES:
        inner = "".join(static_widget(models, c.removeprefix("IPY_MODEL_"), seen) for c in state.get("children", []))
        direction = "row" if name == "HBoxModel" else "column"
        return f"<div class='rdmalab-widget-box' style='display:flex;flex-direction:{direction};gap:0.5em'>{inner}</div>"
    if name == "ImageModel":
        data = next((b["data"] for b in model.get("buffers", []) if b.get("path") == ["value"]), None)
        if data is None:
            return ""
        return f"<img class='rdmalab-widget-image' alt='chart' src='data:image/{state.get('format', 'png')};base64,{data}'>"
    if name in ("HTMLModel", "HTMLMathModel"):
        return labelled(f"<div>{state.get('value', '')}</div>")
    if name == "LabelModel":
        return labelled(f"<span>{html.escape(str(state.get('value', '')))}</span>")
    if name == "OutputModel":
        return "".join(static_output(o) for o in state.get("outputs", []))
    if name == "ButtonModel":
        return f"<button disabled>{label}</button>"
    if name in ("IntProgressModel", "FloatProgressModel"):
        return labelled(f"<progress value='{state.get('value', 0)}' max='{state.get('max', 100)}'></progress>")
    if name == "CheckboxModel":
        return f"<label><input type='checkbox' disabled{' checked' if state.get('value') else ''}> {label}</label>"
    if name in ("TextareaModel", "TextModel"):
        return labelled(f"<pre>{html.escape(str(state.get('value', '')))}</pre>")
    options = state.get("_options_labels")
    if options is not None:   # Dropdown, RadioButtons, ToggleButtons, selection sliders: the option(s) chosen
        index = state.get("index")
        chosen = [options[i] for i in (index if isinstance(index, list) else [index]) if isinstance(i, int)]
        return labelled(f"<code>{html.escape(' .. '.join(chosen))}</code>")
    if "value" in state:   # sliders, number fields
        return labelled(f"<code>{html.escape(str(state['value']))}</code>")
    return ""


def static_output(output):
    """HTML for one output kept inside an Output widget."""
    data = output.get("data", {})
    if output.get("output_type") == "stream":
        return f"<pre>{html.escape(''.join(output.get('text', '')))}</pre>"   # (a string, or a list of lines)
    if "image/png" in data:
        return f"<img src='data:image/png;base64,{''.join(data['image/png']).strip()}'>"
    if "text/html" in data:
        return "".join(data["text/html"])
    if "text/plain" in data:
        return f"<pre>{html.escape(''.join(data['text/plain']))}</pre>"
    return ""


# ---------------------------------------------------------------------------------------------- pages

def as_book_page(nb, label, in_book):
    """The executed lesson `nb` made ready for the book, in place: labelled, and its widgets made static."""
    models = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    ran_on = {"output_type": "display_data", "metadata": {},
              "data": {"text/html": f"<p class='rdmalab-ran-on'>ran on {html.escape(label)}</p>",
                       "text/plain": f"ran on {label}"}}
    nb["cells"] = [c for c in nb["cells"] if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = without_broken_links("".join(cell["source"]), "notebooks", in_book)
        if cell["cell_type"] != "code" or not cell.get("outputs"):
            continue
        for output in cell["outputs"]:
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view:
                shown = static_widget(models, view["model_id"])
                output["data"] = {"text/html": f"<div class='rdmalab-widget'>{shown}"
                                               f"<p class='rdmalab-widget-note'>{KERNEL_NOTE}</p></div>",
                                  "text/plain": KERNEL_NOTE}
        cell["outputs"].append(ran_on)
    nb.get("metadata", {}).pop("widgets", None)   # (its state is drawn above; the book has no widget manager)
    return nb


LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def without_broken_links(text, folder, in_book):
    """`text` (Markdown in `folder` of the book) with each relative link to a file the book does not hold
    (`in_book`: its files, relative to its root) made its plain text: the source code the docs point to is in the repository, not in the book."""
    def keep_or_plain(match):
        bang, words, target = match.groups()
        if bang or re.match(r"[a-z]+:", target) or target.startswith("#"):
            return match.group(0)
        path = os.path.normpath(os.path.join(folder, target.split("#")[0]))
        return match.group(0) if path in in_book else f"{words} (`{path}` in the repository)"
    return LINK.sub(keep_or_plain, text)


COURSE = {"before": ["docs/prerequisites"],                        # before the lessons
          "instructors": ["docs/instructor-notes"],                 # after the guide (notebooks/README)
          "reference": ["docs/glossary"]}                           # after the instructors' pages


def chapters(files):
    return [f"  - file: {f}" for f in files]


def toc(lessons):
    """_toc.yml: what a learner needs first, the lessons, the instructors' pages, the glossary, then every other
    page of docs/ ("How it works")."""
    placed = {f for files in COURSE.values() for f in files}
    lines = ["# The book's pages, in order (written by book/build.py)", "format: jb-book", "root: intro", "parts:",
             "- caption: Before you start", "  chapters:", *chapters(COURSE["before"]),
             "- caption: The lessons, as they ran", "  chapters:"]
    lines += chapters(f"notebooks/{name.removesuffix('.ipynb')}" for name in lessons)
    lines += ["- caption: For instructors", "  chapters:",
              *chapters(["notebooks/README", *COURSE["instructors"], "workshop/README"]),
              "- caption: Reference", "  chapters:", *chapters(COURSE["reference"]),
              "- caption: How it works", "  chapters:"]
    lines += chapters(f"docs/{name.removesuffix('.md')}" for name in sorted(os.listdir(os.path.join(ROOT, "docs")))
                      if name.endswith(".md") and f"docs/{name.removesuffix('.md')}" not in placed)
    return "\n".join(lines) + "\n"


def build(out, reuse=False, say=print):
    started = time.monotonic()
    src, site = os.path.join(out, "src"), os.path.join(out, "html")
    ran = os.path.join(out, "ran")   # the executed lessons, as papermill wrote them
    lessons = [series.notebook(slug) for slug, _ in series.LESSONS]
    if not (reuse and all(os.path.exists(os.path.join(ran, n)) for n in lessons)):
        shutil.rmtree(ran, ignore_errors=True)
        os.makedirs(ran)
        times = length.run_full(ran, say=say)
        say(f"ran {len(times)} lessons in {sum(times.values()):.0f} s")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(os.path.join(src, "notebooks"))
    shutil.copytree(os.path.join(ROOT, "docs"), os.path.join(src, "docs"))
    os.makedirs(os.path.join(src, "workshop"))
    in_book = {"notebooks/README.md", "workshop/README.md", *(f"notebooks/{n}" for n in lessons),
               *(os.path.relpath(os.path.join(d, n), src) for d, _, names in os.walk(os.path.join(src, "docs"))
                 for n in names)}
    for relative in ["notebooks/README.md", "workshop/README.md"] + \
                    [f"docs/{n}" for n in os.listdir(os.path.join(src, "docs")) if n.endswith(".md")]:
        text = open(os.path.join(ROOT, relative)).read()
        with open(os.path.join(src, relative), "w") as f:
            f.write(without_broken_links(text, os.path.dirname(relative), in_book))
    when = datetime.datetime.fromtimestamp(os.path.getmtime(os.path.join(ran, lessons[-1]))).strftime("%Y-%m-%d")
    label = f"{device()} · {machine()} · rdmalab {git_commit()} · QUICK = False · {when}"
    for name in lessons:
        nb = as_book_page(json.load(open(os.path.join(ran, name))), label, in_book)
        banner = {"cell_type": "markdown", "metadata": {}, "id": "ran-on",
                  "source": f"```{{note}}\nEvery output on this page is from one run of the lesson on **{label}**. "
                            f"They are that machine's numbers: run the lesson for yours.\n```\n"}
        first = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown")
        nb["cells"].insert(first + 1, banner)   # (after the title: the page keeps its heading)
        with open(os.path.join(src, "notebooks", name), "w") as f:
            json.dump(nb, f)
    for name in ("_config.yml", "intro.md"):
        shutil.copy(os.path.join(ROOT, "book", name), src)
    shutil.copytree(os.path.join(ROOT, "book", "_static"), os.path.join(src, "_static"))
    with open(os.path.join(src, "_toc.yml"), "w") as f:
        f.write(toc(lessons))
    say("building the pages (jupyter-book)")
    jb = os.path.join(os.path.dirname(sys.executable), "jupyter-book")
    out_ = subprocess.run([jb, "build", "--keep-going", src], capture_output=True, text=True, timeout=1200)
    if out_.returncode != 0 or not os.path.exists(os.path.join(src, "_build", "html", "index.html")):
        raise SystemExit(f"book/build.py: jupyter-book failed ({out_.returncode}):\n{(out_.stdout + out_.stderr)[-3000:]}")
    shutil.rmtree(site, ignore_errors=True)
    shutil.move(os.path.join(src, "_build", "html"), site)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(site) for f in fs)
    say(f"the book: {os.path.join(site, 'index.html')} ({size / 1e6:.1f} MB, built in {time.monotonic() - started:.0f} s)")
    return {"site": site, "bytes": size, "seconds": time.monotonic() - started,
            "warnings": [l for l in (out_.stdout + out_.stderr).splitlines() if "WARNING" in l]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "book"))
    parser.add_argument("--reuse", action="store_true", help="keep the lessons a previous build ran")
    args = parser.parse_args(argv)
    result = build(os.path.abspath(args.out), args.reuse)
    for warning in result["warnings"]:
        print(warning)


if __name__ == "__main__":
    main()
