"""Process plumbing every part of the lab uses: helper processes, cluster watchdogs, what a process
spent (/proc), how it waits, and how many CPUs it may use. It imports nothing else of rdmalab."""
