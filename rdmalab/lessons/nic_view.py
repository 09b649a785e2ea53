"""The glass-box NIC: what a QP pair holds, drawn while the program posts and polls.

    view = lessons.nic_view(pair.a, pair.b)      # shown when it ends a cell; refreshes itself 4 times a second
    ... post, poll ...
    view.refresh()                               # (or at once)
    print(view)                                  # the same as text

For each QP: its state, its number and the one it sends to, the next PSN it sends and the one it
expects, its limits on READs and atomics, and its send and receive queues as rings of slots. Those
come from query_qp() on any device. On soft0, whose NIC is ours to read (rdmalab.verbs.emulated.look),
the view also shows what each waiting WR waits for (an ACK, an RNR timer), the receives posted and the
completions not yet polled, the completions in the CQ, the PD's MRs with their keys, ranges and
access. On a real device those live in the NIC's own memory; the view says so. Both show the port's
error counters (lessons.failures.port_counters: rxe's hw_counters in sysfs, soft0's own).

Nothing here runs on the data path: the view reads the QPs' state when it refreshes, from a thread of
its own while it is shown. It stops when close() is called, or when the lesson's Pair or QPLab closes its
QPs (just before). On soft0 it also stops by itself once its QPs cannot be read. On a real device, call
view.close() before closing QPs of your own that it shows: pyverbs crashes on a QP read after close.
"""
import html
import threading
import weakref

from rdmalab import verbs as v
from rdmalab.verbs import emulated
from rdmalab.lessons.explain import flags
from rdmalab.lessons.failures import ERROR_COUNTERS, port_counters
from rdmalab.lessons.fixtures import BEFORE_CLOSE, STATE_NAMES
from rdmalab.verbs import rc

STATE_COLOURS = {"RESET": "#9e9e9e", "INIT": "#1e88e5", "RTR": "#00897b", "RTS": "#43a047", "SQD": "#fb8c00",
                 "SQE": "#e53935", "ERR": "#e53935"}
SLOT_COLOURS = {"waiting": "#fb8c00", "posted": "#1e88e5", "completed": "#43a047", "free": "#e0e0e0"}
GIVE_UP = 3            # refreshes in a row that fail before the view stops
DRAWN_SLOTS = 32        # a ring larger than this is drawn with its first 32 slots, the rest counted
HIDDEN = ("a real NIC keeps its send and receive rings, its timers and its CQ in its own memory: query_qp() "
          "shows the state, the PSNs and the limits, and the port counters show what crossed the wire")


def snapshot(qp):
    """What can be seen of `qp` now, as a dict: query_qp()'s fields on any device, and on soft0 its NIC's."""
    e = v.enums
    mask = (e.IBV_QP_STATE | e.IBV_QP_DEST_QPN | e.IBV_QP_SQ_PSN | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC
            | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_ACCESS_FLAGS | e.IBV_QP_PATH_MTU | e.IBV_QP_CAP)
    attr, init = qp.query(mask)
    seen = {"qp_num": qp.qp_num, "state": STATE_NAMES.get(attr.qp_state, str(attr.qp_state)),
            "dest_qp_num": attr.dest_qp_num, "sq_psn": attr.sq_psn, "rq_psn": attr.rq_psn,
            "max_rd_atomic": attr.max_rd_atomic, "max_dest_rd_atomic": attr.max_dest_rd_atomic,
            "access": attr.qp_access_flags, "mtu": 128 << attr.path_mtu if attr.path_mtu else 0,
            "send_slots": init.cap.max_send_wr, "recv_slots": init.cap.max_recv_wr}
    held = emulated.look(qp)   # (None on a real device: its NIC keeps its queues to itself)
    seen.update(held or {}, glass=held is not None)
    seen["counters"] = {k: n for k, n in port_counters().items() if k in ERROR_COUNTERS or k.endswith("pkts")}
    return seen


def ring(slots, marks):
    """Slot states for a ring of `slots`: `marks` is [(state, count), ...] from its oldest slot on."""
    states = [state for state, count in marks for _ in range(count)]
    return states + ["free"] * max(slots - len(states), 0)


