"""Process plumbing every part of the lab uses: helper processes, cluster watchdogs, what a process
spent (/proc), how it waits, and how many CPUs it may use. It imports rdmalab.errors and rdmalab.settings
only: soft0's shared memory, after a helper or a cluster dies, is reaped by what rdmalab.verbs registers
(children.reap_with) and what a cluster names to its watchdog."""
