"""A hook file that fails while it is imported (the tests check the traceback names this line)."""
import math

THRESHOLD = math.sqrt(-1)


def reward(args, sample):
    return THRESHOLD