def queues(seen):
    """The send and receive rings as slot states (on a real device only their sizes are known)."""
    if not seen["glass"]:
        return ["free"] * seen["send_slots"], ["free"] * seen["recv_slots"]
    send = ring(seen["send_slots"], [("waiting", len(seen["send_waiting"]))])
    receive = ring(seen["recv_slots"], [("completed", seen["recv_completed"]), ("posted", len(seen["recv_posted"]))])
    return send, receive


def peers_may(access):
    return flags(access & ~1).replace("no access flags", "nothing")   # (a QP's LOCAL_WRITE bit means nothing)


def lines(seen, name):
    """The view of one QP as lines of text."""
    out = [f"{name}: QP {seen['qp_num']:#x} in {seen['state']}, sends to QP {seen['dest_qp_num']:#x}",
           f"  PSN: next sent {seen['sq_psn']:#08x}, next expected {seen['rq_psn']:#08x}; path MTU {seen['mtu']}",
           f"  READs and atomics at once: {seen['max_rd_atomic']} out, {seen['max_dest_rd_atomic']} in; "
           f"peers may: {peers_may(seen['access'])}"]
    out += ["  " + line for line in queue_lines(seen)]
    if seen["glass"]:
        out += [f"  MR lkey {lkey:#x} rkey {rkey:#x} [{buf:#x}, +{length}) {flags(access)}"
                for lkey, rkey, buf, length, access in seen["mrs"]]
    out.append("  " + port_line(seen))
    return out


def queue_lines(seen):
    """The rings' titles, then the waiting WRs, then the CQ (soft0), or what a real device hides."""
    if not seen["glass"]:
        return [f"send queue: {seen['send_slots']} slots", f"receive queue: {seen['recv_slots']} slots",
                f"({HIDDEN})"]
    cq = f"completions not polled: {seen['send_cq']}"
    if seen["recv_cq"] is not None:
        cq += f" (send CQ), {seen['recv_cq']} (receive CQ)"
    return ([f"send queue: {len(seen['send_waiting'])} of {seen['send_slots']} slots hold a WR"]
            + [f"  wr_id {wr_id} {op}: {stage}" for wr_id, op, stage in seen["send_waiting"]]
            + [f"receive queue: {len(seen['recv_posted'])} posted, {seen['recv_completed']} completed and not "
               f"polled, of {seen['recv_slots']} slots", cq])


def port_line(seen):
    counters = seen.get("counters") or {}
    moved = ", ".join(f"{k} {n}" for k, n in counters.items() if n)
    packets = "" if any(k.endswith("pkts") for k in counters) else " (no packets on soft0's shared-memory link)"
    return f"port counters: {moved or 'all 0'}{packets}"


def _slots_html(states, title):
    drawn = "".join(f"<span title='{s}' style='display:inline-block;width:10px;height:14px;margin:1px;"
                    f"background:{SLOT_COLOURS[s]}'></span>" for s in states[:DRAWN_SLOTS])
    more = f" +{len(states) - DRAWN_SLOTS} free" if len(states) > DRAWN_SLOTS else ""
    return f"<div style='margin-top:4px'>{html.escape(title)}<br>{drawn}<small>{more}</small></div>"


def side_html(seen, name):
    colour = STATE_COLOURS.get(seen["state"], "#616161")
    send, receive = queues(seen)
    text, queued = lines(seen, name), queue_lines(seen)
    head = (f"<b>{html.escape(name)}</b> QP {seen['qp_num']:#x} <span style='background:{colour};color:white;"
            f"padding:0 6px;border-radius:3px'>{seen['state']}</span> &rarr; QP {seen['dest_qp_num']:#x}")
    rest = "<br>".join(html.escape(line.strip()) for line in text[1:3])
    rings = _slots_html(send, queued[0]) + "".join(f"<div style='font-size:11px'>{html.escape(line)}</div>"
                                                   for line in queued[1:-2])
    rings += _slots_html(receive, queued[-2]) + f"<div>{html.escape(queued[-1])}</div>"
    mrs = ""
    if seen["glass"] and seen["mrs"]:
        rows = "".join(f"<tr><td>{lkey:#x}</td><td>{rkey:#x}</td><td>[{buf:#x}, +{length})</td>"
                       f"<td>{html.escape(flags(access))}</td></tr>" for lkey, rkey, buf, length, access in seen["mrs"])
        mrs = (f"<table style='font-size:11px;margin-top:4px'><tr><th>MR lkey</th><th>rkey</th><th>range</th>"
               f"<th>access</th></tr>{rows}</table>")
    return (f"<td style='vertical-align:top;padding:4px 12px;font-size:12px'>{head}<br>{rest}{rings}{mrs}"
            f"<div style='font-size:11px'>{html.escape(port_line(seen))}</div></td>")


