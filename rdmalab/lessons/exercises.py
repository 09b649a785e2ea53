"""Checked exercises: a skeleton for the learner, a check with feedback and hints, a reference solution.

In a lesson:
    def my_answer(...):
        ...                      # the learner's code; `return None` (the skeleton) means "not yet"
    result = exercises.attempt("memory-registration.write-not-read", my_answer, pd)

attempt() runs the learner's function and checks what it returns. Right: a green note, and its
result. Not done yet or wrong: feedback (what is wrong, a hint), then the lesson goes on with the
reference solution's result, so later cells still work. Every exercise shows a "Show solution" button
under its feedback (`exercises.solution(name)` does the same from code): the reference as the learner
would write it, under the learner's function's name (solution_source()).
Every check is tested to accept the reference and reject typical wrong answers (tests/test_exercises.py).

A predict-first check is lighter: the learner writes a number down in one cell, the next cell measures
and shows both (`exercises.compare(...)`); nothing is judged right or wrong, and it is no exercise.
"""
import ast
import html
import inspect
import textwrap

from rdmalab.errors import explain_error
from rdmalab.lessons import classroom

REGISTRY = {}


class NotYet(Exception):
    """Raised by a check when the learner's code is still the skeleton (NotImplementedError, or a message saying
    how the check could tell); `hint`, what to do first, if not the exercise's first hint."""

    def __init__(self, message="", hint=""):
        super().__init__(message)
        self.hint = hint


class Wrong(Exception):
    """Raised by a check: the message says what is wrong; `hint` how to get it right."""

    def __init__(self, message, hint=""):
        super().__init__(message)
        self.hint = hint


class Exercise:
    def __init__(self, name, title, check, reference, hints):
        self.name, self.title, self.check, self.reference, self.hints = name, title, check, reference, hints
        self.answer_name = None   # the learner's function's name, once attempt() has seen it


def exercise(name, title, hints=()):
    """Decorator for a check function `check(answer, *args)`; the reference goes in `.reference`."""
    def register(check):
        REGISTRY[name] = Exercise(name, title, check, None, list(hints))
        return check
    return register


def reference(name):
    """Decorator: the reference solution of exercise `name`."""
    def register(fn):
        REGISTRY[name].reference = fn
        return fn
    return register


class Feedback:
    """What attempt() found: shown as a coloured box in a notebook, as text elsewhere."""

    def __init__(self, name, status, message, hint=""):
        self.name, self.status, self.message, self.hint = name, status, message, hint

    @property
    def passed(self):
        return self.status == "passed"

    def __str__(self):
        lines = [f"[{self.status}] {REGISTRY[self.name].title}: {self.message}"]
        if self.hint:
            lines.append(f"hint: {self.hint}")
        if not self.passed:
            lines.append(f"The lesson continues with the reference solution: 'Show solution' (or "
                         f"exercises.solution({self.name!r})) shows it.")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self):
        colour = {"passed": "#1a7f37", "not yet": "#9a6700"}.get(self.status, "#cf222e")
        body = f"<b>{html.escape(REGISTRY[self.name].title)}</b>: {html.escape(self.message)}"
        if self.hint:
            body += f"<br><i>Hint:</i> {html.escape(self.hint)}"
        if not self.passed:
            body += "<br>The lesson continues with the reference solution: <i>Show solution</i> shows it."
        return f"<div style='border-left:4px solid {colour};padding:4px 10px;margin:4px 0'>{body}</div>"


def check(name, answer, *args):
    """Feedback on a learner's answer (already computed): passed, not yet (None) or wrong."""
    ex = REGISTRY[name]
    if answer is None:
        return Feedback(name, "not yet", "no answer yet (the skeleton returns None).", ex.hints[0] if ex.hints else "")
    try:
        ex.check(answer, *args)
    except NotYet as not_yet:   # (every "not yet" begins alike: a learner, and the browser test, look for it)
        said = f"no answer yet: {not_yet}" if str(not_yet) else "no answer yet (the skeleton raises NotImplementedError)."
        return Feedback(name, "not yet", said, not_yet.hint or (ex.hints[0] if ex.hints else ""))
    except Wrong as wrong:
        return Feedback(name, "wrong", str(wrong), wrong.hint or (ex.hints[0] if ex.hints else ""))
    return Feedback(name, "passed", "correct.")


