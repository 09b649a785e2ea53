"""The lessons' exercises, one module per lesson: each exercise a check (raising Wrong with a hint)
and a reference solution, registered with rdmalab.lessons.exercises when its module is imported.
tests/test_exercises.py holds each check to accepting its reference and rejecting typical wrong answers.
"""
from rdmalab.lessons.checks import lesson00, lesson01, lesson02, lesson03, lesson04, lesson05, lesson06  # noqa: F401
from rdmalab.lessons.checks.lesson04 import deliver  # noqa: F401  (lesson 04 calls it after its exercise)