SHOWN = weakref.WeakSet()   # the views being redrawn


def _before_close(qps):
    """A lesson's Pair or QPLab is about to close `qps`: draw every view of them once more (cells run back to
    back may close them between two redraws), then stop it."""
    for view in list(SHOWN):
        if any(qp is mine for qp in qps for mine in view.qps):
            view.refresh()
            view.close("its QPs were closed")


BEFORE_CLOSE.append(_before_close)


class NICView:
    """The view of one or more QPs (see the module's docstring)."""

    def __init__(self, *qps, names=None, interval=0.25):
        self.qps, self.names = qps, list(names or ["a", "b", "c", "d"][:len(qps)])
        self.interval, self._stop, self.thread, self.widget = interval, threading.Event(), None, None
        self.refreshes, self.error, self._lock = 0, None, threading.Lock()

    def state(self):
        return [snapshot(qp) for qp in self.qps]

    def __str__(self):
        return "\n".join(line for seen, name in zip(self.state(), self.names) for line in lines(seen, name))

    __repr__ = __str__

    def html(self):
        cells = "".join(side_html(seen, name) for seen, name in zip(self.state(), self.names))
        legend = " ".join(f"<span style='background:{c};padding:0 5px'>&nbsp;</span> {s}"
                          for s, c in SLOT_COLOURS.items())
        return f"<table><tr>{cells}</tr></table><small>slots: {legend}</small>"

    def refresh(self):
        """Read the QPs again and redraw. False when they could not be read: a QP closed, or (soft0, rarely)
        read while the program changed it."""
        try:
            with self._lock:   # close() waits for a read under way, and none starts after it
                if self._stop.is_set():
                    return False
                shown = self.html()
        except Exception as error:
            self.error = f"{type(error).__name__}: {error}"
            return False
        self.refreshes, self.error = self.refreshes + 1, None
        if self.widget is not None and self.widget.value != shown:
            self.widget.value = shown
        return True

    def _run(self):
        failed = 0
        while not self._stop.wait(self.interval):
            failed = 0 if self.refresh() else failed + 1
            if failed == GIVE_UP:   # (soft0) a closed QP fails every time: say so, keep the last drawing, stop
                self.close(f"its QPs cannot be read any more (closed?): {self.error}")
                return

    def _ipython_display_(self):
        import ipywidgets
        from IPython.display import display
        self.widget = ipywidgets.HTML(self.html())
        bundle = self.widget._repr_mimebundle_()
        bundle["text/plain"] = str(self)   # what a copy of the notebook without widgets shows (papermill's, say)
        display(bundle, raw=True)
        if self.thread is None and not self._stop.is_set():
            SHOWN.add(self)
            self.thread = threading.Thread(target=self._run, name="rdmalab-nic-view", daemon=True)
            self.thread.start()

    def step(self, wr, cq):
        """Step mode: `wr`, to be posted on the view's first QP (its completion comes on `cq`), walked
        through the NIC's stages before it is posted (see Step)."""
        return Step(self.qps[0], wr, cq, self)

    def close(self, why=""):
        """Stop refreshing (the drawing stays as it last was, and says why it stopped)."""
        if self._stop.is_set():
            return
        self._stop.set()
        with self._lock:   # a read under way ends before the QPs may be closed
            SHOWN.discard(self)
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(5)
        if self.widget is not None and why:
            self.widget.value += f"<p><small>The view stopped: {html.escape(why)}.</small></p>"


def nic_view(*qps, names=None, interval=0.25):
    """A NICView of `qps` (a pair: the initiator's, then the target's)."""
    return NICView(*qps, names=names, interval=interval)


