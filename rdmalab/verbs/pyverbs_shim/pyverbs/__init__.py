"""`import pyverbs` in a process that a program run by `python -m rdmalab.verbs.run` started itself (a
server it spawns with `[sys.executable, "server.py"]`): the runner puts this folder on PYTHONPATH, so
that process gets soft0's modules too, as the program does. Not a package of rdmalab's own."""
from rdmalab.verbs.run import install

install()   # replaces this module in sys.modules with rdmalab.verbs.soft: `import pyverbs` returns that
