"""The instructor's view of a class, opt-in: each learner's quiz answers and exercise attempts, one file each.

Nothing is recorded unless the instructor sets RDMALAB_CLASS_DIR (workshop/jupyterhub_config.py sets it
for every learner's server). Then the lessons call

    record_answer("welcome", 2)                     # quiz.save_answer: the learner chose CHOICES[2]
    record_exercise("one-sided.freeze", "passed")    # exercises.attempt: "passed", "wrong" or "not yet"
    record_prediction("socket-path", "syscalls per message", 1, 2.0)   # exercises.compare(..., lesson=)

and each learner's process writes only DIR/<their user name>.json, mode 0644, replaced atomically. The
directory is the instructor's, mode 1733: learners may create files in it but not list it, and the
sticky bit keeps anyone but a file's owner from deleting or replacing it. A file that is not owned
by the user it is named after is ignored by the report (and refused by that user's recording).
A missing or unwritable directory turns recording into a no-op with one warning: never a failed lesson.
Questions and exercises are named by their lesson's slug (rdmalab.lessons.series), so renumbering the
lessons changes no record; a record of the first edition's numbers ("00", "05.ring-step") reads as the
lesson it meant.

    rdmalab class report DIR               # who answered what, who is stuck on which exercise
    from rdmalab.lessons import classroom; classroom.widget()   # the same table in a notebook
"""
import json
import os
import pwd
import sys
import time

from rdmalab.lessons.series import by_slug, number
from rdmalab.lessons.question import ANSWER, CHOICES

ENV = "RDMALAB_CLASS_DIR"
_warned = False


def class_dir():
    """The class directory the instructor chose, or None (recording off)."""
    return os.environ.get(ENV) or None


def me():
    return pwd.getpwuid(os.geteuid()).pw_name


def _warn(why):
    global _warned
    if not _warned:
        _warned = True
        print(f"rdmalab: not recording for the class ({why}); the lesson goes on as usual", file=sys.stderr)


def _own_file(directory, user):
    return os.path.join(directory, f"{user}.json")


def _load(path, uid):
    """The record at `path` if it is a regular file owned by `uid`, else {} (None: owned by someone else)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}
    try:
        st = os.fstat(fd)
        if st.st_uid != uid or st.st_mode & 0o170000 != 0o100000:
            return None
        with os.fdopen(fd, closefd=False) as f:
            return json.loads(f.read() or "{}")
    except ValueError:
        return {}
    finally:
        os.close(fd)


def _update(change):
    """Apply `change(record)` to this learner's own file. True if written; a no-op (one warning) otherwise."""
    directory = class_dir()
    if directory is None:
        return False
    try:
        user, uid = me(), os.geteuid()
        path = _own_file(directory, user)
        record = _load(path, uid)
        if record is None:
            _warn(f"{path} is not yours")
            return False
        record.setdefault("user", user)
        change(record)
        record["updated"] = time.strftime("%Y-%m-%d %H:%M:%S")
        scratch = os.path.join(directory, f".{user}.json.{os.getpid()}")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.fchmod(fd, 0o644)   # whatever the umask: the instructor reads it
            with os.fdopen(fd, "w", closefd=False) as f:
                json.dump(record, f, indent=1)
        finally:
            os.close(fd)
        try:
            os.replace(scratch, path)
        except OSError:
            os.unlink(scratch)
            raise
        return True
    except (OSError, ValueError, KeyError) as error:
        _warn(f"{directory}: {getattr(error, 'strerror', None) or error}")
        return False


def record_answer(key, index):
    """The learner chose choice `index` for question `key` (quiz.save_answer calls this)."""
    def change(record):
        record.setdefault("answers", {})[str(key)] = {"choice": int(index), "at": time.strftime("%H:%M:%S")}
    return _update(change)


def record_exercise(name, status):
    """One attempt at exercise `name`, with its feedback's status (exercises.attempt calls this)."""
    def change(record):
        ex = record.setdefault("exercises", {}).setdefault(name, {"attempts": 0, "status": None})
        ex["attempts"] += 1
        ex["status"] = "passed" if ex["status"] == "passed" or status == "passed" else status
        ex["last"] = time.strftime("%H:%M:%S")
        if status == "passed" and "passed_at" not in ex:
            ex["passed_at"] = ex["last"]
    return _update(change)


