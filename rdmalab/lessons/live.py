"""A line of progress under a running notebook cell, for any cell that takes more than a couple of seconds.

    say = live.status_line()          # in a notebook: an empty line under the cell; elsewhere: print
    say("starting 4 ranks (about 8 s)")
    say("ring over RDMA: 2 of 3 sizes")  # replaces the line: the learner sees where the cell is
"""
import html

MARK = "\u203a"   # what a status line starts with: a glyph every font has (an emoji's box, in a browser without one)


class _Line:
    def __init__(self, text):
        self.text = text

    def _repr_html_(self):
        return f"<p style='color:#57606a;margin:2px 0'>{MARK} {html.escape(self.text)}</p>"

    def __repr__(self):
        return self.text


def status_line():
    """A live status line under the running cell: say(text) replaces it. Outside a notebook, say = print."""
    from IPython import get_ipython
    if get_ipython() is None:
        return print
    from IPython.display import display
    handle = display(_Line("..."), display_id=True)
    return lambda text: handle.update(_Line(text))
