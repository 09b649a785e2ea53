"""The lessons' exercises, one module per lesson, named after its slug (rdmalab.lessons.series), as are
the exercises ("one-sided.freeze"): each exercise a check (raising Wrong with a hint) and a reference
solution, registered with rdmalab.lessons.exercises when its module is imported.
tests/test_exercises.py holds each check to accepting its reference and rejecting typical wrong answers.
"""
from rdmalab.lessons.checks import (allreduce, in_pytorch, memory_registration, naive_allreduce,  # noqa: F401
                                    on_the_wire, one_sided, posting, queue_pairs, scaling_out, socket_path, target_cpu,
                                    the_answer, training_step, two_sided, welcome, when_it_breaks)
