"""Helpers the lessons share. The package's rule: lessons may import everything else of rdmalab;
nothing else of rdmalab imports lessons (but the `rdmalab class report` command, an entry point).

    series.py      the lessons in order, each named by a slug ("one-sided"): what outlives a lesson is keyed
                   by slug, never by number; length.py: each lesson's time by the guide's estimate
    quiz.py        the opening question (welcome), its choices, the answer and why, the saved answers
    answer.py      the last lesson's (the-answer) figures and closing view: the answer from the learner's own
                   numbers (socket-path, one-sided, target-cpu, allreduce, training-step, in-pytorch,
                   on-the-wire, when-it-breaks)
    nccl.py        NCCL in practice (allreduce): LL/LL128/Simple's bytes per flag, ring against tree steps
    fixtures.py    QP state diagrams, connected pairs (Pair, one_sided), queue-pairs' QPLab, posting's
                   poll_or_sleep and post_writes
    exercises.py   the exercise framework; checks/ the checks and reference solutions, a module per lesson;
                   checking.py the AllReduce exercises' checking transport (a learner's AllReduce on threads)
    ranks_and_cpus.py  allreduce's ranks, a CPU each; its tables' takeaways (or the word that a run was
                   disturbed); ranks that share CPUs, as an experiment of its own
    explain.py     why a work request failed: the rule and the numbers (soft0's own checks, run again), or
                   what the status and the WR tell on a real device
    nic_view.py    the glass-box NIC: a QP pair's state, PSNs, queues as rings of slots, CQ, MRs and counters,
                   redrawn while cells run (soft0's own state; query_qp's on a real device)
    evidence.py    what the learner measured, kept so that the last lesson answers with their own numbers
    classroom.py   the instructor's opt-in view: answers and exercises recorded in a class directory
    training.py    training-step: data-parallel training on a Cluster, replicas checked, each rank's step drawn;
                   in-pytorch: a rank computing while gradients land, DDP on Gloo and with the learner's hook
                   (rdmalab.allreduce.training and .ddp run on the ranks)
    scaling.py     scaling-out: the model judged on unseen sizes, 4-rank times, the cluster charts and explorer
    target.py      one-sided's and target-cpu's second process (RemoteBuffer); dashboard.py, plots.py: charts and widgets
    cm_peer.py     two-sided's second process for rdma_cm (CMPeer), and a CMID's QP numbers
    packets.py     on-the-wire: a capture of rxe (captures/) decoded as Wireshark shows it, a ladder diagram,
                   the bytes a message puts on the wire
    failures.py    when-it-breaks: a pair broken each way, NCCL's line for it

The names notebooks use are here too: `from rdmalab import lessons; lessons.quiz()`,
`from rdmalab.lessons import Pair, QPLab`. (`lessons.quiz` is the function: for the module's other
names, `from rdmalab.lessons.quiz import ...`.)
"""
from rdmalab.lessons import checks  # noqa: F401  (the lessons' exercises register themselves)
from rdmalab.lessons.fixtures import (MEANING, REQUIRED, STATE_NAMES, Pair, QPLab, draw_qp_states, one_sided,
                                      poll_or_sleep, post_writes, state_of, wait_for_sends)
from rdmalab.lessons.explain import explain
from rdmalab.lessons.cm_peer import CMPeer, qp_numbers
from rdmalab.lessons.nic_view import nic_view
from rdmalab.lessons.quiz import ANSWER, ANSWERS_FILE, CHOICES, QUESTION, WHY, load_answers, quiz, save_answer
from rdmalab.lessons import answer, nccl  # modules: answer.closing_view(), nccl.protocols()

__all__ = ["MEANING", "REQUIRED", "STATE_NAMES", "Pair", "QPLab", "draw_qp_states", "one_sided", "state_of",
           "poll_or_sleep", "post_writes", "wait_for_sends", "explain", "CMPeer", "qp_numbers", "nic_view", "ANSWER", "ANSWERS_FILE", "CHOICES", "QUESTION", "WHY", "load_answers", "quiz",
           "save_answer", "answer", "nccl"]
