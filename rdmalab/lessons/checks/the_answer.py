"""The last lesson (the-answer): its exercises, each a check (raising Wrong with a hint) and a reference.

the-answer.this-machine: the learner lists which of their own figures (answer.gather()) describe only this
machine, given the device the lessons ran on ("soft", "rxe" or "hardware"); the rest hold on any device. The
check compares the list with each Figure's `holds` and names each misfiled figure: one that holds on any device
with why it does, one that does not with its `why_not`. It reads only the Figure objects' public fields.

the-answer.claims: before the closing view, the learner commits to an answer to lesson 00's question and ties it
to three of their own figures. The check wants figures that were recorded, that would come out the same on any
device, that bear on the property claimed and show it, and that come from at least two lessons. Its feedback
names what is wrong with the claim and never the verdict: a wrong choice is rejected by its own evidence (a
figure about something else, or one that shows nothing TCP lacks), without saying which choice is right; the
verdict is the closing view's (issue 47).
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab.lessons.question import ANSWER, CHOICES
from rdmalab.lessons.series import number

# ---- the-answer.this-machine ----

SORT_HINT = ("A figure describes this machine when what it times waits on this machine's scheduler or CPUs: a "
             "ping-pong between two processes, two rings on one host, a training step whose accelerators are "
             "this machine's CPUs, and on Soft-RoCE a copy its kernels make. Counts of syscalls, a stopped "
             "process, a packet's headers, a NIC's refusal are the same everywhere.")
HOLDS_BECAUSE = {   # why a figure holds on any device, by name (answer.NAMES); others get HOLDS_ANYWHERE
    "stopped-target": "a stopped process runs no code on any machine: whatever completed, a NIC did",
    "one-cpu-read": "with one CPU, the TCP request waits for its server to be scheduled and the READ waits for "
                    "no program, on any device",
    "tcp-receiver": "the socket API makes a TCP receiver call the kernel for its messages on every machine",
    "write-target": "a WRITE's target runs no code to receive it, whatever the NIC",
    "tcp-copies": "the kernel copies a TCP stream's bytes the same way whatever NIC is below it",
    "receiver-cpu": "a TCP receiver runs its syscalls on every machine, and a WRITE's target nothing on any",
    "landing": "on this device no CPU of the receiving rank copies what lands by WRITE (soft0's initiator or "
               "a NIC's DMA engine places it)",
    "first-packet": "a packet's headers are the protocol's: every RoCE NIC sends the same",
    "access-refused": "every device's NIC checks the rkey and the access flags, and refuses alike",
    "headers": "a packet's headers are the protocol's: the same on any NIC",
    "go-back-n": "an RC NIC resends from a lost packet on: the protocol's rule, not this machine's",
    "retries": "every RC NIC resends until its retry count runs out, then reports 12",
    "ring-busbw": "your rings ran over the NIC, so their ratio is the device's, not one host's two paths",
}
HOLDS_ANYWHERE = "it counts what a process, a kernel or the protocol does, which no device changes"


@exercise("the-answer.this-machine", "Which of your figures describe only this machine?", hints=[SORT_HINT])
def _check_this_machine(answer, figures, device=None):
    if answer is None:
        raise NotYet("fill in my_this_machine: the names of the figures that describe only this machine", SORT_HINT)
    if not figures:
        raise NotYet("your lessons have recorded no figures yet: run the lessons the table names, then this cell")
    if isinstance(answer, str) or not isinstance(answer, (list, tuple, set)) or \
            not all(isinstance(name, str) for name in answer):
        raise Wrong("return a list of figures' names, as the table's first column writes them", SORT_HINT)
    for name in answer:
        if name not in figures:
            raise Wrong(f"{name!r} is not one of your figures: the names are {', '.join(figures)}")
    listed = set(answer)
    local = {name for name, f in figures.items() if not f.holds}
    if listed and listed == set(figures) - local and local:
        raise Wrong("you listed the figures that hold on any device: list the others, those that describe only "
                    "this machine", SORT_HINT)
    misfiled = [name for name in figures if (name in listed) != (name in local)]
    if not misfiled:
        return
    name, more = misfiled[0], len(misfiled) - 1
    also = f" ({more} more misfiled)" if more else ""
    if name in local:
        raise Wrong(f"{name!r} describes this machine only: {figures[name].why_not or 'it depends on this machine'}."
                    + also, SORT_HINT)
    raise Wrong(f"{name!r} would come out the same on any device: {HOLDS_BECAUSE.get(name, HOLDS_ANYWHERE)}." + also,
                SORT_HINT)


@reference("the-answer.this-machine")
def _this_machine(figures, device):
    mine = {"ping-pong", "step-wait", "ddp-step"}             # the scheduler's hand-offs; CPUs as accelerators
    mine |= {"ring-busbw"} if device != "hardware" else set()  # two rings on one host: its two paths
    mine |= {"landing"} if device == "rxe" else set()         # rxe's kernels copy what lands, on the rank's CPUs
    return [name for name in figures if name in mine]


# ---- the-answer.claims ----

HINT = ("Claim the property your figures show, and cite three that would come out the same on soft0, Soft-RoCE or "
        "a hardware NIC, that are about that property, and that come from two lessons at least.")
# What a figure is about, by the choice it bears on (indexes as CHOICES)
ABOUT = {
    0: "a message's delay",
    1: "the bytes a link carries",
    2: "who does the work when bytes arrive (a CPU, a kernel, or neither)",
    3: "delivery after a loss",
    4: "the API a program calls",
}
# Why a figure about a choice other than the answer shows nothing RDMA has and TCP lacks (indexes as CHOICES)
FLAW = {
    0: "one message's delay, when an AllReduce of gradients moves megabytes a step",
    1: "the wire carries the same bytes for TCP and RDMA: it cannot tell them apart",
    3: "TCP retransmits too: a NIC that resends shows nothing TCP lacks",
    4: "no lesson ran a socket-compatible API: nothing here measured one",
}


@exercise("the-answer.claims", "Your answer to lesson 00's question, tied to your own figures", hints=[HINT])
def _check_claims(answer, figures):
    from rdmalab.lessons.answer import NAMES
    if answer is None:
        raise NotYet("fill in my_answer: {'choice': an index into CHOICES, 'because': three figures' names}", HINT)
    if not isinstance(answer, dict) or set(answer) != {"choice", "because"}:
        raise Wrong("answer with a dict of two keys: {'choice': an index into CHOICES, 'because': [three names from "
                    "the table's first column]}", HINT)
    choice, because = answer["choice"], answer["because"]
    if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < len(CHOICES):
        raise Wrong(f"choice is {choice!r}: write the index of one of the {len(CHOICES)} choices, 0 to {len(CHOICES) - 1}")
    if isinstance(because, str) or not isinstance(because, (list, tuple)) or \
            not all(isinstance(name, str) for name in because):
        raise Wrong("because: a list of figures' names, as the table's first column writes them", HINT)
    for name in because:
        if name not in NAMES:
            raise Wrong(f"{name!r} is not a figure's name: the names are {', '.join(NAMES)}")
        if name not in figures:
            raise Wrong(f"{name!r}: your lessons have not recorded it on this machine (run the lesson that measures "
                        "it, or cite a figure the table shows)")
    if len(set(because)) < 3:
        raise Wrong(f"name three different figures (you named {len(set(because))})", HINT)
    for name in because:
        figure = figures[name]
        if not figure.holds:
            raise Wrong(f"{name!r} would not come out the same on every device: {figure.why_not}.", HINT)
    for name in because:   # (a figure that holds, judged against the claim: never against the verdict)
        about = figures[name].bears_on
        if about != choice:
            raise Wrong(f"{name!r} is about {ABOUT[about]}, not {ABOUT[choice]}, so it does not argue for your "
                        "claim" + (f"; and {FLAW[about]}." if about in FLAW else "."), HINT)
        if choice in FLAW:
            raise Wrong(f"{name!r} is about {ABOUT[choice]}, as your claim is, but {FLAW[choice]}.", HINT)
    if choice != ANSWER:   # (every figure about a wrong choice has a FLAW: not reached)
        raise Wrong("your figures do not show RDMA doing what TCP cannot in your claim.", HINT)
    lessons = {figures[name].lesson for name in because}
    if len(lessons) < 2:
        raise Wrong(f"all three come from lesson {number(lessons.pop())}: tie the answer to at least two lessons' "
                    "figures, so that one experiment's flaw cannot carry it", HINT)


@reference("the-answer.claims")
def _my_answer(figures):
    # three figures from three lessons, each the same on any device: the target's CPU did nothing (05), a TCP
    # receiver's did (01), and the packet itself told the target's NIC where the bytes go (13)
    strongest = ["stopped-target", "tcp-receiver", "first-packet", "one-cpu-read", "access-refused", "tcp-copies",
                 "write-target", "receiver-cpu"]
    return {"choice": 2, "because": [name for name in strongest if name in figures][:3]}
