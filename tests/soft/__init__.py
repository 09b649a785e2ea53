"""Tests of soft0, the emulated NIC, and of nothing else: its shared memory, its isolation between
Unix users, how its NIC wakes a sleeping process. Each says when it skips (on a real device, without
root); the tests of the lab itself, which run on any provider, are in tests/.
"""
