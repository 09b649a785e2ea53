"""Which pyverbs a program meets on soft0, pyverbs <= 58 or >= 59: the rule, decided once per process, here.

A real install is one generation or the other. Up to 58 (built with Cython 0.29) it has `pyverbs.enums`
and `pyverbs.cm_enums`, and the attributes pyverbs reads from a C field of an enum type (wc.status,
wc.opcode, qp.qp_state, port_attr.state, ...) are plain ints. From 59 (rdma-core commit a45b3aaa6, the
Cython 3.1 port) those two modules are gone, `pyverbs.libibverbs_enums` and `pyverbs.librdmacm_enums`
hold the enum classes, and the same attributes come back as members of them: Cython 3 converts a C value
of a `cpdef enum` type to its class's member, so `wc.status.name` is 'IBV_WC_SUCCESS' and
`isinstance(wc.status, ibv_wc_status)` holds. soft0 has both generations' modules; a program meets one:

- the generation RDMALAB_PYVERBS names, when it is set (a pyverbs version: 44 or 58 is <= 58, 59 or
  later is >= 59; settings.pyverbs_version());
- otherwise that of the first enum module the program imports: pyverbs.enums or pyverbs.cm_enums decide
  <= 58, pyverbs.libibverbs_enums or pyverbs.librdmacm_enums >= 59 (`from pyverbs import enums` too).

From then on the other generation's modules fail to import, with ModuleNotFoundError as on that install,
so a program that detects the version (try: import pyverbs.libibverbs_enums, except ImportError: import
pyverbs.enums) takes one path and meets that generation throughout. The runner (rdmalab.verbs.run) asks
admit() for each `pyverbs.<enum module>` import; processes the program starts decide for themselves
(RDMALAB_PYVERBS, which they inherit, decides for all). Until a program has decided, and always in the
lab's own code (which reaches soft0 as rdmalab.verbs.soft, not as `pyverbs`, and uses both modules),
nothing is converted: soft0's attributes are what it stores, the plain ints of its own code or what the
program set.

What the decision changes: the fields soft0's modules declare with returns() (those rdma-core v59's
pyverbs/*.pyx return from an enum-typed C field) become properties that give plain ints (<= 58) or
members (>= 59); until then they are plain attributes, so the lab pays nothing for them. Completions,
read for every one, are converted as poll() makes them (cq.new_wc), from tables built once (members()).
One such field is left as the program set it: SendWR.opcode (pyverbs >= 59 returns a member), which
soft0's post_send reads several times per WR: a property there cost a quarter of a post. A program of
>= 59 sets it from ibv_wr_opcode, and so reads back a member anyway.
"""
from functools import partial

OLD, NEW = "<= 58", ">= 59"
MODULES = {"enums": OLD, "cm_enums": OLD, "libibverbs_enums": NEW, "librdmacm_enums": NEW}
LAST_OLD = 58   # the last pyverbs version with pyverbs.enums

chosen = None   # OLD or NEW once decided
why = ""        # what decided it, for the message of an import that fails
_fields = []    # (class, name, enum class): what returns() declared
_wrapped = {}   # (class, name) -> what the class held under that name before decide()
_listeners = []
_ABSENT = object()


def generation_of(version):
    """OLD or NEW for a pyverbs (rdma-core) version number."""
    return OLD if version <= LAST_OLD else NEW


def admit(module):
    """May the program import pyverbs.<module>? An enum module is admitted if it is of the program's
    generation; the first one it imports decides the generation."""
    wanted = MODULES.get(module)
    if wanted is None:
        return True
    if chosen is None:
        decide(wanted, f"its first enum module was pyverbs.{module}")
    return wanted == chosen


def refusal(module):
    """The ModuleNotFoundError of an enum module of the other generation, as the install raises it (with
    what soft0 chose, and why, in parentheses)."""
    name = f"pyverbs.{module}"
    other = "pyverbs <= 58 has it, not >= 59" if MODULES[module] == OLD else "pyverbs >= 59 has it, not <= 58"
    return ModuleNotFoundError(f"No module named {name!r} ({other}; soft0 answers this program as pyverbs "
                               f"{chosen}: {why}. RDMALAB_PYVERBS=44 or 59 chooses)", name=name)


def decide(generation, reason):
    """Fix the program's generation (once: a second call changes nothing)."""
    global chosen, why
    if chosen is not None:
        return
    chosen, why = generation, reason
    for cls, name, enum in _fields:
        _wrap(cls, name, enum)
    for listener in _listeners:
        listener(generation)


def reset():
    """Undecided again, every field as it was (tests that install the runner in their own process)."""
    global chosen, why
    for (cls, name), before in _wrapped.items():
        if before is _ABSENT:
            delattr(cls, name)
        else:
            setattr(cls, name, before)
    _wrapped.clear()
    chosen, why = None, ""
    for listener in _listeners:
        listener(None)


def when_decided(listener):
    """Call listener(OLD or NEW) when the generation is decided (now, if it is), listener(None) on reset()."""
    _listeners.append(listener)
    if chosen is not None:
        listener(chosen)
    return listener


def returns(cls, **fields):
    """Declare fields of `cls` that pyverbs reads from a C field of an enum type: `returns(QPAttr,
    qp_state=ibv_qp_state)`. Once the generation is decided they read as plain ints (<= 58) or as
    members of the enum class (>= 59); a field may be a slot, a property or an instance attribute."""
    for name, enum in fields.items():
        _fields.append((cls, name, enum))
        if chosen is not None:
            _wrap(cls, name, enum)
    return cls


_tables = {}


def members(enum):
    """{value: member} of an enum class: the first member of each value, as Cython's conversion finds it."""
    table = _tables.get(enum)
    if table is None:
        table = _tables[enum] = {}
        for member in enum.__members__.values():
            table.setdefault(int(member), member)
    return table


def returned(enum, value):
    """What the program's pyverbs returns for `value` read from a C field of type `enum`."""
    if chosen is None or not isinstance(value, int):
        return value
    if chosen == OLD:
        return int(value)
    found = members(enum).get(value)
    if found is None:
        try:
            found = enum(value)   # a value no member has: Cython 3 makes an IntFlag of it too
        except ValueError:
            found = int(value)
    return found


def _wrap(cls, name, enum):
    if (cls, name) in _wrapped:
        return
    inner = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
    if hasattr(inner, "__set__"):   # a slot or a property: read and write through it
        get, put = inner.__get__, inner.__set__
    else:                           # an attribute in the instance's __dict__
        def get(obj):
            try:
                return obj.__dict__[name]
            except KeyError:
                raise AttributeError(name) from None

        def put(obj, value):
            obj.__dict__[name] = value
    convert = partial(returned, enum)
    _wrapped[(cls, name)] = cls.__dict__.get(name, _ABSENT)
    setattr(cls, name, property(lambda obj: convert(get(obj)), put, None,
                                f"{name}: a member of {enum.__name__} (pyverbs >= 59) or an int (<= 58)"))