def attempt(name, fn, *args, check_args=()):
    """Run the learner's `fn(*args)`, check it (with `check_args` too), show feedback; returns a
    correct result either way: the learner's when it passed, else the reference solution's."""
    from IPython.display import display
    ex = REGISTRY[name]
    if getattr(fn, "__name__", "").isidentifier():   # not a lambda: the solution is shown under this name
        ex.answer_name = fn.__name__
    try:
        answer = fn(*args)
        feedback = check(name, answer, *args, *check_args)
    except Exception as error:   # the learner's code raised: that is feedback too
        feedback = Feedback(name, "wrong", f"your code raised {type(error).__name__}: {error}",
                            (ex.hints[0] if ex.hints else "") or explain_error(error))
    classroom.record_exercise(name, feedback.status)   # the instructor's view, when RDMALAB_CLASS_DIR is set
    display(feedback)
    display(solution_button(name))
    return answer if feedback.passed else ex.reference(*args)


def solution_source(name):
    """The reference solution as the learner would write it, without the checks module's plumbing (its
    decorator and private name). A reference that takes nothing and returns a function (the lesson asks
    for a function: `attempt(name, lambda: my_fn)`) is shown as that function; any other is shown under
    the name of the learner's function (`def my_write(...)`), or its own without a leading underscore. A
    reference that returns several functions (`attempt(name, lambda: (my_naive, my_ring))`) shows each."""
    ex = REGISTRY[name]
    reference = ex.reference
    if not inspect.signature(reference).parameters:
        made = reference()
        made = made if isinstance(made, tuple) else (made,)
        if all(inspect.isfunction(fn) for fn in made):
            return "\n\n".join(textwrap.dedent(inspect.getsource(fn)) for fn in made)
    source = textwrap.dedent(inspect.getsource(reference))
    definition = ast.parse(source).body[0]
    lines = source.splitlines(keepends=True)[definition.lineno - 1:]   # from `def`: decorators left out
    shown = ex.answer_name or reference.__name__.lstrip("_") or "solution"
    lines[0] = lines[0].replace(f"def {reference.__name__}(", f"def {shown}(", 1)
    return "".join(lines)


def solution(name):
    """The reference solution's source, to read after trying."""
    from IPython.display import Code, display
    display(Code(solution_source(name), language="python"))


def _shown(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"


def compare(what, predicted, measured, meaning="", lesson=None):
    """A predict-first check: what the learner wrote down before a measurement (`predicted`, a number or
    a choice; None if they wrote nothing) beside what was measured, and what the measurement means. It
    judges nothing and never fails: a prediction is for learning, and a noisy machine moves measurements.
    With `lesson` (its slug) both are kept: the last lesson shows the learner's predictions beside their
    numbers (evidence.keep_prediction), and an instructor's class report the class's (classroom).
    Returns {"predicted": ..., "measured": ...}, to keep with the lesson's figures."""
    if lesson is not None:
        from rdmalab.lessons import evidence
        evidence.keep_prediction(lesson, what, predicted, measured)
        classroom.record_prediction(lesson, what, predicted, measured)
    if predicted is None:
        said = f"{what}: measured {_shown(measured)} (you wrote no prediction: next time, write it first)."
    else:
        said = f"{what}: you predicted {_shown(predicted)}, measured {_shown(measured)}."
    print("\n".join(textwrap.fill(text, 96, subsequent_indent="  ") for text in (said, meaning) if text))   # fits a laptop's notebook
    return {"predicted": predicted, "measured": measured}


def solution_button(name):
    """A "Show solution" button that reveals the reference solution's code under it, once pressed."""
    import ipywidgets as w
    button = w.Button(description="Show solution", icon="eye", tooltip=f"the reference solution of {name}")
    shown = w.Output()

    def show(_):
        with shown:
            solution(name)
        button.disabled = True

    button.on_click(show)
    return w.VBox([button, shown])
