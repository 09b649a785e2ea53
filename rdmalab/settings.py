"""The lab's numeric RDMALAB_* settings, read from the environment and checked in one place: a value
that is not a number in range stops the program with a message naming the variable, what it takes
and how to get the default back, never a traceback from deep inside the lab."""
import math
import os


def number(name, default, low=0.0, high=math.inf, what="a number", environ=os.environ):
    """The setting `name` as a float, `default` when it is unset or empty."""
    text = environ.get(name, "")
    if not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not low <= value <= high:   # (NaN is never in range)
        raise SystemExit(f"rdmalab: {name}={text!r} is not {what}: set it to one, or unset it for the "
                         f"default ({default:g})")
    return value