GENERIC = [("post_send", "the WR takes a slot of the send queue; the NIC reads it (the doorbell)"),
           ("requester checks", "the NIC checks each SGE's lkey and bounds, in its own memory"),
           ("packets", "the message leaves as packets of at most the path MTU, numbered by PSN"),
           ("responder", "the peer's NIC checks its QP's state, the PSN, its access flags, the rkey and range"),
           ("answer", "an ACK (READ: the bytes), or a NAK, or nothing (the requester resends)"),
           ("completion", "a completion on the send CQ, with the status the answer gave")]


class Step:
    """One WR walked through the NIC before it is posted: `stages` [(stage, what happens, passed)], and
    `predicted`, the completion status to expect (None: it waits; "EINVAL": post_send refuses it). On
    soft0 the stages are its NIC's own checks (emulated.walk); on a real device they are
    what every RC NIC does, with no verdict (passed None). post() then posts it and compares.
    Shown in a notebook: a button reveals the next stage, the last one posts."""

    def __init__(self, qp, wr, cq, view=None):
        self.qp, self.wr, self.cq, self.view = qp, wr, cq, view
        walked = emulated.walk(qp, wr)   # (None on a real device: its checks cannot be read)
        self.stages, self.predicted = walked or ([(stage, what, None) for stage, what in GENERIC], None)
        self.glass = walked is not None
        self.shown, self.completion, self.refused = 0, None, None

    def post(self, timeout=5.0):
        """Post the WR and wait for its completion (None if none comes within `timeout` s, or the post was
        refused: then `refused` holds the error). Returns the completion."""
        try:
            self.qp.post_send(self.wr)
        except v.pyverbs_error.PyverbsRDMAError as error:
            self.refused = error
            return None
        try:
            self.completion = rc.wait_for_completion(self.cq, timeout=timeout)
        except TimeoutError:
            self.completion = None
        if self.view is not None:
            self.view.refresh()
        return self.completion

    def outcome(self):
        """What happened, set beside what was predicted."""
        if self.refused is not None:
            got = f"post_send refused it: {self.refused}"
            same = self.predicted == "EINVAL"
        elif self.completion is None:
            got, same = "no completion yet (it waits)", self.predicted is None
        else:
            got = f"completion status {self.completion.status}"
            same = self.completion.status == self.predicted
            if self.completion.status:
                from rdmalab.lessons.explain import explain
                got += f": {explain(self.completion, self.wr, self.qp).said}"
        if not self.glass:
            return f"{got} (a real device: its checks cannot be read, so nothing was predicted)"
        return f"{got} ({'as predicted' if same else 'NOT as predicted: please report it'})"

    def __str__(self):
        mark = {True: "ok", False: "STOP", None: "?"}
        out = [f"{i + 1}. {stage} [{mark[passed]}]: {what}" for i, (stage, what, passed) in enumerate(self.stages)]
        return "\n".join(out)

    __repr__ = __str__

    def _html(self):
        colour = {True: "#43a047", False: "#e53935", None: "#757575"}
        rows = "".join(f"<li><b style='color:{colour[passed]}'>{html.escape(stage)}</b>: {html.escape(what)}</li>"
                       for stage, what, passed in self.stages[:self.shown])
        done = "" if self.completion is None and self.refused is None else \
            f"<p><b>posted</b>: {html.escape(self.outcome())}</p>"
        return f"<ol style='font-size:12px'>{rows}</ol>{done}"

    def _ipython_display_(self):
        import ipywidgets
        from IPython.display import display
        shown = ipywidgets.HTML(self._html())
        button = ipywidgets.Button(description="Next stage")

        def next_stage(_):
            if self.shown < len(self.stages):
                self.shown += 1
                button.description = "Next stage" if self.shown < len(self.stages) else "Post it"
            else:
                self.post()
                button.disabled = True
            shown.value = self._html()

        button.on_click(next_stage)
        box = ipywidgets.VBox([shown, button])
        bundle = box._repr_mimebundle_()
        bundle["text/plain"] = str(self)
        display(bundle, raw=True)
