"""The last lesson (the-answer): its exercise, a check (raising Wrong with a hint) and a reference.

the-answer.claims: before the closing view, the learner commits to an answer to lesson 00's question and ties it
to three of their own figures (answer.gather(): each named, with the lesson that measured it). The check wants
the answer, and figures that were recorded, that would come out the same on any device (not a ping-pong between
two processes, not two rings on one host), that bear on the answer rather than on another choice, and that come
from at least two lessons; each wrong claim is named with why.
"""
from rdmalab.lessons.exercises import NotYet, Wrong, exercise, reference
from rdmalab.lessons.question import ANSWER, CHOICES, WHY
from rdmalab.lessons.series import number

HINT = ("Keep the figures that would come out the same on soft0, Soft-RoCE or a hardware NIC, and that show "
        "who does the work when bytes arrive: the remote CPU, a kernel, or neither.")
# Why a figure about another choice does not argue for the answer (indexes as CHOICES)
ANOTHER_CHOICE = {
    0: "a message's delay is the alpha term, a few steps of a ring; the bytes decide the rest.",
    1: "the wire carries the same bytes for TCP and RDMA: it cannot tell them apart.",
    3: "TCP retransmits too: what this shows is who does the work (the NIC), which is the answer's "
       "point, not reliability's.",
    4: "an API is not what moves the bytes.",
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
    if choice != ANSWER:
        raise Wrong(f"'{CHOICES[choice]}' is not the answer: {WHY[choice]}", HINT)
    for name in because:
        figure = figures[name]
        if not figure.holds:
            raise Wrong(f"{name!r} would not come out the same on every device: {figure.why_not}.", HINT)
        if figure.bears_on != ANSWER:
            raise Wrong(f"{name!r} is evidence about '{CHOICES[figure.bears_on]}', not for the answer: "
                        f"{ANOTHER_CHOICE[figure.bears_on]}", HINT)
    lessons = {figures[name].lesson for name in because}
    if len(lessons) < 2:
        raise Wrong(f"all three come from lesson {number(lessons.pop())}: tie the answer to at least two lessons' "
                    "figures, so that one experiment's flaw cannot carry it", HINT)


@reference("the-answer.claims")
def _my_answer(figures):
    # three figures from three lessons, each the same on any device: the target's CPU did nothing (04), a TCP
    # receiver's did (01), and the packet itself told the target's NIC where the bytes go (10)
    strongest = ["stopped-target", "tcp-receiver", "first-packet", "one-cpu-read", "access-refused", "tcp-copies",
                 "write-target", "receiver-cpu"]
    return {"choice": 2, "because": [name for name in strongest if name in figures][:3]}