def record_prediction(lesson, what, predicted, measured):
    """What the learner predicted in lesson `lesson` (a slug) for `what`, and what they then measured."""
    def change(record):
        record.setdefault("predictions", {}).setdefault(lesson, {})[what] = {"predicted": predicted,
                                                                             "measured": measured}
    return _update(change)


def gather(directory):
    """Every learner's record in `directory`, by user name: only files owned by the user they name."""
    records = {}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name.startswith(".") or not entry.name.endswith(".json"):
            continue
        user = entry.name[:-len(".json")]
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
        record = _load(entry.path, uid)
        if record:
            records[user] = record
    return records


def table(directory):
    """{"answers": {user: {key: choice}}, "passed": {user: [names]}, "stuck": {user: [names]},
    "stuck_on": {exercise: [users]}, "predictions": {lesson: {what: {user: [predicted, measured]}}}}: stuck
    means attempted and not (yet) passed."""
    records = gather(directory)
    out = {"learners": sorted(records), "answers": {}, "passed": {}, "stuck": {}, "stuck_on": {}, "predictions": {}}
    for user, record in records.items():
        for lesson, asked in by_slug(record.get("predictions", {})).items():
            for what, pair in asked.items():
                out["predictions"].setdefault(lesson, {}).setdefault(what, {})[user] = [pair.get("predicted"),
                                                                                         pair.get("measured")]
        out["answers"][user] = {k: v["choice"] for k, v in sorted(by_slug(record.get("answers", {})).items())}
        exercises = by_slug(record.get("exercises", {}))
        out["passed"][user] = sorted(n for n, e in exercises.items() if e["status"] == "passed")
        out["stuck"][user] = sorted(n for n, e in exercises.items() if e["status"] != "passed")
        for name in out["stuck"][user]:
            out["stuck_on"].setdefault(name, []).append(user)
    return out


def _choice(index):
    text = CHOICES[index] if 0 <= index < len(CHOICES) else f"choice {index}"
    return f"{index} {'(right)' if index == ANSWER else ''} {text[:40]}".replace("  ", " ")


def report(directory):
    """The class as text: one line per learner, then the exercises someone is stuck on."""
    t = table(directory)
    if not t["learners"]:
        return f"no learner has recorded anything in {directory} yet"
    lines = [f"{'learner':<20} {'quiz':<50} {'passed':>6}  stuck on"]
    for user in t["learners"]:
        answer = t["answers"][user].get("welcome")
        lines.append(f"{user:<20} {_choice(answer) if answer is not None else '-':<50} "
                     f"{len(t['passed'][user]):>6}  {', '.join(t['stuck'][user]) or '-'}")
    if t["stuck_on"]:
        lines += ["", "stuck (attempted, not passed yet):"]
        lines += [f"  {name}: {', '.join(users)}" for name, users in sorted(t["stuck_on"].items())]
    if t["predictions"]:
        lines += ["", "predicted, then measured (each learner's prediction -> their measurement):"]
        for lesson, asked in sorted(t["predictions"].items(), key=lambda item: number(item[0])):
            for what, by_user in asked.items():
                made = [u for u, (p, _) in sorted(by_user.items()) if p is not None]
                lines.append(f"  {number(lesson)} {what} ({len(made)} of {len(by_user)} predicted first)")
                lines += [f"    {user}: {_shown(p)} -> {_shown(m)}" for user, (p, m) in sorted(by_user.items())]
    return "\n".join(lines)


def _shown(value):
    return "-" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def widget(directory=None):
    """The report as a notebook widget, with a Refresh button."""
    import html

    import ipywidgets as w
    directory = directory or class_dir()
    out = w.HTML()
    button = w.Button(description="Refresh", icon="refresh")

    def refresh(_=None):
        if not directory or not os.path.isdir(directory):
            out.value = f"<i>No class directory: set {ENV} (see workshop/README.md).</i>"
            return
        t = table(directory)
        rows = "".join(
            f"<tr><td>{html.escape(u)}</td><td>{html.escape(str(t['answers'][u].get('welcome', '-')))}</td>"
            f"<td>{len(t['passed'][u])}</td><td>{html.escape(', '.join(t['stuck'][u]) or '-')}</td></tr>"
            for u in t["learners"])
        out.value = ("<table><tr><th>learner</th><th>quiz</th><th>passed</th><th>stuck on</th></tr>"
                     f"{rows}</table>" if rows else f"<i>Nobody has recorded anything in {html.escape(directory)} yet.</i>")

    button.on_click(refresh)
    refresh()
    return w.VBox([button, out])
